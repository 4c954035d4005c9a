"""Building alerts from a rollout's judgement: guardrail regressions, breaker trips, failed
data-quality gates, significant informational / segment / shift findings."""

from __future__ import annotations

import math
import time
from datetime import datetime

from ccab.base.chtime import sql_time
from ccab.judge.alerts.model import Alert, alert_id
from ccab.judge.alerts.text import effect, margin, pct, shift_direction, times, value
from ccab.judge.model import RolloutJudgement


def breaker_alert(rollout_id: str, pop: str, t, window: tuple[str, str] | None = None, report_url: str = "",
                  look: int = 1) -> Alert:
    """The page of one circuit-breaker trip. Its one number is the worst minute's ratio of
    retransmitted shares (``estimate`` = 8.55 is printed 8.55× everywhere)."""
    now = int(time.time() * 1000)
    where = f"{pop}/{rollout_id}"
    ws, we = window or (t.first_minute, t.last_minute)
    stat = f"breaker:{t.breaker.ratio:g}x/{t.breaker.minutes}m"
    aid = alert_id(rollout_id, pop, "breaker", "retrans_pct", stat, "all", t.treatment_arm, t.control_arm, "regression")
    summary = (f"circuit breaker: {t.treatment_arm} retransmits {times(t.max_ratio)} {t.control_arm} for "
               f"{t.minutes} min on {where}")
    desc = (f"Circuit breaker on {where}: {t.treatment_arm} retransmitted {t.treatment_pct:.2f}% of bytes vs "
            f"{t.control_pct:.2f}% on {t.control_arm} ({times(t.max_ratio)} at worst) — more than {t.breaker.ratio:g}× "
            f"for {t.minutes} consecutive minutes ({t.first_minute}–{t.last_minute} UTC). Deterministic rule, no "
            f"statistics involved.")
    return Alert(aid, now, rollout_id, pop, "breaker", "retrans_pct", stat, "all", t.treatment_arm, t.control_arm,
                 "regression", float(t.max_ratio), math.nan, math.nan, math.nan, "page", "none", str(ws)[:19],
                 str(we)[:19], summary, desc, report_url, now, look)


def build_alerts(j: RolloutJudgement, start: datetime, end: datetime, report_url: str = "",
                 look: int = 1) -> list[Alert]:
    """The alerts of one rollout's judgement (guardrail regressions, breaker trips, failed gates,
    significant informational / segment / shift findings)."""
    now = int(time.time() * 1000)
    out: list[Alert] = []
    ws, we = sql_time(start), sql_time(end)
    where = f"{j.pop}/{j.rollout_id}"

    def make(kind, metric, statistic, segment, arm, direction, est, lo, hi, p, severity, summary, description):
        aid = alert_id(j.rollout_id, j.pop, kind, metric, statistic, segment, arm, j.control_arm, direction)
        out.append(Alert(aid, now, j.rollout_id, j.pop, kind, metric, statistic, segment, arm, j.control_arm,
                         direction, est, lo, hi, p, severity, "none", ws, we, summary, description, report_url, now,
                         look))

    for r in j.results:
        if r.outcome not in ("regression", "improvement", "shift"):
            continue
        if r.role == "guardrail":
            if r.outcome != "regression":
                continue
            summary = (f"{r.treatment_arm} regressed {r.metric} {r.statistic} by {effect(r)} vs "
                       f"{r.control_arm} on {where}")
            desc = (f"Guardrail {r.metric} {r.statistic} ({r.severity}) on {where}, window {ws}–{we} UTC: "
                    f"{r.treatment_arm} {value(r.metric, r.value_treatment, r.statistic)} vs {r.control_arm} "
                    f"{value(r.metric, r.value_control, r.statistic)}, {effect(r)} "
                    f"(interval {pct(r.ci_low, r.statistic)} to {pct(r.ci_high, r.statistic)}; one-sided p={r.p_value:.2g} that it is "
                    f"within the tolerated {margin(r)}, "
                    f"α at this look {r.alpha_look:.2g}; {r.hosts_treatment} vs {r.hosts_control} hosts, "
                    f"host-permutation test).")
            make("guardrail", r.metric, r.statistic, r.segment, r.treatment_arm, "regression", r.estimate, r.ci_low,
                 r.ci_high, r.p_value, r.severity, summary, desc)
        elif r.role == "shift":
            direction, how = shift_direction(j.results, r)
            summary = (f"{r.treatment_arm} changed the distribution of {r.metric} vs {r.control_arm} on {where} "
                       f"({how.split(':')[0]})")
            desc = (f"Whole-distribution shift of {r.metric} on {where}, window {ws}–{we} UTC: KS distance "
                    f"{r.estimate:.3f} between the arms' pooled distributions; host-permutation p={r.p_value:.2g}, "
                    f"BH q={r.q_value:.2g} ({r.hosts_treatment} vs {r.hosts_control} hosts). The distance has no "
                    f"sign; {how}. Look at the PDFs and tails: the median may not have moved.")
            make("shift", r.metric, "shift", r.segment, r.treatment_arm, direction, r.estimate,
                 math.nan, math.nan, r.p_value, "info", summary, desc)
        else:
            kind = "segment" if r.role == "segment" else "info"
            seg = "" if r.segment == "all" else f" in segment {r.segment}"
            summary = (f"{r.treatment_arm} {r.outcome}: {r.metric} {r.statistic}{seg} {effect(r)} vs "
                       f"{r.control_arm} on {where}")
            desc = (f"Informational ({kind}) finding on {where}, window {ws}–{we} UTC: {r.metric} {r.statistic}{seg} "
                    f"{r.treatment_arm} {value(r.metric, r.value_treatment, r.statistic)} vs {r.control_arm} "
                    f"{value(r.metric, r.value_control, r.statistic)}, {effect(r)} (95% interval {pct(r.ci_low, r.statistic)} to "
                    f"{pct(r.ci_high, r.statistic)}; p={r.p_value:.2g}, BH q={r.q_value:.2g}; {r.hosts_treatment} vs "
                    f"{r.hosts_control} hosts).")
            make(kind, r.metric, r.statistic, r.segment, r.treatment_arm, r.outcome, r.estimate, r.ci_low, r.ci_high,
                 r.p_value, "info", summary, desc)
    for t in j.trips:
        out.append(breaker_alert(j.rollout_id, j.pop, t, (ws, we), report_url, look))
    failed = [g for g in j.gates if g.status == "fail"]
    for g in failed:
        who = f"{g.arm}/{g.host}" if g.host else (g.arm or "rollout")
        make("gate", "data_quality", g.gate, g.host or "all", g.arm, "regression", g.value, math.nan, math.nan,
             math.nan, "ticket", f"data-quality gate {g.gate} failed for {who} on {where}: no decision",
             f"Data-quality gate {g.gate} failed for {who} on {where}, window {ws}–{we} UTC: {g.detail}. The judge "
             f"makes no decision while a gate fails (it never passes a canary on bad data).")
    return out
