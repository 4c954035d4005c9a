"""Writes the judge's findings to ``judge_results``, ``judge_verdicts`` and ``judge_gates``."""

from __future__ import annotations

import math

import orjson
from ccab.base.chtime import sql_time
from ccab.base.warehouse import Warehouse
from ccab.judge.model import RolloutJudgement


def _num(x):
    return x if x is None or (isinstance(x, (int, float)) and math.isfinite(x)) else None


def _rows(rows: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def write_judgement(wh: Warehouse, j: RolloutJudgement, report, seq: int) -> None:
    """One insert per table; ReplacingMergeTree keyed by the window replaces a re-run's rows."""
    base = {"window_start": sql_time(report.window_start), "window_end": sql_time(report.window_end),
            "pop": j.pop, "rollout_id": j.rollout_id, "computed_seq": seq}
    look = {"look": report.look, "looks_planned": report.looks_planned}
    results = []
    for r in j.results:
        d = {**base, **look, "treatment_arm": r.treatment_arm, "control_arm": r.control_arm, "metric": r.metric,
             "statistic": r.statistic, "segment": r.segment, "role": r.role, "method": r.method,
             "hosts_treatment": r.hosts_treatment, "hosts_control": r.hosts_control,
             "value_treatment": _num(r.value_treatment), "value_control": _num(r.value_control),
             "estimate": _num(r.estimate), "ci_low": _num(r.ci_low), "ci_high": _num(r.ci_high),
             "p_value": _num(r.p_value), "q_value": _num(r.q_value), "alpha_look": _num(r.alpha_look),
             "min_attainable_p": _num(r.min_attainable_p), "margin": _num(r.margin), "severity": r.severity,
             "outcome": r.outcome, "adjustment": r.adjustment,
             "variance_reduction": _num(r.variance_reduction)}
        # NaN (no estimate) is stored as NaN in Float64 columns: null only where the column is Nullable
        for k in ("value_treatment", "value_control", "estimate", "ci_low", "ci_high", "p_value", "min_attainable_p"):
            if d[k] is None:
                d[k] = "nan"
        results.append(d)
    settings = {"input_format_json_read_numbers_as_strings": 0, "input_format_json_try_infer_numbers_from_strings": 1}
    if results:
        wh.insert_raw("judge_results", _rows(results), settings=settings)
    verdicts = [{**base, **look, "treatment_arm": v.treatment_arm, "control_arm": v.control_arm,
                 "decision": v.decision, "reasons": v.reasons, "alert_ids": v.alert_ids,
                 "gates_failed": v.gates_failed} for v in j.verdicts]
    if verdicts:
        wh.insert_raw("judge_verdicts", _rows(verdicts))
    gates = [{**base, "gate": g.gate, "arm": g.arm, "host": g.host, "status": g.status,
              "value": _num(g.value) if _num(g.value) is not None else "nan",
              "threshold": _num(g.threshold) if _num(g.threshold) is not None else "nan",
              "detail": g.detail} for g in j.gates]
    if gates:
        wh.insert_raw("judge_gates", _rows(gates), settings=settings)


def known_rollouts(wh: Warehouse) -> list[str]:
    """Every rollout id the warehouse knows: assigned by the controller, in the rollups, judged or
    alerted on (for ``--rollout ID`` checks: an unknown id is a typo, not "no alerts")."""
    return [r[0] for r in wh.query("""
        SELECT rollout_id FROM (
            SELECT DISTINCT rollout_id FROM assignments
            UNION ALL SELECT DISTINCT rollout_id FROM cohort_hourly
            UNION ALL SELECT DISTINCT rollout_id FROM judge_verdicts
            UNION ALL SELECT DISTINCT rollout_id FROM alerts)
        WHERE rollout_id != '' GROUP BY rollout_id ORDER BY rollout_id""").rows]
