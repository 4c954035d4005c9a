-- _sample_values (a fragment: `-- include: _sample_values.sql` after WITH): the hour's tcp samples with their weights, RTT classes and per-metric values, used by
-- sample_cells.sql and sample_metrics.sql.
-- Ends with a comma: the including statement's WITH list goes on after it.
samples AS (
    SELECT cityHash64(toStartOfHour(ts), pop, rollout_id, arm, kernel, cc, cc_version, host) AS cohort_id,
           toStartOfHour(ts) AS hour, pop, rollout_id, arm, kernel, cc, ifNull(cc_version, 0) AS cc_version, host, peer_prefix,
           if(sample_rate > 0, 1 / sample_rate, 0)                              AS weight,
           toInt64(send_q_bytes) - toInt64(notsent_bytes)                       AS inflight_bytes,
           rtt_us
    FROM tcp_samples
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
),
classes AS (
    SELECT hour, pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
classed AS (
    SELECT s.cohort_id AS cohort_id, s.hour AS hour, s.pop AS pop, s.rollout_id AS rollout_id, s.arm AS arm, s.kernel AS kernel, s.cc AS cc,
           s.cc_version AS cc_version, s.host AS host, s.weight AS weight,
           s.inflight_bytes AS inflight_bytes, s.rtt_us AS rtt_us,
           if(p.rtt_class = '', 'rtt:unknown', p.rtt_class)                     AS rtt_class
    FROM samples AS s
    LEFT JOIN classes AS p ON p.hour = s.hour AND p.pop = s.pop AND p.peer_prefix = s.peer_prefix
),
metric_values AS (
    SELECT cohort_id, hour, pop, rollout_id, arm, kernel, cc, cc_version, host, rtt_class, weight,
           m.1 AS metric, m.2 AS value
    FROM classed
    ARRAY JOIN [
        ('inflight_bytes_per_sample', toFloat64(inflight_bytes)),
        ('rtt_us_per_sample',         toFloat64(rtt_us))
    ] AS m
),
classified AS (
    SELECT *,
           isFinite(value) AND value >= 0                                       AS valid
    FROM metric_values
),
