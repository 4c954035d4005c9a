"""The judge of one window: effects, guardrails, breakers, gates → verdicts and alerts.

``judge_window`` is the one entry point (``ccab analyze``, the ``ccab_compare`` DAG and the rollout
controller call it). For every (pop, rollout) with rollups in ``[start, end)`` and every treatment
arm against the control arm:

1. data-quality gates (:mod:`ccab.judge.gates`) — a failure makes the decision ``no_decision``;
2. circuit breakers on per-minute retransmits (no statistics) — a trip means ``rollback``;
3. guardrails, one-sided against their margins at this look's spent alpha
   (:mod:`ccab.judge.sequential`) — a page regression means ``rollback``, a ticket one ``halt``;
4. informational effects of every judged metric × statistic plus a whole-distribution shift
   test per metric, two-sided, Benjamini–Hochberg over the arm's family;
5. heterogeneity of each guardrail on pre-treatment segments (client RTT class, response size,
   client access type / country / ASN),
   BH within the guardrail's family;
6. the decision: ``rollback`` (a page guardrail regressed or a breaker tripped), ``halt`` (a ticket
   guardrail regressed, or — at the last planned look — a guardrail could not be shown within its
   margin: the canary stops and waits for a human), ``no_decision`` (a gate failed), ``pass`` only
   at the last planned look with every guardrail non-inferior, ``inconclusive_by_design`` when the
   host counts cannot reach the last look's alpha, ``continue`` otherwise.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterable

import numpy as np
from ccab.base.chtime import floor_hour, parse_sql_time, utc_hour
from ccab.base.config import settings
from ccab.base.vocabulary import NETWORK_SEGMENT_FAMILIES, RTT_CLASSES, SIZE_CLASSES, effect_sign, zero_base_text
from ccab.base.vocabulary import get as get_metric
from ccab.base.warehouse import Warehouse
from ccab.cohorts.summaries import rollouts_in
from ccab.judge.alerts.build import build_alerts
from ccab.judge.alerts.notify import notify
from ccab.judge.alerts.store import write_alerts
from ccab.judge.alerts.text import times
from ccab.judge import data
from ccab.judge import gates as gates_mod
from ccab.judge import store
from ccab.judge.model import (DEFAULT_BREAKERS, DEFAULT_GUARDRAILS, DEFAULT_PRE_PERIOD_HOURS, HIGHER_IS_WORSE,
                              JUDGED_METRICS, MIN_PRE_PERIOD_HOURS, QUANTILES, SHARE_ABOVE, Breaker, BreakerTrip, GateCheck, Guardrail, Result, RolloutJudgement, RolloutOptions,
                              Verdict, statistics_of)
from ccab.judge.sequential import alpha_at_look
from ccab.judge.stats import (Effect, HostArrays, adjusted_effect, arm_quantile_ci, arm_ratio, bh_adjust,
                              host_statistic, min_attainable_p, quantile_effect, ratio_effect,
                              share_difference_effect, shift_test)

ALPHA = 0.05          # one-sided, per guardrail, over all looks
INFO_FDR = 0.05       # BH level of informational and segment findings
SEGMENTS_CONNECTION = tuple(s for s in RTT_CLASSES if s != "rtt:unknown")
SEGMENTS_REQUEST = SEGMENTS_CONNECTION + SIZE_CLASSES


@dataclass
class JudgeReport:
    """What :func:`judge_window` found: one :class:`RolloutJudgement` per (pop, rollout)."""

    window_start: datetime
    window_end: datetime
    look: int
    looks_planned: int
    rollouts: list[RolloutJudgement] = field(default_factory=list)

    @property
    def verdicts(self) -> list[Verdict]:
        return [v for r in self.rollouts for v in r.verdicts]

    @property
    def alerts(self) -> list:
        return [a for r in self.rollouts for a in r.alerts]

    def as_dict(self) -> dict:
        return {"window_start": self.window_start.isoformat(), "window_end": self.window_end.isoformat(),
                "look": self.look, "looks_planned": self.looks_planned,
                "verdicts": [v.as_dict() for v in self.verdicts],
                "alerts": [a.as_dict() for a in self.alerts],
                "gates_failed": sorted({g for v in self.verdicts for g in v.gates_failed})}


def judge_window(wh: Warehouse, start: datetime, end: datetime, rollout_id: str = "", *,
                 control_arm: str | None = None, guardrails: Iterable[Guardrail] | None = None,
                 breakers: Iterable[Breaker] | None = None, look: int = 1, looks_planned: int = 1,
                 options_for: Callable[[str], RolloutOptions | None] | None = None,
                 write: bool = True, notify_url: str | None = None, report_url: str | None = None) -> JudgeReport:
    """Judge every (pop, rollout) with rollups in ``[start, end)`` (UTC hours).

    Parameters
    ----------
    control_arm : str, optional
        The arm every other arm is compared with; default: the rollout's options (below), else
        ``control``.
    guardrails, breakers : optional
        Declared by the caller; default: the rollout's options, else :data:`DEFAULT_GUARDRAILS`,
        :data:`DEFAULT_BREAKERS`.
    options_for : callable, optional
        ``rollout_id -> RolloutOptions | None``: what a rollout declared (its plan's control arm,
        guardrails and breakers). The judge knows nothing of rollout state; :mod:`ccab.pipeline`
        passes the rollout controller's stored plans here.
    look, looks_planned : int
        Which look of a group-sequential plan this is; a single analysis is look 1 of 1.
    write : bool
        Write ``judge_results``, ``judge_verdicts``, ``judge_gates`` and ``alerts``.
    notify_url : str, optional
        POST new or changed page/ticket alerts to this Alertmanager-compatible URL.
    report_url : str, optional
        The canary report alerts link to (``{rollout_id}`` is filled in); default from
        ``CCAB_REPORT_URL`` (:mod:`ccab.base.config`).
    """
    start, end = utc_hour(start), utc_hour(end)
    if not 1 <= look:
        raise ValueError(f"look must be >= 1, got {look}")
    report = JudgeReport(start, end, look, looks_planned)
    for pop, rollout in rollouts_in(wh, start, end, rollout_id):
        if not rollout:
            continue  # hosts outside any rollout: nothing to compare
        declared = options_for(rollout) if options_for is not None else None
        plan_control, plan_guardrails, plan_breakers, plan_note = (
            (declared.control_arm, declared.guardrails, declared.breakers, declared.note) if declared
            else (None, None, None, ""))
        pre_h = declared.pre_period_hours if declared else DEFAULT_PRE_PERIOD_HOURS
        j = judge_rollout(wh, pop, rollout, start, end, control_arm=control_arm or plan_control or "control",
                          segment=declared.segment if declared else None,
                          segment_cc=dict(declared.segment_cc) if declared else None,
                          guardrails=tuple(guardrails if guardrails is not None else
                                           plan_guardrails or DEFAULT_GUARDRAILS),
                          breakers=tuple(breakers if breakers is not None else
                                         plan_breakers if plan_breakers is not None else DEFAULT_BREAKERS),
                          look=look, looks_planned=looks_planned, pre_period_hours=pre_h,
                          refuse=declared.refuse if declared else "")
        if plan_note:
            for v in j.verdicts:
                v.reasons.append(plan_note)
        template = report_url if report_url is not None else settings().report_url_template
        j.alerts = build_alerts(j, start, end, report_url=template.replace("{rollout_id}", rollout),
                                           look=look)
        for v in j.verdicts:
            v.alert_ids = [a.alert_id for a in j.alerts
                           if a.treatment_arm == v.treatment_arm and a.kind in ("guardrail", "breaker", "gate")]
        report.rollouts.append(j)
    if write:
        seq = time.time_ns()
        for j in report.rollouts:
            store.write_judgement(wh, j, report, seq)
        changed = write_alerts(wh, report.alerts, seq)
        if notify_url:
            notify(notify_url, [a for a in changed if a.severity in ("page", "ticket")])
    return report


def judge_rollout(wh: Warehouse, pop: str, rollout: str, start: datetime, end: datetime, *, control_arm: str,
                  guardrails: tuple[Guardrail, ...], breakers: tuple[Breaker, ...], look: int,
                  looks_planned: int, pre_period_hours: int = DEFAULT_PRE_PERIOD_HOURS,
                  refuse: str = "", segment: tuple[str, ...] | None = None,
                  segment_cc: dict[str, str] | None = None) -> RolloutJudgement:
    """Judge one (pop, rollout); ``pre_period_hours`` before the rollout's start (its first
    assignment, else its first record) are the hosts' pre-period for the regression adjustment;
    ``refuse``: make no decision, for this reason (a design the judge cannot analyse).
    ``segment``: a segment rollout (only the segment's connections on treated hosts ran the
    treatment, ``segment_cc``: arm -> its algorithm): guardrails are judged on the segment and on
    the rest (:func:`segment_guardrails`), and the gates check the segment's connections
    (:func:`segment_gates`)."""
    j = RolloutJudgement(pop, rollout, control_arm)
    arms = data.arms_in(wh, pop, rollout, start, end)
    if refuse:
        j.error = refuse
        j.verdicts = [Verdict(pop, rollout, a, control_arm, "no_decision", [refuse]) for a in arms
                      if a != control_arm]
        return j
    if control_arm not in arms:
        j.error = (f"no control arm {control_arm!r} in {pop}/{rollout} (arms: {', '.join(arms) or 'none'}); "
                   f"name it with --control ARM or in the rollout plan")
        j.verdicts = [Verdict(pop, rollout, a, control_arm, "no_decision", [j.error]) for a in arms]
        return j
    treatments = [a for a in arms if a != control_arm]
    j.gates = run_gates(wh, pop, rollout, start, end, arms, control_arm, segment)
    if segment:
        j.gates += segment_gates(wh, pop, rollout, start, end, segment, segment_cc or {}, control_arm)
        present = data.segments_present(wh, pop, rollout, start, end, ("access:",))
        planned = {g.segment for g in guardrails}
        guardrails = segment_guardrails(guardrails, segment, present)
        rest = frozenset(g.segment for g in guardrails) - set(segment) - planned
    else:
        rest = frozenset()
    alpha_look = alpha_at_look(look, looks_planned, ALPHA)
    alpha_last = alpha_at_look(looks_planned, looks_planned, ALPHA)
    all_rows = data.host_rows(wh, pop, rollout, "all", start, end, list(JUDGED_METRICS), arms)
    pre_start, pre_end = pre_period(wh, pop, rollout, pre_period_hours)
    hosts = sorted({r.host for rows in all_rows.values() for r in rows})
    pre_rows = data.pre_period_rows(wh, pop, hosts, pre_start, pre_end, list(JUDGED_METRICS)) \
        if pre_end > pre_start and hosts else {}
    pre_arrays = {m: data.host_arrays(rows, "", "") for m, rows in pre_rows.items()}
    bands = data.prefix_speed_bands(wh, pop, pre_start, pre_end) if pre_end > pre_start else {}
    speed_rows = data.host_goodput_by_band(wh, pop, rollout, start, end, bands)
    minutes = data.retrans_by_minute(wh, pop, rollout, start, end) if breakers else []
    seg_rows: dict[str, dict] = {}
    for arm in treatments:
        seed = f"{pop}/{rollout}/{arm}/{control_arm}/{start:%Y%m%d%H}-{end:%Y%m%d%H}"
        results: list[Result] = []
        arrays = {m: data.host_arrays(rows, arm, control_arm) for m, rows in all_rows.items()}
        # guardrails (a guardrail restricted to a segment reads that segment's rows)
        for g in guardrails:
            if g.segment == "all":
                arr = arrays.get(g.metric)
            else:
                if g.segment not in seg_rows:
                    seg_rows[g.segment] = data.host_rows(wh, pop, rollout, g.segment, start, end,
                                                         list(JUDGED_METRICS), arms)
                rows = seg_rows[g.segment].get(g.metric)
                arr = data.host_arrays(rows, arm, control_arm) if rows else None
            if arr is None:
                results.append(_missing(arm, control_arm, g.metric, g.statistic, g.segment, "guardrail", g.severity))
                continue
            results.append(guardrail_result(arr, g, arm, control_arm, alpha_look, seed,
                                            pre=_pre_for(pre_arrays, g.metric)))
        # informational effects + distribution shift, one BH family per arm
        info: list[Result] = []
        for metric in JUDGED_METRICS:
            arr = arrays.get(metric)
            if arr is None:
                continue
            for stat in statistics_of(metric):
                eff = effect_of(arr, metric, stat, alternative="two-sided", seed_key=f"{seed}/{metric}/{stat}",
                                pre=_pre_for(pre_arrays, metric))
                info.append(_result(eff, arm, control_arm, metric, stat, "all", "info", "info"))
            eff = shift_test(arr, seed_key=f"{seed}/{metric}/shift")
            info.append(_result(eff, arm, control_arm, metric, "shift", "all", "shift", "info"))
        _bh(info)
        results += info
        # heterogeneity on pre-treatment segments, per guardrail; client speed from the pre-period
        results += segment_results(wh, pop, rollout, start, end, guardrails, arm, control_arm, arms, seed)
        results += speed_segment_results(speed_rows, arm, control_arm, seed)
        trips = [t for b in breakers if (t := breaker_trip(minutes, b, arm, control_arm))]
        j.trips += trips
        j.results += results
        v = decide(pop, rollout, arm, control_arm, results, trips, j.gates, look, looks_planned, alpha_last,
                   rest=rest)
        v.reasons.append(adjustment_text([r for r in results if r.role == "guardrail"], pre_start, pre_end))
        j.verdicts.append(v)
    return j


def _pre_for(pre_arrays: dict[str, HostArrays], metric: str) -> HostArrays:
    """The metric's pre-period arrays; no rows at all = every host lacks a pre-period (fallback)."""
    return pre_arrays.get(metric) or data.host_arrays([], "", "")


