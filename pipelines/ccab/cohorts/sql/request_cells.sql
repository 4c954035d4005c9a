-- request_cells: the goodput histograms of one hour, as cells (-> cohort_cells_hourly_stage).
-- Same bulk requests, values and segments ('all', RTT class, size class) as request_metrics.sql
-- (which writes their sums and counts).
-- How: ONE aggregation per (cohort, bin) — each value hashed once — with each fixed
-- segment's count as a column (count() is 'all', countIf(...) each class), then one row per
-- non-zero column (see connection_cells.sql). Only values > 0 are binned (0018_cohort_cells.sql).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours), bulk_min_bytes UInt64.
WITH
-- include: _bulk_requests.sql
-- include: _request_values.sql
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
