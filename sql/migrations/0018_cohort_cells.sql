-- Histogram cells as rows (issue #30): one row per (cohort-hour, segment, metric, bin) with its
-- count, instead of a Map(bin -> count) per (cohort-hour, segment, metric) in `cohort_hourly.hist`
-- and `cohort_daily.hist`. Writing and merging Maps was most of the hourly job's cost (a Map built
-- per value, then merged per key); rows are written by one plain aggregation and read by summing
-- `count` per bin (`sum(count) ... GROUP BY bin`), which is what every reader did with the Maps.
--
-- Same cohort keys, same meaning of a bin as before (0003_cohort_rollups.sql): 128 bins per
-- octave, bin = floor(log2(value) * 128), bin b covers [2^(b/128), 2^((b+1)/128)); only values > 0
-- are binned (zeros are `n_zero` in cohort_hourly, which keeps every other column: n, n_zero,
-- n_missing, sums, weights). A cell with count 0 is never written. SummingMergeTree: rows of one
-- key add up when parts merge, so readers ALWAYS aggregate (sum(count)), never read a row as final.
-- NEVER sum over segments: filter `segment = ...` as in cohort_hourly.
--
-- Written only by the hourly job (pipelines/ccab/cohorts/job.py: the *_cells stage, swapped in per
-- hour with REPLACE PARTITION like the other rollups) and its daily rollups
-- (pipelines/ccab/cohorts/daily.py: an hour's cells copied into its day, no re-aggregation).
CREATE TABLE IF NOT EXISTS cohort_cells_hourly
(
    hour          DateTime('UTC'),
    pop           LowCardinality(String),
    rollout_id    LowCardinality(String),
    arm           LowCardinality(String),
    kernel        LowCardinality(String),
    cc            LowCardinality(String),
    cc_version    UInt8,
    host          LowCardinality(String),
    segment       LowCardinality(String),
    metric        LowCardinality(String),
    bin           Int32,
    count         UInt64
)
ENGINE = SummingMergeTree(count)
PARTITION BY hour
ORDER BY (pop, rollout_id, metric, segment, arm, kernel, cc, cc_version, host, hour, bin);

CREATE TABLE IF NOT EXISTS cohort_cells_hourly_stage AS cohort_cells_hourly;

-- The hourly cells summed per UTC day (exact), like cohort_daily (0017_cohort_daily.sql).
CREATE TABLE IF NOT EXISTS cohort_cells_daily
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
    bin           Int32,
    count         UInt64
)
ENGINE = SummingMergeTree(count)
PARTITION BY day
ORDER BY (pop, rollout_id, metric, segment, arm, kernel, cc, cc_version, host, day, bin);

CREATE TABLE IF NOT EXISTS cohort_cells_daily_stage AS cohort_cells_daily;

-- A run of this file that a crash stopped between dropping a Map column and adding its ALIAS
-- back (below) left no `hist`: put the empty ALIAS back first, so the conversion can be analysed
-- (a no-op where `hist` exists, stored or ALIAS).
ALTER TABLE cohort_hourly ADD COLUMN IF NOT EXISTS hist Map(Int32, UInt64) ALIAS map();
ALTER TABLE cohort_daily ADD COLUMN IF NOT EXISTS hist Map(Int32, UInt64) ALIAS map();

-- Existing warehouses: the Maps computed before this migration become cells (once: only while the
-- cell tables are empty), then the Map columns are dropped — every reader reads the cells from here on.
INSERT INTO cohort_cells_hourly
SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin, sum(c)
FROM cohort_hourly ARRAY JOIN mapKeys(hist) AS bin, mapValues(hist) AS c
WHERE (SELECT count() FROM cohort_cells_hourly) = 0
GROUP BY hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin
HAVING sum(c) > 0
SETTINGS max_partitions_per_insert_block = 0;

INSERT INTO cohort_cells_daily
SELECT day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin, sum(c)
FROM cohort_daily ARRAY JOIN mapKeys(hist) AS bin, mapValues(hist) AS c
WHERE (SELECT count() FROM cohort_cells_daily) = 0
GROUP BY day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin
HAVING sum(c) > 0
SETTINGS max_partitions_per_insert_block = 0;

-- The stored Map columns go; `hist` stays as an empty ALIAS so that every statement of 0017 and of
-- this file can be applied again (the migration runner re-runs a file a crash interrupted), and a
-- positional INSERT never sees it. Nothing reads it.
ALTER TABLE cohort_hourly DROP COLUMN IF EXISTS hist;
ALTER TABLE cohort_hourly ADD COLUMN IF NOT EXISTS hist Map(Int32, UInt64) ALIAS map();
ALTER TABLE cohort_hourly_stage DROP COLUMN IF EXISTS hist;
ALTER TABLE cohort_hourly_stage ADD COLUMN IF NOT EXISTS hist Map(Int32, UInt64) ALIAS map();
ALTER TABLE cohort_daily DROP COLUMN IF EXISTS hist;
ALTER TABLE cohort_daily ADD COLUMN IF NOT EXISTS hist Map(Int32, UInt64) ALIAS map();
ALTER TABLE cohort_daily_stage DROP COLUMN IF EXISTS hist;
ALTER TABLE cohort_daily_stage ADD COLUMN IF NOT EXISTS hist Map(Int32, UInt64) ALIAS map();