def pre_period(wh: Warehouse, pop: str, rollout: str, hours: int) -> tuple[datetime, datetime]:
    """``[start − hours, start)`` with ``start`` the rollout's first assignment in the PoP (the
    controller's), else the first hour with a record carrying the rollout id (``ccab analyze``
    without a controller); whole hours (the rollups are hourly): the assignment is any instant
    (12:24:28.293), so ``start`` is the hour that contains it — the pre-period ends before it."""
    first_ms = data.first_assignment_ms(wh, pop, rollout)
    first = data_first_hour(wh, pop, rollout)
    if first_ms is not None:
        start = floor_hour(datetime.fromtimestamp(first_ms / 1000, tz=timezone.utc))
        start = min(start, first) if first else start
    elif first is not None:
        start = first
    else:
        return datetime.min, datetime.min
    return start - timedelta(hours=max(hours, MIN_PRE_PERIOD_HOURS)), start


def adjustment_text(guards: list[Result], pre_start: datetime, pre_end: datetime) -> str:
    """The verdict's line on the pre-period adjustment: variance cut per guardrail, or why not."""
    if pre_end <= pre_start:
        return "pre-period adjustment: off (no pre-period: the rollout has no first record)"
    parts = []
    for r in guards:
        if r.adjustment.startswith("cuped") and math.isfinite(r.variance_reduction):
            parts.append(f"{r.metric} {r.statistic} variance {-r.variance_reduction:+.0%}")
        elif r.adjustment:
            parts.append(f"{r.metric} {r.statistic} {r.adjustment}")
    span = f"{pre_start:%Y-%m-%d %H:%M}–{pre_end:%Y-%m-%d %H:%M} UTC"
    return f"pre-period adjustment ({span}): " + ("; ".join(parts) or "no guardrail")


