-- cohort_cdf: cumulative distribution of one metric per arm over a window.
-- Grain: one row per arm x bin (bins_per_octave per octave), plus a first row per arm for the
-- exact zeros (value_lo = value_hi = 0). cum_share = share of the arm's values below value_hi (zeros
-- included), so the last row of every arm is 1.
-- Parameters: pop, rollout_id ('' = all), metric, segment, t_from, t_to (DateTime, UTC),
--             bins_per_octave (UInt8, a power of two <= 128).
WITH
pdf AS (
    SELECT arm, cc, bin, value_lo, value_hi, values
    FROM cohort_pdf(pop = {pop:String}, rollout_id = {rollout_id:String}, metric = {metric:String},
                    segment = {segment:String}, t_from = {t_from:DateTime('UTC')},
                    t_to = {t_to:DateTime('UTC')}, bins_per_octave = {bins_per_octave:UInt8})
),
cumulated AS (
    SELECT arm, cc, bin, value_lo, value_hi, values,
           sum(values) OVER (PARTITION BY arm ORDER BY bin ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum_values,
           sum(values) OVER (PARTITION BY arm)                               AS arm_values
    FROM pdf
)
SELECT arm, cc, bin, value_lo, value_hi, values, cum_values,
       cum_values / arm_values                                               AS cum_share
FROM cumulated
ORDER BY arm, bin
