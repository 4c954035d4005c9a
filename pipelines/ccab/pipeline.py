"""The analysis pipeline, one orchestration for everyone: rollups → per-arm summaries → judge.

``ccab analyze``, the Airflow DAGs (:mod:`ccab.dags.tasks`) and the rollout controller's looks
(:mod:`ccab.cli.rollout`) all call :func:`analyze_window`. It is the one place that joins the
judge with rollout state: a rollout's stored plan (``$CCAB_DATA_DIR/rollouts/<id>/plan.yaml``)
declares its control arm, guardrails and breakers (:func:`rollout_options`), so every caller
judges a rollout the way its controller does.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Iterator

from ccab.base import schema
from ccab.base.chtime import covering_hours
from ccab.base.contracts import rollout_id_problem
from ccab.base.warehouse import Warehouse, connect
from ccab.cohorts import networks
from ccab.cohorts.job import JobConfig, run_window
from ccab.cohorts.summaries import SummaryResult, write_arm_summaries
from ccab.cohorts.views import install_views
from ccab.judge import JudgeReport, judge_window
from ccab.judge.alerts.build import breaker_alert
from ccab.judge.alerts.close import resolve_arm, set_action
from ccab.judge.alerts.notify import alertmanager_payload
from ccab.judge.alerts.store import read_alerts, write_alerts
from ccab.judge.core import breaker_trip
from ccab.judge.data import retrans_by_minute
from ccab.judge.model import Breaker, Guardrail, RolloutOptions
from ccab.rollout.analysis import Analysis as ControllerAnalysis
from ccab.rollout.design import SWITCHBACK_REFUSAL
from ccab.rollout.plan import Plan, PlanError, load_plan
from ccab.rollout.state import Store


@contextmanager
def open_warehouse(priority: int = 0, wait_s: float | None = None) -> Iterator[Warehouse]:
    """The environment's warehouse with the schema and the analysts' views in place.
    ``priority`` 1: short statements that must not wait behind long analytical work (the
    controller's breakers and alerts): the warehouse service admits them first, on a slot of
    their own (:class:`ccab.base.warehouse.ServerWarehouse`)."""
    wh = connect(priority=priority, wait_s=wait_s)
    try:
        schema.migrate(wh, log=lambda _m: None)
        install_views(wh)
        yield wh
    finally:
        wh.close()


def rollout_options(rollout_id: str) -> RolloutOptions | None:
    """What the rollout controller's stored plan declares for ``rollout_id``; None without a plan
    (an id that cannot name a rollout directory never has one: records may carry any string)."""
    if rollout_id_problem(rollout_id):
        return None
    path = Store.for_rollout(rollout_id).plan_file
    if not path.exists():
        return None
    try:
        plan = load_plan(path)
    except PlanError as exc:
        return RolloutOptions(note=f"the rollout's stored plan {path} is invalid ({exc}); default guardrails used")
    return RolloutOptions(
        control_arm=plan.control_arm,
        guardrails=tuple(plan.guardrails),
        breakers=tuple(plan.breakers) or None,
        pre_period_hours=plan.pre_period_hours,
        refuse=SWITCHBACK_REFUSAL if plan.design.switchback is not None else "",
        segment=plan.segment,
        segment_cc=tuple((a, plan.arm(a).cc) for a in plan.treatment_arms) if plan.segment else ())



@dataclass
class Analysis:
    """What :func:`analyze_window` did: the summaries written and the judge's report."""

    summaries: SummaryResult
    judgement: JudgeReport

    def as_dict(self) -> dict:
        s = self.summaries
        return {"window_start": s.window_start.isoformat(), "window_end": s.window_end.isoformat(),
                "rollouts": [f"{p}/{r}" for p, r in s.rollouts], "summary_rows": s.summary_rows,
                "verdicts": [v.as_dict() for v in self.judgement.verdicts],
                "alerts": [a.alert_id for a in self.judgement.alerts if a.severity != "info"]}


def analyze_window(wh: Warehouse, start: datetime, end: datetime, rollout_id: str = "", *,
                   control_arm: str | None = None, guardrails: Iterable[Guardrail] | None = None,
                   breakers: Iterable[Breaker] | None = None, look: int = 1, looks_planned: int = 1,
                   notify_url: str | None = None, write: bool = True) -> Analysis:
    """Per-arm summaries of ``[start, end)`` (rollups must be computed), then the judge with each
    rollout's declared options; explicit ``control_arm``/``guardrails``/``breakers`` win."""
    summaries = write_arm_summaries(wh, start, end, rollout_id)
    report = judge_window(wh, summaries.window_start, summaries.window_end, rollout_id, control_arm=control_arm,
                          guardrails=guardrails, breakers=breakers, look=look, looks_planned=looks_planned,
                          options_for=rollout_options, write=write, notify_url=notify_url)
    return Analysis(summaries, report)


def controller_judge(plan: Plan, run_rollups: bool = True) -> Callable[[datetime, datetime, int, int], list]:
    """The rollout controller's judge: ``judge(start, end, look, looks_planned) -> verdicts``.

    The window may be minutes (a stage's look is due ``min_duration_minutes`` after its hosts
    applied, not at whole hours): the judge reads the hourly rollups of the hours that cover it
    (:func:`ccab.base.chtime.covering_hours`), the current hour as far as it is loaded. Those hours'
    rollups are recomputed first when their raw rows changed since they were computed (the cohort
    job's fingerprint: the current hour is stale as soon as the loader lands more rows), then
    :func:`analyze_window` runs with the plan's options. A record carries the arm its host ran, so
    rows from before this rollout carry no arm of it; rows of an earlier stage of the same rollout in
    the covering hours are in (each on the arm it ran)."""

    def judge(start: datetime, end: datetime, look: int, looks_planned: int) -> list:
        h0, h1 = covering_hours(start, end)
        with open_warehouse() as wh:
            if run_rollups:
                run_window(wh, h0, h1, JobConfig(), recompute_requested=False, lookback=False)
            analysis = analyze_window(wh, h0, h1, plan.rollout_id, control_arm=plan.control_arm,
                                      guardrails=plan.guardrails, breakers=plan.breakers or None,
                                      look=look, looks_planned=looks_planned)
        return list(analysis.judgement.verdicts)

    return judge


def segment_prefixes(segments: tuple[str, ...]) -> list[str]:
    """The prefixes of a segment plan's segment, from the networks dictionary (the controller's
    ``segment_prefixes``)."""
    with open_warehouse() as wh:
        return networks.segment_prefixes(wh, segments)


def record_action(alert_ids: list[str], action: str, wait_s: float | None = None) -> None:
    """Record on the alerts what the controller did because of them (``halted``, ``rolled_back``)."""
    with open_warehouse(priority=1, wait_s=wait_s) as wh:
        set_action(wh, list(alert_ids), action)


def controller_breakers(plan: Plan) -> Callable[[datetime, datetime], list[dict]]:
    """The controller's per-minute circuit breakers: ``breakers(start, end) -> trips`` straight
    from ``tcp_samples`` (no rollups: the freshest minutes the loader has landed). Each trip is
    stored as a ``breaker`` alert (the same id the judge's looks give it) so on-call can name it."""

    def breakers(start: datetime, end: datetime) -> list[dict]:
        trips: list[dict] = []
        with open_warehouse(priority=1) as wh:
            for pop in plan.pops:
                minutes = retrans_by_minute(wh, pop, plan.rollout_id, start, end)
                for arm in plan.treatment_arms:
                    for b in plan.breakers:
                        t = breaker_trip(minutes, b, arm, plan.control_arm)
                        if t is None:
                            continue
                        alert = breaker_alert(plan.rollout_id, pop, t)
                        write_alerts(wh, [alert], time.time_ns())
                        trips.append({"pop": pop, "arm": arm, "control_arm": plan.control_arm,
                                      "metric": b.metric, "ratio": b.ratio, "minutes": t.minutes,
                                      "max_ratio": round(t.max_ratio, 2), "treatment_pct": round(t.treatment_pct, 3),
                                      "control_pct": round(t.control_pct, 3), "first_minute": t.first_minute,
                                      "last_minute": t.last_minute, "window": [start.isoformat(), end.isoformat()],
                                      "alert_id": alert.alert_id})
        return trips

    return breakers


def known_alerts(rollout_id: str, wait_s: float | None = None) -> Callable[[list[str]], set]:
    """``known(ids) -> the ids that are alerts of rollout_id`` (the controller refuses the others)."""

    def known(ids: list[str]) -> set:
        with open_warehouse(priority=1, wait_s=wait_s) as wh:
            return {a.alert_id for a in read_alerts(wh, rollout_id=rollout_id, alert_ids=list(ids))}

    return known


def alert_payloads(ids: list[str]) -> list[dict]:
    """The stored alerts ``ids`` as Alertmanager API v2 postable alerts."""
    with open_warehouse(priority=1) as wh:
        return alertmanager_payload(read_alerts(wh, alert_ids=list(ids)))


def arm_done(rollout_id: str, wait_s: float | None = None) -> Callable[[str, str], list[dict]]:
    """``done(arm, state)``: resolve the open alerts of ``arm`` (promoted, rolled back, halted) in
    the warehouse; returns them as Alertmanager alerts with ``endsAt``."""

    def done(arm: str, state: str) -> list[dict]:
        with open_warehouse(priority=1, wait_s=wait_s) as wh:
            return alertmanager_payload(resolve_arm(wh, rollout_id, arm, state))

    return done


def controller_analysis(plan: Plan, run_rollups: bool = True,
                        bookkeeping_wait_s: float | None = None) -> ControllerAnalysis:
    """Everything a rollout's controller asks of the warehouse, in one object (the one place it is
    built: `ccab rollout …`, `ccab controller run` and the lab): the looks' judge
    (:func:`controller_judge`), the per-minute breakers (:func:`controller_breakers`), the alerts'
    bookkeeping (:func:`record_action`, :func:`known_alerts`, :func:`alert_payloads`,
    :func:`arm_done`) and a segment plan's prefixes (:func:`segment_prefixes`). ``bookkeeping_wait_s``:
    how long the alerts' bookkeeping waits for a local warehouse service that does not answer
    (default ``CCAB_WAREHOUSE_WAIT_S``; an operator's halt/rollback passes a short one)."""
    return ControllerAnalysis(judge=controller_judge(plan, run_rollups), breakers=controller_breakers(plan),
                              record_action=lambda ids, action: record_action(ids, action, bookkeeping_wait_s),
                              known_alerts=known_alerts(plan.rollout_id, bookkeeping_wait_s),
                              alert_payloads=alert_payloads, arm_done=arm_done(plan.rollout_id, bookkeeping_wait_s),
                              segment_prefixes=segment_prefixes)