# ---- effects --------------------------------------------------------------------------------------

def effect_of(arr: HostArrays, metric: str, statistic: str, *, alternative="two-sided", null_ratio=1.0,
              margin=0.0, seed_key="", alpha=ALPHA, ci_level=None, pre: HostArrays | None = None) -> Effect:
    """The effect of ``statistic`` on ``metric`` from host arrays (dispatch by statistic).

    ``null_ratio`` is the null of relative statistics; ``margin`` the null difference of the share
    statistic (absolute, see :func:`ccab.judge.stats.share_difference_effect`). ``pre``: the same
    hosts' pre-period arrays (no arm; matched by host name) — the effect is then adjusted for
    each host's pre-period value (:func:`ccab.judge.stats.adjusted_effect`), or, when a host has
    no usable pre-period value, computed unadjusted with ``adjustment`` saying why."""
    if pre is not None:
        return _adjusted_effect_of(arr, pre, metric, statistic, alternative=alternative, null_ratio=null_ratio,
                                   margin=margin, seed_key=seed_key, alpha=alpha, ci_level=ci_level)
    if statistic == SHARE_ABOVE:
        return share_difference_effect(arr.n_above, arr.n, arr.treated, SHARE_ABOVE, alternative=alternative,
                                       margin=margin, seed_key=seed_key, alpha=alpha, ci_level=ci_level)
    kw = dict(alternative=alternative, null_ratio=null_ratio, seed_key=seed_key, alpha=alpha, ci_level=ci_level)
    if statistic == "mean":
        return ratio_effect(arr.value_sum, arr.n, arr.treated, "mean", **kw)
    if statistic == "ratio":
        return ratio_effect(arr.ratio_num, arr.ratio_den, arr.treated, "ratio", **kw)
    if statistic in QUANTILES:
        return quantile_effect(arr, QUANTILES[statistic], statistic, **kw)
    raise ValueError(f"unknown statistic {statistic!r} for {metric}")


