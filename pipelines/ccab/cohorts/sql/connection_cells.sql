-- connection_cells: the histograms of the per-connection metrics of one hour, as cells
-- (-> cohort_cells_hourly_stage: one row per hour x cohort x segment x metric x bin, its count).
-- Same connections, metrics, values and segments as connection_metrics.sql (which writes their
-- sums and counts); only values > 0 are binned: bin = floor(log2(value) * 128) (0018_cohort_cells.sql).
-- How: ONE aggregation per (cohort, metric, bin) — each value hashed once — with each fixed
-- segment's count as a column: count() is 'all', countIf(is_bulk) 'bulk', countIf(rtt_class_ix = i)
-- each RTT class (the classes partition 'all'); then one row per non-zero column. No Map, no
-- GROUPING SETS, no value copied into each segment it belongs to. The group keys are fixed-width
-- (cohort_id, the metric's position, the bin) and nothing else rides through the aggregation: the
-- cohort's keys are joined back once per output row (`cohorts`), the names are looked up by position
-- (measured at x10 close records: half the CPU time of grouping with any() over the seven keys).
-- Several hours run as one statement (grouped by `hour`): a window costs one plan, not one per hour.
-- Parameters: hour_start, hour_end DateTime('UTC') (whole hours).
WITH
-- include: _connection_values.sql
cells AS (
    SELECT cohort_id, m, toInt32(floor(log2(assumeNotNull(value)) * 128)) AS bin,
           [count(), countIf(is_bulk), countIf(rtt_class_ix = 1), countIf(rtt_class_ix = 2), countIf(rtt_class_ix = 3),
            countIf(rtt_class_ix = 4), countIf(rtt_class_ix = 5), countIf(rtt_class_ix = 6)] AS counts
    FROM connection_values
    WHERE value IS NOT NULL AND isFinite(value) AND value > 0
    GROUP BY cohort_id, m, bin
)
SELECT k.hour AS hour, k.pop AS pop, k.rollout_id AS rollout_id, k.arm AS arm, k.kernel AS kernel, k.cc AS cc,
       k.cc_version AS cc_version, k.host AS host,
       ['all', 'bulk', 'rtt:0-20ms', 'rtt:20-50ms', 'rtt:50-100ms', 'rtt:100-200ms', 'rtt:200ms+', 'rtt:unknown'][s] AS segment,
       metric_names[c.m + 1] AS metric, c.bin AS bin, c.counts[s] AS count
FROM cells AS c
INNER JOIN cohorts AS k ON k.cohort_id = c.cohort_id
ARRAY JOIN arrayFilter(i -> c.counts[i] > 0, range(1, 9)) AS s
