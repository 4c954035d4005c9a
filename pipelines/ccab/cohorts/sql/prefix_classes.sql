-- prefix_classes: each client prefix's RTT class per hour of [hour_start, hour_end) (-> cohort_prefix_hourly_stage).
-- Grain: one row per hour x pop x peer_prefix with at least one tcp sample in the hour.
-- Source grain: tcp samples (every sample of every arm; min RTT is a path property, and pooling
-- the arms gives both arms the same class, so the class is not an outcome of the treatment).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
samples AS (
    SELECT toStartOfHour(ts) AS hour, pop, peer_prefix, min_rtt_us
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
),
per_prefix AS (
    SELECT hour,
           pop,
           peer_prefix,
           count()                              AS samples,
           quantileExactLow(0.5)(min_rtt_us)    AS min_rtt_us_median
    FROM samples
    GROUP BY hour, pop, peer_prefix
)
SELECT hour,
       pop,
       peer_prefix,
       samples,
       min_rtt_us_median,
       multiIf(min_rtt_us_median < 20000,  'rtt:0-20ms',
               min_rtt_us_median < 50000,  'rtt:20-50ms',
               min_rtt_us_median < 100000, 'rtt:50-100ms',
               min_rtt_us_median < 200000, 'rtt:100-200ms',
                                           'rtt:200ms+')    AS rtt_class
FROM per_prefix
