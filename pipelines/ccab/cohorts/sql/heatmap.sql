-- heatmap: joint distributions of one hour for heatmaps (-> cohort_heatmap_hourly_stage).
-- Grain: one row per hour x cohort x segment x pair x x_bin x y_bin, counting connections.
-- Source grain: one value pair per connection (cohort_connections_stage: its last sample).
-- Pairs (x:y): 'rtt_us:retrans_pct', 'rtt_us:inflight_bytes'. Segments: 'all', 'bulk' and the
-- client prefix's access type 'access:mobile|fixed|satellite|hosting|unknown' (the same lookup as
-- network_metrics.sql: one prefix_networks_dict probe per distinct prefix of the hour; a
-- pre-treatment segment; the access segments partition 'all').
-- Bins: floor(log2(value) * 8) (9% wide; = the fine cohort_hourly bin divided by 16, floored);
-- value 0 -> sentinel -2147483648; a connection with either value missing is left out (it is
-- counted in cohort_hourly.n_missing of that metric).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
access AS (
    SELECT peer_prefix,
           concat('access:', dictGetOrDefault('prefix_networks_dict', 'access',
                             toIPv6OrDefault(splitByChar('/', peer_prefix)[1]), 'unknown')) AS access_segment
    FROM (SELECT DISTINCT peer_prefix FROM cohort_connections_stage
          WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')})
),
pairs AS (
    SELECT cityHash64(hour, pop, rollout_id, arm, kernel, cc, cc_version, host) AS cohort_id,
           hour, pop, rollout_id, arm, kernel, cc, cc_version, host, is_bulk, a.access_segment AS access_segment,
           p.1 AS pair, p.2 AS x, p.3 AS y
    FROM cohort_connections_stage AS c
    LEFT JOIN access AS a ON a.peer_prefix = c.peer_prefix
    ARRAY JOIN [
        ('rtt_us:retrans_pct',    toFloat64(rtt_us), CAST(retrans_pct    AS Nullable(Float64))),
        ('rtt_us:inflight_bytes', toFloat64(rtt_us), CAST(inflight_bytes AS Nullable(Float64)))
    ] AS p
    WHERE hour >= {hour_start:DateTime('UTC')} AND hour < {hour_end:DateTime('UTC')}
),
binned AS (
    SELECT *,
           multiIf(x = 0, -2147483648, toInt32(floor(log2(x) * 8)))             AS x_bin,
           multiIf(y = 0, -2147483648, toInt32(floor(log2(assumeNotNull(y)) * 8))) AS y_bin
    FROM pairs
    WHERE y IS NOT NULL AND isFinite(y) AND y >= 0 AND isFinite(x) AND x >= 0
),
cells AS (
    -- ONE aggregation per (cohort, pair, x_bin, y_bin), each connection counted once, with each
    -- segment's count as a column: count() is 'all', countIf(is_bulk) 'bulk', countIf(access = a)
    -- each access type (a fixed set: cohorts/networks.py ACCESS_TYPES; the types partition 'all');
    -- then one row per non-zero column. Grouped by a 64-bit hash of the cohort keys, carried with
    -- any() (see connection_cells.sql). No GROUPING SETS over string keys.
    SELECT cohort_id, pair, x_bin, y_bin,
           any(hour) AS hour, any(pop) AS pop, any(rollout_id) AS rollout_id, any(arm) AS arm,
           any(kernel) AS kernel, any(cc) AS cc, any(cc_version) AS cc_version, any(host) AS host,
           count()                                        AS n_all,
           countIf(is_bulk)                               AS n_bulk,
           countIf(access_segment = 'access:mobile')      AS n_mobile,
           countIf(access_segment = 'access:fixed')       AS n_fixed,
           countIf(access_segment = 'access:satellite')   AS n_satellite,
           countIf(access_segment = 'access:hosting')     AS n_hosting,
           countIf(access_segment = 'access:unknown')     AS n_unknown
    FROM binned
    GROUP BY cohort_id, pair, x_bin, y_bin
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, s.1 AS segment, pair, x_bin, y_bin,
       s.2 AS connections
FROM cells
ARRAY JOIN [('all', n_all), ('bulk', n_bulk), ('access:mobile', n_mobile), ('access:fixed', n_fixed),
            ('access:satellite', n_satellite), ('access:hosting', n_hosting), ('access:unknown', n_unknown)] AS s
WHERE s.2 > 0