def _kind(statistic: str) -> tuple[str, float | None]:
    if statistic == SHARE_ABOVE:
        return "share", None
    if statistic in ("mean", "ratio"):
        return statistic, None
    return "quantile", QUANTILES[statistic]


def _some(hosts: list[str], k: int = 4) -> str:
    return ", ".join(hosts[:k]) + (f" and {len(hosts) - k} more" if len(hosts) > k else "")


def _adjusted_effect_of(arr: HostArrays, pre: HostArrays, metric: str, statistic: str, **kw) -> Effect:
    kind, p = _kind(statistic)
    log = kind != "share"
    y = host_statistic(arr, kind, p)
    x_of = dict(zip(pre.hosts, host_statistic(pre, kind, p)))
    x = np.array([x_of.get(h, math.nan) for h in arr.hosts], dtype=np.float64)
    missing = [h for h, v in zip(arr.hosts, x) if not math.isfinite(v)]
    nonpos = [h for h, a, b in zip(arr.hosts, x, y) if log and math.isfinite(a) and (a <= 0 or not b > 0)]
    if missing or nonpos or not arr.hosts:
        why = (f"hosts without pre-period data: {_some(missing)}" if missing else
               f"a {statistic} of 0 on hosts {_some(nonpos)} (no log scale)" if nonpos else "no host names")
        eff = effect_of(arr, metric, statistic, **kw)
        return replace(eff, adjustment=f"off ({why}): unadjusted")
    t = arr.treated
    if kind == "quantile":
        v_t = arm_quantile_ci(arr.hist[t], arr.n_zero[t], arr.bins, p)[0]
        v_c = arm_quantile_ci(arr.hist[~t], arr.n_zero[~t], arr.bins, p)[0]
    else:
        num, den = {"mean": (arr.value_sum, arr.n), "ratio": (arr.ratio_num, arr.ratio_den),
                    "share": (arr.n_above, arr.n)}[kind]
        v_t, v_c = arm_ratio(num[t], den[t])[0], arm_ratio(num[~t], den[~t])[0]
    return adjusted_effect(y, x, t, statistic, log=log, value_treatment=v_t, value_control=v_c, **kw)


