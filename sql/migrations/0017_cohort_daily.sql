-- Daily rollups: cohort_hourly and cohort_heatmap_hourly summed over each UTC day, for the
-- dashboards and analyst views over ranges of days to months (a 90-day range reads 90 rows per
-- host and cohort instead of 2,160, from 90 partitions instead of 2,160).
-- Same columns as the hourly tables with `hour` -> `day` (the start of the UTC day). Every column
-- merges exactly (sums and sumMap), so a day is the exact sum of its hours.
-- Written by the hourly job only (pipelines/ccab/cohorts/daily.py): after an hour's rollups are
-- swapped in, its whole day is recomputed from the hourly tables into the stage table and swapped
-- in with REPLACE PARTITION (before the hour's watermark: a failed refresh leaves the hour stale,
-- so the next run redoes both). Readers take whole days from here and the hours at the edges of a
-- range from the hourly tables (dashboards/definitions.py, sql/views/), which is exact.
CREATE TABLE IF NOT EXISTS cohort_daily
(
    day           DateTime('UTC'),
    pop           LowCardinality(String),
    rollout_id    LowCardinality(String),
    arm           LowCardinality(String),
    kernel        LowCardinality(String),
    cc            LowCardinality(String),
    cc_version    UInt8,
    host          LowCardinality(String),
    segment       LowCardinality(String),
    metric        LowCardinality(String),
    n             SimpleAggregateFunction(sum, UInt64),
    n_zero        SimpleAggregateFunction(sum, UInt64),
    n_missing     SimpleAggregateFunction(sum, UInt64),
    n_above_50pct SimpleAggregateFunction(sum, UInt64),
    value_sum     SimpleAggregateFunction(sum, Float64),
    value_sum_sq  SimpleAggregateFunction(sum, Float64),
    ratio_num     SimpleAggregateFunction(sum, Float64),
    ratio_den     SimpleAggregateFunction(sum, Float64),
    weight_sum    SimpleAggregateFunction(sum, Float64),
    hist          SimpleAggregateFunction(sumMap, Map(Int32, UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY day
ORDER BY (pop, rollout_id, metric, segment, arm, kernel, cc, cc_version, host, day);

CREATE TABLE IF NOT EXISTS cohort_daily_stage AS cohort_daily;

CREATE TABLE IF NOT EXISTS cohort_heatmap_daily
(
    day           DateTime('UTC'),
    pop           LowCardinality(String),
    rollout_id    LowCardinality(String),
    arm           LowCardinality(String),
    kernel        LowCardinality(String),
    cc            LowCardinality(String),
    cc_version    UInt8,
    host          LowCardinality(String),
    segment       LowCardinality(String),
    pair          LowCardinality(String),
    x_bin         Int32,
    y_bin         Int32,
    connections   UInt64
)
ENGINE = SummingMergeTree(connections)
PARTITION BY day
ORDER BY (pop, rollout_id, pair, segment, arm, kernel, cc, cc_version, host, day, x_bin, y_bin);

CREATE TABLE IF NOT EXISTS cohort_heatmap_daily_stage AS cohort_heatmap_daily;

-- Days computed before this migration: filled once from the hourly tables (only while the daily
-- tables are empty, so applying this file again adds nothing).
-- (The Map histograms `hist` are not carried here: 0018 replaced them with cell tables and left
-- `hist` an empty ALIAS, so this statement names its columns and stays re-runnable after 0018.)
INSERT INTO cohort_daily (day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, n, n_zero,
                          n_missing, n_above_50pct, value_sum, value_sum_sq, ratio_num, ratio_den, weight_sum)
SELECT toStartOfDay(hour, 'UTC') AS day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric,
       sum(n), sum(n_zero), sum(n_missing), sum(n_above_50pct), sum(value_sum), sum(value_sum_sq),
       sum(ratio_num), sum(ratio_den), sum(weight_sum)
FROM cohort_hourly
WHERE (SELECT count() FROM cohort_daily) = 0
GROUP BY day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric
SETTINGS max_partitions_per_insert_block = 0;

INSERT INTO cohort_heatmap_daily
SELECT toStartOfDay(hour, 'UTC') AS day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair,
       x_bin, y_bin, sum(connections)
FROM cohort_heatmap_hourly
WHERE (SELECT count() FROM cohort_heatmap_daily) = 0
GROUP BY day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin
SETTINGS max_partitions_per_insert_block = 0;
