-- request_cells: the goodput histograms of one hour, as cells (-> cohort_cells_hourly_stage).
-- Same bulk requests, values and segments ('all', RTT class, size class) as request_metrics.sql
-- (which writes their sums and counts).
-- How: ONE aggregation per (cohort, bin) — each value hashed once — with each fixed
-- segment's count as a column (count() is 'all', countIf(...) each class), then one row per
-- non-zero column (see connection_cells.sql). Only values > 0 are binned (0018_cohort_cells.sql).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
bulk_requests AS (
    SELECT toStartOfHour(ts) AS hour, pop, rollout_id, arm, kernel, cc, host, peer_prefix, body_bytes_sent, request_time_ms,
           if(sample_rate > 0, 1 / sample_rate, 0)                              AS weight
    FROM http_requests
    WHERE ts >= {hour_start:DateTime('UTC')}
      AND ts < {hour_end:DateTime('UTC')}
      AND body_bytes_sent >= {bulk_min_bytes:UInt64}
),
classes AS (
    SELECT hour, pop, peer_prefix, rtt_class
    FROM cohort_prefix_hourly_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
versions AS (
    SELECT hour, pop, host, cc, max(cc_version) AS cc_version
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
    GROUP BY hour, pop, host, cc
),
computed AS (
    SELECT r.hour AS hour, r.pop AS pop, r.rollout_id AS rollout_id, r.arm AS arm, r.kernel AS kernel, r.cc AS cc,
           r.host AS host, r.weight AS weight,
           v.cc_version                                                         AS cc_version,
           cityHash64(r.hour, r.pop, r.rollout_id, r.arm, r.kernel, r.cc, v.cc_version, r.host) AS cohort_id,
           if(r.request_time_ms > 0,
              r.body_bytes_sent * 8 / (r.request_time_ms / 1000), NULL)          AS value,
           toFloat64(r.body_bytes_sent * 8)                                     AS num,
           r.request_time_ms / 1000                                             AS den,
           if(p.rtt_class = '', 'rtt:unknown', p.rtt_class)                     AS rtt_class,
           multiIf(r.body_bytes_sent < 4194304,  'size:<4MiB',
                   r.body_bytes_sent < 16777216, 'size:4-16MiB',
                                                 'size:16MiB+')                 AS size_class
    FROM bulk_requests AS r
    LEFT JOIN classes AS p ON p.hour = r.hour AND p.pop = r.pop AND p.peer_prefix = r.peer_prefix
    LEFT JOIN versions AS v ON v.hour = r.hour AND v.pop = r.pop AND v.host = r.host AND v.cc = r.cc
),
classified AS (
    SELECT *,
           value IS NOT NULL AND isFinite(value) AND value >= 0                 AS valid
    FROM computed
),
cells AS (
    SELECT cohort_id, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           count()                                AS n_all,
           countIf(rtt_class = 'rtt:0-20ms')       AS n_0,
           countIf(rtt_class = 'rtt:20-50ms')      AS n_1,
           countIf(rtt_class = 'rtt:50-100ms')     AS n_2,
           countIf(rtt_class = 'rtt:100-200ms')    AS n_3,
           countIf(rtt_class = 'rtt:200ms+')       AS n_4,
           countIf(rtt_class = 'rtt:unknown')      AS n_5,
           countIf(size_class = 'size:<4MiB')      AS n_6,
           countIf(size_class = 'size:4-16MiB')    AS n_7,
           countIf(size_class = 'size:16MiB+')     AS n_8
    FROM classified
    WHERE valid AND value > 0
    GROUP BY cohort_id, bin
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, s.1 AS segment, 'goodput_bps' AS metric, bin, s.2 AS count
FROM cells
ARRAY JOIN [('all', n_all), ('rtt:0-20ms', n_0), ('rtt:20-50ms', n_1), ('rtt:50-100ms', n_2), ('rtt:100-200ms', n_3), ('rtt:200ms+', n_4), ('rtt:unknown', n_5), ('size:<4MiB', n_6), ('size:4-16MiB', n_7), ('size:16MiB+', n_8)] AS s
WHERE s.2 > 0
