-- The judge's pre-period regression adjustment (issue 18): per result, what was done and what it gained.
-- adjustment: '' (not asked: segments, shift), 'cuped θ=… (…)', or 'off (why): unadjusted'
-- variance_reduction: 1 − Var(adjusted)/Var(unadjusted) of the host-level estimate; NULL when not adjusted
ALTER TABLE judge_results ADD COLUMN IF NOT EXISTS adjustment String DEFAULT '';
ALTER TABLE judge_results ADD COLUMN IF NOT EXISTS variance_reduction Nullable(Float64);