def guardrail_result(arr: HostArrays, g: Guardrail, arm: str, control_arm: str, alpha_look: float,
                     seed: str, pre: HostArrays | None = None) -> Result:
    """One-sided tests of a guardrail at this look: beyond the margin (regression) and within it
    (non-inferior); the interval shown is the one-sided (1 − 2α_look) two-sided equivalent."""
    worse = "greater" if g.higher_is_worse else "less"
    better = "less" if g.higher_is_worse else "greater"
    key = f"{seed}/{g.metric}/{g.statistic}/guardrail" + ("" if g.segment == "all" else f"/{g.segment}")
    ci_level = 1 - 2 * alpha_look
    margin = g.margin if g.higher_is_worse else -g.margin
    regress = effect_of(arr, g.metric, g.statistic, alternative=worse, null_ratio=g.null_ratio, margin=margin,
                        seed_key=key, ci_level=ci_level, pre=pre)
    r = _result(regress, arm, control_arm, g.metric, g.statistic, g.segment, "guardrail", g.severity)
    r.alpha_look, r.margin = alpha_look, g.margin
    if regress.error or not math.isfinite(regress.p_value):
        r.outcome = "inconclusive"
        return r
    if regress.min_attainable_p > alpha_look:
        r.outcome = "inconclusive_by_design"
        return r
    if regress.p_value <= alpha_look:
        r.outcome = "regression"
        return r
    ni = effect_of(arr, g.metric, g.statistic, alternative=better, null_ratio=g.null_ratio, margin=margin,
                   seed_key=key + "/ni", ci_level=ci_level, pre=pre)
    r.outcome = "non_inferior" if ni.p_value <= alpha_look else "inconclusive"
    return r


def segment_results(wh, pop, rollout, start, end, guardrails, arm, control_arm, arms, seed) -> list[Result]:
    """Each guardrail's effect per pre-treatment segment, two-sided, BH within the guardrail.

    Segments: the client prefix's RTT class, the response size class (request metrics), the
    client's network (``access:*``, ``country:*``, ``asn:*`` from the prefix-networks dictionary,
    those present in the window's rollups), and the host's kernel — only kernels both arms run on at least 2 hosts each, and only when the two
    arms' hosts run more than one kernel (a kernel that differs *by arm* is part of the
    treatment, not a pre-treatment attribute)."""
    out: list[Result] = []
    needed = {g.metric for g in guardrails}
    segments = sorted({s for m in needed for s in _segments_for(m)})
    cache = data.segments_host_rows(wh, pop, rollout, segments, start, end, sorted(needed), arms)
    per_kernel = data.hosts_per_kernel(wh, pop, rollout, start, end)
    in_pair = {k: v for k, v in per_kernel.items() if v.get(arm) or v.get(control_arm)}
    kernels = sorted(k for k, v in in_pair.items() if v.get(arm, 0) >= 2 and v.get(control_arm, 0) >= 2) \
        if len(in_pair) > 1 else []
    for k in kernels:
        cache[f"kernel:{k}"] = data.host_rows(wh, pop, rollout, "all", start, end, sorted(needed), arms, kernel=k)
    # the client's network (access type, country, ASN top-N): the families present in the rollups
    networks = tuple(data.segments_present(wh, pop, rollout, start, end, NETWORK_SEGMENT_FAMILIES))
    cache.update(data.segments_host_rows(wh, pop, rollout, list(networks), start, end, sorted(needed), arms))
    done: set[tuple[str, str]] = set()
    for g in guardrails:
        if (g.metric, g.statistic) in done:  # one family per metric x statistic, whatever the
            continue                         # guardrails' own segments
        done.add((g.metric, g.statistic))
        family = []
        for s in _segments_for(g.metric) + tuple(f"kernel:{k}" for k in kernels) + networks:
            rows = cache[s].get(g.metric)
            if not rows:
                continue
            arr = data.host_arrays(rows, arm, control_arm)
            if arr.g_treatment < 2 or arr.g_control < 2:
                continue
            eff = effect_of(arr, g.metric, g.statistic, seed_key=f"{seed}/{g.metric}/{g.statistic}/{s}")
            family.append(_result(eff, arm, control_arm, g.metric, g.statistic, s, "segment", "info"))
        _bh(family)
        out += family
    return out


