-- Evidence is immutable (issue 16). An alert row that the rollout controller acted on
-- (action != 'none') is frozen: a later analysis of another window no longer rewrites its numbers.
-- Every computation of an alert is kept in alert_history (append-only, never replaced), with the
-- window and look it was computed on; alerts.look names the look of the row's numbers.
-- alerts.status: 'firing' | 'acknowledged' (a person took it: `ccab alerts --ack`) |
-- 'resolved' (its arm was promoted, rolled back or halted; Alertmanager got endsAt).
ALTER TABLE alerts
    ADD COLUMN IF NOT EXISTS look UInt16 DEFAULT 1 AFTER window_end;

ALTER TABLE alerts
    ADD COLUMN IF NOT EXISTS status LowCardinality(String) DEFAULT 'firing' AFTER action;

CREATE TABLE IF NOT EXISTS alert_history
(
    alert_id            String,
    computed_ms         Int64,
    rollout_id          LowCardinality(String),
    pop                 LowCardinality(String),
    treatment_arm       LowCardinality(String),
    window_start        DateTime('UTC'),
    window_end          DateTime('UTC'),
    look                UInt16,
    estimate            Float64,
    ci_low              Float64,
    ci_high             Float64,
    p_value             Float64,
    severity            LowCardinality(String),
    summary             String
)
ENGINE = MergeTree
ORDER BY (alert_id, computed_ms);
