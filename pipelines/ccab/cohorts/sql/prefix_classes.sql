-- prefix_classes: each client prefix's RTT class for one hour (-> cohort_prefix_hourly_stage).
-- Grain: one row per pop x peer_prefix with at least one tcp sample in the hour.
-- Source grain: tcp samples (every sample of every arm; min RTT is a path property, and pooling
-- the arms gives both arms the same class, so the class is not an outcome of the treatment).
-- Parameters: hour_start DateTime('UTC').
WITH
samples AS (
    SELECT pop, peer_prefix, min_rtt_us
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_start:DateTime('UTC')} + INTERVAL 1 HOUR
),
per_prefix AS (
    SELECT pop,
           peer_prefix,
           count()                              AS samples,
           quantileExactLow(0.5)(min_rtt_us)    AS min_rtt_us_median
    FROM samples
    GROUP BY pop, peer_prefix
)
SELECT {hour_start:DateTime('UTC')}             AS hour,
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