def speed_segment_results(rows, arm: str, control_arm: str, seed: str) -> list[Result]:
    """Goodput per client-speed band (prefixes banded by their *pre-period* median goodput,
    :func:`ccab.judge.data.prefix_speed_bands`): the treatment's effect on each host's geometric
    mean goodput of the band's requests, host-permutation test, BH within the family. Statistic
    ``gmean``; segment ``speed:<band>``."""
    family = []
    by_band: dict[str, list] = {}
    for band, a, host, n, mean_log in rows:
        if a in (arm, control_arm) and n > 0:
            by_band.setdefault(band, []).append((a == arm, math.exp(mean_log)))
    for band, hosts in sorted(by_band.items()):
        treated = np.array([t for t, _ in hosts])
        y = np.array([v for _, v in hosts])
        if treated.sum() < 2 or (~treated).sum() < 2:
            continue
        # no covariate (x = 1): the plain host-level comparison of mean log goodput
        eff = adjusted_effect(y, np.ones_like(y), treated, "gmean", seed_key=f"{seed}/goodput/{band}",
                              value_treatment=float(np.exp(np.log(y[treated]).mean())),
                              value_control=float(np.exp(np.log(y[~treated]).mean())))
        eff = replace(eff, method="permutation", adjustment="", variance_reduction=math.nan)
        family.append(_result(eff, arm, control_arm, "goodput_bps", "gmean", band, "segment", "info"))
    _bh(family)
    return family


def _segments_for(metric: str) -> tuple[str, ...]:
    return SEGMENTS_REQUEST if get_metric(metric).grain == "request" else SEGMENTS_CONNECTION


def _result(eff: Effect, arm, control_arm, metric, statistic, segment, role, severity) -> Result:
    # a ratio of sums is in raw units (bytes_retrans / bytes_sent): express it in the metric's unit
    scale = get_metric(metric).ratio_scale if statistic == "ratio" else 1.0
    return Result(arm, control_arm, metric, statistic, segment, role, eff.method, eff.g_treatment, eff.g_control,
                  eff.value_treatment * scale, eff.value_control * scale, eff.estimate, eff.ci_low, eff.ci_high, eff.p_value,
                  eff.min_attainable_p, severity=severity, error=eff.error, adjustment=eff.adjustment,
                  variance_reduction=eff.variance_reduction)


def _missing(arm, control_arm, metric, statistic, segment, role, severity) -> Result:
    nan = math.nan
    return Result(arm, control_arm, metric, statistic, segment, role, "none", 0, 0, nan, nan, nan, nan, nan, nan,
                  1.0, severity=severity, outcome="inconclusive", error=f"no {metric} data in the window")


def _bh(family: list[Result]) -> None:
    """Attach BH q-values and outcomes (two-sided findings) to a family of results."""
    qs = bh_adjust([r.p_value for r in family])
    for r, q in zip(family, qs):
        r.q_value = q if math.isfinite(q) else None
        if r.error or not math.isfinite(r.p_value):
            r.outcome = "inconclusive"
        elif r.min_attainable_p > INFO_FDR:
            r.outcome = "inconclusive_by_design"
        elif q <= INFO_FDR:
            if r.role == "shift":
                r.outcome = "shift"
            else:
                # from a zero base (control 0) the direction is the difference's: never NaN > 0
                sign = effect_sign(r.estimate, r.value_treatment, r.value_control)
                if sign is None:
                    r.outcome = "inconclusive"
                elif sign == 0:
                    r.outcome = "no_difference"
                else:
                    worse = (sign > 0) == HIGHER_IS_WORSE.get(r.metric, True)
                    r.outcome = "regression" if worse else "improvement"
        else:
            r.outcome = "no_difference"


# ---- breakers -------------------------------------------------------------------------------------

def breaker_trip(minutes: list[tuple[str, str, float, float, int]], b: Breaker, arm: str,
                 control_arm: str) -> BreakerTrip | None:
    """The first run of ``b.minutes`` consecutive qualifying minutes where the treatment's
    retransmitted share exceeds ``b.ratio`` × control's, or None."""
    by_min: dict[str, dict[str, tuple[float, float, int]]] = {}
    for m, a, x, y, c in minutes:
        by_min.setdefault(m, {})[a] = (x, y, c)
    run: list[tuple[str, float, float, float]] = []
    prev_ts = None
    for m in sorted(by_min):
        ts = parse_sql_time(m)
        t, c = by_min[m].get(arm), by_min[m].get(control_arm)
        ok = (t and c and t[2] >= b.min_samples and c[2] >= b.min_samples and t[1] > 0 and c[1] > 0)
        contiguous = prev_ts is not None and (ts - prev_ts).total_seconds() == 60
        prev_ts = ts
        if not ok:
            run = []
            continue
        pt, pc = 100 * t[0] / t[1], 100 * c[0] / c[1]
        breach = pc > 0 and pt > b.ratio * pc or (pc == 0 and pt > 0)
        if not breach:
            run = []
            continue
        if run and not contiguous:
            run = []
        run.append((m, pt / pc if pc else math.inf, pt, pc))
        if len(run) >= b.minutes:
            worst = max(run, key=lambda r: r[1])
            return BreakerTrip(arm, control_arm, b, run[0][0], run[-1][0], len(run), worst[1], worst[2], worst[3])
    return None


