-- connection_cells: the histograms of the per-connection metrics of one hour, as cells
-- (-> cohort_cells_hourly_stage: one row per hour x cohort x segment x metric x bin, its count).
-- Same connections, metrics, values and segments as connection_metrics.sql (which writes their
-- sums and counts); only values > 0 are binned: bin = floor(log2(value) * 128) (0018_cohort_cells.sql).
-- How: ONE aggregation per (cohort, metric, bin) — each value hashed once — with each fixed
-- segment's count as a column: count() is 'all', countIf(is_bulk) 'bulk', countIf(rtt_class = c)
-- each RTT class (the classes partition 'all'); then one row per non-zero column. No Map, no
-- GROUPING SETS, no value copied into each segment it belongs to.
-- The aggregation keys on a 64-bit hash of the cohort's keys and the metric's position (fixed-width
-- keys hash faster than strings) and carries the keys with any(); a collision between two of an
-- hour's few thousand cohorts has a probability of ~1e-12.
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
connections AS (
    SELECT *,
           cityHash64(hour, pop, rollout_id, arm, kernel, cc, cc_version, host) AS cohort_id,
           if(rtt_us >= min_rtt_us, toFloat64(rtt_us) - toFloat64(min_rtt_us), NULL) AS queue_delay_us
    FROM cohort_connections_stage
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
-- the values of connection_metrics.sql, in the same order (metric = position in METRICS below)
metric_values AS (
    SELECT cohort_id, hour, pop, rollout_id, arm, kernel, cc, cc_version, host, rtt_class, is_bulk,
           mv.1 AS m, mv.2 AS value
    FROM connections
    ARRAY JOIN arrayZip(range(11), [
        CAST(retrans_pct        AS Nullable(Float64)),
        CAST(inflight_bytes     AS Nullable(Float64)),
        CAST(rtt_us             AS Nullable(Float64)),
        CAST(min_rtt_us         AS Nullable(Float64)),
        CAST(bbr_min_rtt_us     AS Nullable(Float64)),
        CAST(delivery_rate_bps  AS Nullable(Float64)),
        CAST(rwnd_limited_pct   AS Nullable(Float64)),
        CAST(sndbuf_limited_pct AS Nullable(Float64)),
        CAST(rto_count          AS Nullable(Float64)),
        queue_delay_us,
        if(rtt_us > 0, 100 * queue_delay_us / rtt_us, NULL)
    ]) AS mv
    WHERE value IS NOT NULL AND isFinite(value) AND value > 0
),
cells AS (
    SELECT cohort_id, m, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           count()                                AS n_all,
           countIf(is_bulk)                       AS n_bulk,
           countIf(rtt_class = 'rtt:0-20ms')      AS n_rtt_0_20,
           countIf(rtt_class = 'rtt:20-50ms')     AS n_rtt_20_50,
           countIf(rtt_class = 'rtt:50-100ms')    AS n_rtt_50_100,
           countIf(rtt_class = 'rtt:100-200ms')   AS n_rtt_100_200,
           countIf(rtt_class = 'rtt:200ms+')      AS n_rtt_200,
           countIf(rtt_class = 'rtt:unknown')     AS n_rtt_unknown
    FROM metric_values
    GROUP BY cohort_id, m, bin
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, s.1 AS segment,
       ['retrans_pct', 'inflight_bytes', 'rtt_us', 'min_rtt_us', 'bbr_min_rtt_us', 'delivery_rate_bps',
        'rwnd_limited_pct', 'sndbuf_limited_pct', 'rto_count', 'queue_delay_us', 'queue_delay_pct'][m + 1] AS metric,
       bin, s.2 AS count
FROM cells
ARRAY JOIN [('all', n_all), ('bulk', n_bulk), ('rtt:0-20ms', n_rtt_0_20), ('rtt:20-50ms', n_rtt_20_50),
            ('rtt:50-100ms', n_rtt_50_100), ('rtt:100-200ms', n_rtt_100_200), ('rtt:200ms+', n_rtt_200),
            ('rtt:unknown', n_rtt_unknown)] AS s
WHERE s.2 > 0
