"""Per-arm comparison of a window: the statistical judge when it exists, per-arm summaries always.

``run_compare`` is the one call ``ccab analyze`` and the ``ccab_compare`` DAG make. It writes the
per-arm summaries of every (pop, rollout) in the window to ``cohort_arm_summaries`` (SQL: the
``cohort_quantiles`` view, INSERT ... SELECT — nothing is aggregated in Python), then, if the
module ``ccab.judge`` exists and defines ``judge_window``, calls

    ccab.judge.judge_window(wh, window_start, window_end, rollout_id="") -> object

which reads the host-hour sufficient statistics in ``cohort_hourly`` itself. That function is the
integration point of the judge (a separate issue): adding it needs no change here.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from ccab.cohorts.job import sql_time, utc_hour
from ccab.cohorts.metrics import METRICS
from ccab.warehouse import Warehouse

JUDGE_MODULE = "ccab.judge"
JUDGE_FUNCTION = "judge_window"

_INSERT_SUMMARY = """
INSERT INTO cohort_arm_summaries (window_start, window_end, pop, rollout_id, arm, cc, metric, segment, hosts,
                                  n, n_zero, mean, ratio, share_above_50pct, p10, p50, p90, p99, p50_nonzero,
                                  computed_seq)
SELECT {t_from:DateTime('UTC')}, {t_to:DateTime('UTC')}, {pop:String}, {rollout_id:String}, arm, cc,
       {metric:String}, segment, hosts, n, n_zero, mean, ratio, share_above_50pct, p10, p50, p90, p99, p50_nonzero,
       toUnixTimestamp64Nano(now64(9))
FROM cohort_quantiles(pop = {pop:String}, rollout_id = {rollout_id:String}, metric = {metric:String},
                      segment = '%', t_from = {t_from:DateTime('UTC')}, t_to = {t_to:DateTime('UTC')})
"""


@dataclass
class CompareResult:
    window_start: datetime
    window_end: datetime
    rollouts: list[tuple[str, str]] = field(default_factory=list)  # (pop, rollout_id)
    summary_rows: int = 0
    judge: str | None = None  # "ccab.judge.judge_window" when it ran
    judge_result: Any = None

    def as_dict(self) -> dict:
        d = {"window_start": self.window_start.isoformat(), "window_end": self.window_end.isoformat(),
             "rollouts": [f"{p}/{r}" for p, r in self.rollouts], "summary_rows": self.summary_rows,
             "judge": self.judge}
        if self.judge_result is not None and hasattr(self.judge_result, "as_dict"):
            d["verdicts"] = [v.as_dict() for v in self.judge_result.verdicts]
            d["alerts"] = [a.alert_id for a in self.judge_result.alerts if a.severity != "info"]
        return d


def find_judge() -> Callable[..., Any] | None:
    """``ccab.judge.judge_window`` if the judge has been built, else None."""
    if importlib.util.find_spec(JUDGE_MODULE) is None:
        return None
    return getattr(importlib.import_module(JUDGE_MODULE), JUDGE_FUNCTION, None)


def rollouts_in(wh: Warehouse, start: datetime, end: datetime, rollout_id: str = "") -> list[tuple[str, str]]:
    """(pop, rollout_id) pairs with rollup rows in ``[start, end)``."""
    res = wh.query(
        """SELECT DISTINCT pop, rollout_id FROM cohort_hourly
           WHERE hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
             AND ({r:String} = '' OR rollout_id = {r:String})
           ORDER BY pop, rollout_id""",
        params={"a": sql_time(start), "b": sql_time(end), "r": rollout_id})
    return [(p, r) for p, r in res.rows]


def write_arm_summaries(wh: Warehouse, start: datetime, end: datetime, rollout_id: str = "") -> CompareResult:
    """Write per-arm summaries of every metric and segment for each (pop, rollout) of the window.

    Idempotent: ``cohort_arm_summaries`` is a ReplacingMergeTree keyed by the window, so a re-run
    replaces the same rows (read it with FINAL).
    """
    start, end = utc_hour(start), utc_hour(end)
    result = CompareResult(start, end, rollouts_in(wh, start, end, rollout_id))
    for pop, rollout in result.rollouts:
        for metric in METRICS:
            wh.command(_INSERT_SUMMARY, params={"t_from": sql_time(start), "t_to": sql_time(end), "pop": pop,
                                                "rollout_id": rollout, "metric": metric.name})
    if result.rollouts:
        result.summary_rows = int(wh.query(
            """SELECT count() FROM cohort_arm_summaries FINAL
               WHERE window_start = {a:DateTime('UTC')} AND window_end = {b:DateTime('UTC')}
                 AND ({r:String} = '' OR rollout_id = {r:String})""",
            params={"a": sql_time(start), "b": sql_time(end), "r": rollout_id}).scalar())
    return result


def run_compare(wh: Warehouse, start: datetime, end: datetime, rollout_id: str = "", **judge_options) -> CompareResult:
    """Per-arm summaries of ``[start, end)``, then the judge if it exists (see module docstring);
    ``judge_options`` go to ``judge_window`` (control_arm, guardrails, look, looks_planned, notify_url)."""
    result = write_arm_summaries(wh, start, end, rollout_id)
    judge = find_judge()
    if judge is not None:
        result.judge = f"{JUDGE_MODULE}.{JUDGE_FUNCTION}"
        result.judge_result = judge(wh, result.window_start, result.window_end, rollout_id=rollout_id, **judge_options)
    return result
