-- The statistical judge's output (pipelines/ccab/judge/, docs/judge/README.md): what it estimated,
-- what it decided, which data-quality gates held, and the alerts on-call receives.
-- Written by `ccab analyze` / the `ccab_compare` DAG / the rollout controller at each look; read by
-- `ccab alerts`, the rollout controller, the report and the dashboards. Small tables (host-level
-- summaries), ReplacingMergeTree so a re-run of the same window replaces its rows: read with FINAL.

-- One row per window x pop x rollout x treatment arm x metric x statistic x segment.
--   estimate, ci_low, ci_high: relative change treatment vs control (-0.12 = 12% lower)
--   role: 'guardrail' (declared, one-sided), 'info' (two-sided, BH over the run), 'segment'
--         (heterogeneity on pre-treatment segments, BH within the metric x statistic), 'shift'
--         (whole-distribution host-permutation test; estimate = KS distance, no CI)
--   method: 'delta-welch' (ratio of host sums), 'clustered-quantile' (histogram outer CI),
--           'permutation' (exact host permutation; few hosts), 'shift-permutation'
--   outcome: 'regression' | 'improvement' | 'no_difference' | 'non_inferior' | 'inconclusive' |
--            'inconclusive_by_design' (the design cannot reach alpha: too few hosts)
CREATE TABLE IF NOT EXISTS judge_results
(
    window_start        DateTime('UTC'),
    window_end          DateTime('UTC'),
    look                UInt16,                 -- 1-based look of a sequential plan (1 when none)
    looks_planned       UInt16,
    pop                 LowCardinality(String),
    rollout_id          LowCardinality(String),
    treatment_arm       LowCardinality(String),
    control_arm         LowCardinality(String),
    metric              LowCardinality(String),
    statistic           LowCardinality(String), -- mean | ratio | p10 | p50 | p90 | p99 | share_above:50 | shift
    segment             LowCardinality(String),
    role                LowCardinality(String),
    method              LowCardinality(String),
    hosts_treatment     UInt32,
    hosts_control       UInt32,
    value_treatment     Float64,                -- the statistic in each arm, the metric's unit
    value_control       Float64,
    estimate            Float64,
    ci_low              Float64,
    ci_high             Float64,
    p_value             Float64,
    q_value             Nullable(Float64),      -- BH-adjusted (info and segment roles)
    alpha_look          Nullable(Float64),      -- nominal one-sided alpha spent at this look (guardrails)
    min_attainable_p    Float64,
    margin              Nullable(Float64),      -- guardrail margin (relative, harmful direction positive)
    severity            LowCardinality(String), -- page | ticket | info
    outcome             LowCardinality(String),
    computed_seq        UInt64
)
ENGINE = ReplacingMergeTree(computed_seq)
ORDER BY (rollout_id, pop, window_start, window_end, treatment_arm, role, metric, statistic, segment);

-- One row per window x pop x rollout x treatment arm: the decision and why.
--   decision: 'rollback' (a page guardrail regressed or a circuit breaker tripped), 'halt' (a
--             ticket guardrail regressed), 'continue' (nothing shown yet), 'pass' (every guardrail
--             non-inferior at the final look), 'no_decision' (a data-quality gate failed),
--             'inconclusive_by_design' (too few hosts to reach alpha)
CREATE TABLE IF NOT EXISTS judge_verdicts
(
    window_start        DateTime('UTC'),
    window_end          DateTime('UTC'),
    look                UInt16,
    looks_planned       UInt16,
    pop                 LowCardinality(String),
    rollout_id          LowCardinality(String),
    treatment_arm       LowCardinality(String),
    control_arm         LowCardinality(String),
    decision            LowCardinality(String),
    reasons             Array(String),          -- human sentences, most important first
    alert_ids           Array(String),          -- the alerts that are the evidence
    gates_failed        Array(String),
    computed_seq        UInt64
)
ENGINE = ReplacingMergeTree(computed_seq)
ORDER BY (rollout_id, pop, window_start, window_end, treatment_arm);

-- Data-quality gates per window: one row per gate x arm x host ('' = the arm or the whole rollout).
--   gate: 'host_completeness' | 'sampling_rate' | 'cc_compliance' | 'traffic_share' | 'arm_hosts'
--   status: 'pass' | 'fail' | 'skipped' (e.g. no pre-period for traffic_share)
CREATE TABLE IF NOT EXISTS judge_gates
(
    window_start        DateTime('UTC'),
    window_end          DateTime('UTC'),
    pop                 LowCardinality(String),
    rollout_id          LowCardinality(String),
    gate                LowCardinality(String),
    arm                 LowCardinality(String),
    host                String,
    status              LowCardinality(String),
    value               Float64,
    threshold           Float64,
    detail              String,
    computed_seq        UInt64
)
ENGINE = ReplacingMergeTree(computed_seq)
ORDER BY (rollout_id, pop, window_start, window_end, gate, arm, host);

-- Alerts (contracts/CONTRACTS.md "Alerts"): one row per finding. alert_id is a hash of
-- what the finding is (rollout, pop, kind, metric, statistic, segment, arms, direction), not of
-- when it was seen, so every look that sees it again replaces the row (version = computed_seq)
-- instead of adding one. first_seen_ms keeps the first look's time.
CREATE TABLE IF NOT EXISTS alerts
(
    alert_id            String,
    ts_ms               Int64,
    first_seen_ms       Int64,
    rollout_id          LowCardinality(String),
    pop                 LowCardinality(String),
    kind                LowCardinality(String), -- guardrail | breaker | info | segment | shift | gate
    metric              LowCardinality(String),
    statistic           LowCardinality(String),
    segment             LowCardinality(String),
    treatment_arm       LowCardinality(String),
    control_arm         LowCardinality(String),
    direction           LowCardinality(String), -- regression | improvement
    estimate            Float64,
    ci_low              Float64,
    ci_high             Float64,
    p_value             Float64,
    severity            LowCardinality(String), -- page | ticket | info
    action              LowCardinality(String), -- none | halted | rolled_back (set by the controller)
    window_start        DateTime('UTC'),
    window_end          DateTime('UTC'),
    summary             String,                 -- one line for on-call
    description         String,                 -- what regressed, by how much, how sure, what was done
    report_url          String,
    version             UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY alert_id;