# ---- gates ----------------------------------------------------------------------------------------

def segment_guardrails(guardrails: tuple[Guardrail, ...], segment: tuple[str, ...],
                       present: list[str] | tuple[str, ...]) -> tuple[Guardrail, ...]:
    """A segment rollout's guardrails: each guardrail on all connections is judged on each targeted
    segment instead (what the treatment changed) and, when the targets are access segments, on every
    other access segment present (the rest: a change there is the policy leaking, or interference).
    Guardrails the plan restricted to a segment stay as they are."""
    rest = [s for s in present if s not in segment] if all(s.startswith("access:") for s in segment) else []
    # (the rest's guardrails act on a regression but need not pass: decide(rest=...))
    out: list[Guardrail] = []
    for g in guardrails:
        if g.segment != "all":
            out.append(g)
            continue
        out += [replace(g, segment=s) for s in tuple(segment) + tuple(rest)]
    return tuple(dict.fromkeys(out))


def segment_gates(wh: Warehouse, pop: str, rollout: str, start: datetime, end: datetime,
                  segment: tuple[str, ...], segment_cc: dict[str, str], control_arm: str) -> list[GateCheck]:
    """``segment_applied``: per treated host, the share of the segment's connections that really
    ran the treatment — closed in the window with the treatment's cc and a ``policy_generation``
    (a socket policy set it; tcp_conns). Goal 100 % of the connections opened after the policy
    applied; below 99 % fails (connections opened before it keep their algorithm)."""
    out = []
    for arm, host, applied, total in data.segment_conn_counts(wh, pop, rollout, start, end, segment, segment_cc):
        if arm == control_arm or arm not in segment_cc:
            continue
        share = applied / total if total else math.nan
        status = "skipped" if not total else "pass" if share >= 1 - gates_mod.CC_COMPLIANCE_MAX else "fail"
        out.append(GateCheck("segment_applied", arm, host, status, share, 1 - gates_mod.CC_COMPLIANCE_MAX,
                             f"{applied} of {total} {'+'.join(segment)} connections ran {segment_cc[arm]} "
                             f"set by the socket policy"))
    return out


def run_gates(wh: Warehouse, pop: str, rollout: str, start: datetime, end: datetime, arms: list[str],
              control_arm: str, segment: tuple[str, ...] | None = None):
    hh = data.host_hours(wh, pop, rollout, start, end)
    cc_counts = data.host_cc_counts(wh, pop, rollout, start, end)
    # a segment rollout: cc_compliance checks every connection of control hosts and the rest of
    # treated hosts (both run the host default: control's algorithm); the segment's connections on
    # treated hosts are segment_applied's
    cc_rest = data.subtract_counts(cc_counts, [c for s in segment or () for c in
                                               data.host_cc_counts(wh, pop, rollout, start, end, s)
                                               if c[0] != control_arm])
    assigned = data.assigned_hosts(wh, pop, rollout)
    arm_of = {host: arm for arm, host, _ in hh}
    for host, (arm, _) in assigned.items():
        if arm in arms:
            arm_of.setdefault(host, arm)
    hosts_by_arm: dict[str, set[str]] = {}
    for arm, host, _ in hh:
        hosts_by_arm.setdefault(arm, set()).add(host)
    out = gates_mod.arm_hosts_gate(hosts_by_arm, arms)
    first = data_first_hour(wh, pop, rollout)
    # hours before the rollout's first data are not expected; hours after its last data are (late)
    expected_from = max(start, first) if first else start
    out += gates_mod.completeness_gate(hh, arm_of, gates_mod.window_hours(expected_from, end))
    conns: dict[str, int] = {}
    for _, host, _, n in cc_counts:
        conns[host] = conns.get(host, 0) + n
    requests = data.http_requests_per_host(wh, pop, rollout, start, end)
    out += gates_mod.sampling_gate(conns, requests, arm_of, control_arm)
    out += gates_mod.cc_gate(cc_rest, gates_mod.expected_cc_by_host(cc_rest, assigned))
    pre_end = first or start
    pre_start = pre_end - (end - start)
    pre = data.http_requests_per_host(wh, pop, None, pre_start, pre_end) if pre_end > pre_start else {}
    out += gates_mod.traffic_share_gate(requests, pre, arm_of)
    return out


def data_first_hour(wh: Warehouse, pop: str, rollout: str) -> datetime | None:
    res = wh.query("""SELECT count(), min(hour) FROM cohort_hourly WHERE pop = {p:String} AND rollout_id = {r:String}""",
                   params={"p": pop, "r": rollout})
    cnt, lo = res.rows[0]
    if not cnt:
        return None
    return parse_sql_time(lo)


# ---- decision -------------------------------------------------------------------------------------

def decide(pop, rollout, arm, control_arm, results: list[Result], trips: list[BreakerTrip], gates, look,
           looks_planned, alpha_last, rest: frozenset[str] = frozenset()) -> Verdict:
    """``rest``: a segment rollout's untargeted segments: their guardrails act on a regression
    (rollback, halt) but need not be shown non-inferior to pass (their clients were not treated:
    a wide interval there is noise, not risk)."""
    v = Verdict(pop, rollout, arm, control_arm, "continue")
    guards = [r for r in results if r.role == "guardrail"]
    v.gates_failed = gates_mod.failed_for_arm(gates, arm, control_arm)
    for t in trips:
        v.reasons.append(f"circuit breaker: {arm} retransmitted {t.treatment_pct:.2f}% of bytes vs {t.control_pct:.2f}% "
                         f"on {control_arm} ({times(t.max_ratio)} at worst, > {t.breaker.ratio:g}× for {t.minutes} "
                         f"consecutive minutes from {t.first_minute} UTC)")
    regress = [r for r in guards if r.outcome == "regression"]
    for r in sorted(regress, key=lambda r: ("page", "ticket", "info").index(r.severity)):
        v.reasons.append(f"guardrail {r.metric} {r.statistic} ({r.severity}): {_effect_text(r)} — beyond the "
                         f"tolerated {_margin_text(r)} (one-sided p={r.p_value:.2g} ≤ α={r.alpha_look:.2g} at look "
                         f"{look}/{looks_planned})")
    if trips or any(r.severity == "page" for r in regress):
        v.decision = "rollback"
    elif regress:
        v.decision = "halt"
    if v.decision in ("rollback", "halt"):
        if v.gates_failed:
            v.reasons.append("data-quality gates also failed (the breaker/guardrail acts anyway): "
                             + "; ".join(v.gates_failed))
        return v
    if v.gates_failed:
        v.decision = "no_decision"
        v.reasons = ["data-quality gate failed: " + g for g in v.gates_failed]
        return v
    g_t = max((r.hosts_treatment for r in guards), default=0)
    g_c = max((r.hosts_control for r in guards), default=0)
    if guards and min_attainable_p(g_t, g_c, "greater") > alpha_last:
        v.decision = "inconclusive_by_design"
        v.reasons.append(f"{g_t} vs {g_c} hosts: the smallest p-value a host-permutation test can give "
                         f"({min_attainable_p(g_t, g_c, 'greater'):.3f}) is above α={alpha_last:.3f}; add hosts, "
                         f"pair them, or use a switchback design")
        return v
    pending = [r for r in guards if r.outcome != "non_inferior" and r.segment not in rest]
    if look >= looks_planned and not pending:
        v.decision = "pass"
        v.reasons.append("every guardrail non-inferior at the last planned look: " +
                         "; ".join(f"{r.metric} {r.statistic} {_effect_text(r)}" for r in guards))
    elif look >= looks_planned:
        v.decision = "halt"
        v.reasons.append("not shown non-inferior after the planned looks: " +
                         "; ".join(f"{r.metric} {r.statistic} {_effect_text(r)} vs {_margin_text(r)}" for r in pending))
    else:
        v.reasons.append(f"look {look}/{looks_planned}: no guardrail regressed; "
                         f"{len(guards) - len(pending)}/{len(guards)} already non-inferior")
    return v


def _effect_text(r: Result) -> str:
    zero = zero_base_text(r.metric, r.statistic, r.estimate, r.value_treatment, r.value_control)
    if zero:
        return f"{zero} on {r.control_arm} (a difference: no ratio from a zero base)"
    if not math.isfinite(r.estimate):
        return "no estimate" + (f" ({r.error})" if r.error else "")
    if r.statistic == SHARE_ABOVE:
        return (f"{r.value_treatment:.2%} vs {r.value_control:.2%} of connections on {r.control_arm} "
                f"({100 * r.estimate:+.2f} pp [{100 * r.ci_low:+.2f}, {100 * r.ci_high:+.2f}])")
    ci = (f" [{r.ci_low:+.1%}, {r.ci_high:+.1%}]" if math.isfinite(r.ci_low) and math.isfinite(r.ci_high) else "")
    return f"{r.estimate:+.1%}{ci} vs {r.control_arm}"


def _margin_text(r: Result) -> str:
    sign = "+" if HIGHER_IS_WORSE.get(r.metric, True) else "-"
    if r.statistic == SHARE_ABOVE:
        return f"{sign}{100 * (r.margin or 0):.2f} pp"
    return f"{sign}{(r.margin or 0):.0%}"
