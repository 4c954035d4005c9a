-- heatmap: joint distributions of one hour for heatmaps (-> cohort_heatmap_hourly_stage).
-- Grain: one row per hour x cohort x segment x pair x x_bin x y_bin, counting connections.
-- Source grain: one value pair per connection (cohort_connections_stage: its last sample).
-- Pairs (x:y): 'rtt_us:retrans_pct', 'rtt_us:inflight_bytes'. Segments: 'all', 'bulk'.
-- Bins: floor(log2(value) * 8) (9% wide; = the fine cohort_hourly bin divided by 16, floored);
-- value 0 -> sentinel -2147483648; a connection with either value missing is left out (it is
-- counted in cohort_hourly.n_missing of that metric).
-- Parameters: hour_start DateTime('UTC').
WITH
connections AS (
    SELECT *,
           if(is_bulk, ['all', 'bulk'], ['all'])                                AS segments
    FROM cohort_connections_stage
    WHERE hour = {hour_start:DateTime('UTC')}
),
pairs AS (
    SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segments,
           p.1 AS pair, p.2 AS x, p.3 AS y
    FROM connections
    ARRAY JOIN [
        ('rtt_us:retrans_pct',    toFloat64(rtt_us), CAST(retrans_pct    AS Nullable(Float64))),
        ('rtt_us:inflight_bytes', toFloat64(rtt_us), CAST(inflight_bytes AS Nullable(Float64)))
    ] AS p
),
binned AS (
    SELECT *,
           multiIf(x = 0, -2147483648, toInt32(floor(log2(x) * 8)))             AS x_bin,
           multiIf(y = 0, -2147483648, toInt32(floor(log2(assumeNotNull(y)) * 8))) AS y_bin
    FROM pairs
    WHERE y IS NOT NULL AND isFinite(y) AND y >= 0 AND isFinite(x) AND x >= 0
)
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin,
       count()                                                                AS connections
FROM binned
ARRAY JOIN segments AS segment
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin
