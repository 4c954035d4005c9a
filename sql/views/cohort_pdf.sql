-- cohort_pdf: probability density of one metric per arm over a window (log-x PDF).
-- Grain: one row per arm x bin (bins_per_octave bins per factor of 2: 1, 2, 4, ..., 128), plus one
-- row per arm for the exact zeros (bin = -2147483648, value_lo = value_hi = 0, density NULL).
-- share = values in the bin / all values of the arm (zeros included), so an arm's shares sum to 1;
-- density_per_decade = share / log10(value_hi / value_lo), what a log-x PDF plots.
-- Whole UTC days of [t_from, t_to) are read from cohort_daily, the hours at its edges from
-- cohort_hourly (the same rows; sql/migrations/0017_cohort_daily.sql).
-- Parameters: pop, rollout_id ('' = all), metric, segment, t_from, t_to (DateTime, UTC),
--             bins_per_octave (UInt8, a power of two <= 128).
WITH
cohort_rows AS (
    SELECT arm, cc, n, n_zero
    FROM cohort_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND metric = {metric:String}
      AND segment = {segment:String}
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
      AND throwIf(128 % {bins_per_octave:UInt8} != 0, 'bins_per_octave must be a power of two <= 128') = 0
    UNION ALL
    SELECT arm, cc, n, n_zero
    FROM cohort_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND metric = {metric:String}
      AND segment = {segment:String}
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
      AND throwIf(128 % {bins_per_octave:UInt8} != 0, 'bins_per_octave must be a power of two <= 128') = 0
),
-- the histograms' cells of the same rows (0018_cohort_cells.sql), summed by bin below
cell_rows AS (
    SELECT arm, bin, count
    FROM cohort_cells_hourly
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND metric = {metric:String}
      AND segment = {segment:String}
      AND hour >= {t_from:DateTime('UTC')}
      AND hour < {t_to:DateTime('UTC')}
      AND NOT (hour >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC') AND hour < toStartOfDay({t_to:DateTime('UTC')}, 'UTC'))
      AND throwIf(128 % {bins_per_octave:UInt8} != 0, 'bins_per_octave must be a power of two <= 128') = 0
    UNION ALL
    SELECT arm, bin, count
    FROM cohort_cells_daily
    WHERE ({pop:String} = '' OR pop = {pop:String})
      AND ({rollout_id:String} = '' OR rollout_id = {rollout_id:String})
      AND metric = {metric:String}
      AND segment = {segment:String}
      AND day >= toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')
      AND day < toStartOfDay({t_to:DateTime('UTC')}, 'UTC')
      AND throwIf(128 % {bins_per_octave:UInt8} != 0, 'bins_per_octave must be a power of two <= 128') = 0
),
per_arm_sums AS (
    SELECT arm,
           arrayStringConcat(arraySort(groupUniqArray(cc)), '+')              AS ccs,
           sum(n)                                                            AS n_values,
           sum(n_zero)                                                       AS n_zero_values
    FROM cohort_rows
    GROUP BY arm
),
per_arm_cells AS (
    SELECT arm, arraySort(groupArray((bin, c))) AS sorted_cells
    FROM (SELECT arm, bin, sum(count) AS c FROM cell_rows GROUP BY arm, bin)
    GROUP BY arm
),
per_arm AS (
    -- the merged histogram as a Map(bin -> count), bins ascending
    SELECT s.*, mapFromArrays(arrayMap(x -> x.1, c.sorted_cells), arrayMap(x -> x.2, c.sorted_cells)) AS merged_hist
    FROM per_arm_sums AS s LEFT JOIN per_arm_cells AS c USING (arm)
),
fine AS (
    SELECT arm, ccs, n_values, b.1 AS fine_bin, b.2 AS bin_count
    FROM per_arm
    ARRAY JOIN arrayZip(mapKeys(merged_hist), mapValues(merged_hist)) AS b
),
coarse AS (
    SELECT arm, ccs, n_values,
           toInt32(floor(fine_bin * {bins_per_octave:UInt8} / 128))           AS bin,
           sum(bin_count)                                                    AS bin_values
    FROM fine
    GROUP BY arm, ccs, n_values, bin
),
zeros AS (
    SELECT arm, ccs, n_values, toInt32(-2147483648) AS bin, n_zero_values AS bin_values
    FROM per_arm
    WHERE n_zero_values > 0
),
binned AS (
    SELECT * FROM coarse
    UNION ALL
    SELECT * FROM zeros
)
SELECT arm,
       ccs                                                                   AS cc,
       bin,
       if(bin = -2147483648, 0., exp2(bin / {bins_per_octave:UInt8}))        AS value_lo,
       if(bin = -2147483648, 0., exp2((bin + 1) / {bins_per_octave:UInt8}))  AS value_hi,
       bin_values                                                            AS values,
       bin_values / n_values                                                 AS share,
       if(bin = -2147483648, NULL, share / log10(value_hi / value_lo))       AS density_per_decade
FROM binned
ORDER BY arm, bin
