"""Alerts on-call receives: built from the judge's findings, stored in ``alerts``, sent to a webhook.

- ``alert_id`` = hash of what the finding *is* (rollout, pop, kind, metric, statistic, segment, arms,
  direction) — not of the window — so every look that sees it again replaces the same row.
- Severities: guardrail regressions carry their guardrail's severity; a circuit-breaker trip pages;
  a failed data-quality gate is a ticket; informational, segment and shift findings are ``info``.
- ``action`` is what the rollout controller did (:func:`set_action`): ``none`` until it acts.
- The webhook speaks Alertmanager's API (``POST /api/v2/alerts``, a JSON list of
  ``{labels, annotations, startsAt, generatorURL}``), so it can point at an Alertmanager or any
  receiver that accepts that shape. ``ccab alerts --json`` prints the contract's fields.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import orjson
from ccab.base.chtime import sql_time
from ccab.base.vocabulary import get as get_metric
from ccab.base.warehouse import Warehouse
from ccab.judge.model import HIGHER_IS_WORSE, RolloutJudgement

ACTIONS = ("none", "halted", "rolled_back")


@dataclass
class Alert:
    alert_id: str
    ts_ms: int
    rollout_id: str
    pop: str
    kind: str
    metric: str
    statistic: str
    segment: str
    treatment_arm: str
    control_arm: str
    direction: str
    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    severity: str
    action: str
    window_start: str
    window_end: str
    summary: str
    description: str
    report_url: str = ""
    first_seen_ms: int = 0

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("estimate", "ci_low", "ci_high", "p_value"):
            if not (isinstance(d[k], float) and math.isfinite(d[k])):
                d[k] = None
        return d


def alert_id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]


def _pct(x: float, statistic: str = "") -> str:
    """A relative effect as a percentage; a share statistic's absolute difference in points."""
    if not math.isfinite(x):
        return "n/a"
    return f"{100 * x:+.2f} pp" if statistic.startswith("share_above") else f"{x:+.1%}"


def _value(metric: str, v: float, statistic: str = "") -> str:
    if not math.isfinite(v):
        return "n/a"
    if statistic.startswith("share_above"):
        return f"{v:.2%} of connections"
    m = get_metric(metric)
    return f"{v / m.scale:.3g} {m.unit}"


def _margin(r) -> str:
    sign = "+" if HIGHER_IS_WORSE[r.metric] else "-"
    m = r.margin or 0
    return f"{sign}{100 * m:.2f} pp" if r.statistic.startswith("share_above") else f"{sign}{m:.0%}"


def shift_direction(results, shift) -> tuple[str, str]:
    """(direction, how) of a whole-distribution shift finding, derived from the same arm's
    informational quantile findings of that metric (the shift statistic itself has no sign):
    ``improvement`` when at least one quantile improved significantly (BH) and none regressed,
    ``regression`` the other way round, ``none`` (non-directional) otherwise."""
    quant = [r for r in results if r.role == "info" and r.metric == shift.metric
             and r.treatment_arm == shift.treatment_arm and r.segment == shift.segment
             and r.statistic.startswith("p") and r.statistic[1:].isdigit()]
    better = [r for r in quant if r.outcome == "improvement"]
    worse = [r for r in quant if r.outcome == "regression"]

    def names(rs):
        return ", ".join(f"{r.statistic} {_pct(r.estimate)}" for r in rs)

    if better and not worse:
        return "improvement", f"improvement derived from the quantiles: {names(better)} better, none worse"
    if worse and not better:
        return "regression", f"regression derived from the quantiles: {names(worse)} worse, none better"
    if better and worse:
        return "none", f"no direction: quantiles moved both ways ({names(better)} better; {names(worse)} worse)"
    return "none", "no direction: no quantile moved significantly on its own (a change of shape)"


def build_alerts(j: RolloutJudgement, start: datetime, end: datetime, report_url: str = "") -> list[Alert]:
    """The alerts of one rollout's judgement (guardrail regressions, breaker trips, failed gates,
    significant informational / segment / shift findings)."""
    now = int(time.time() * 1000)
    out: list[Alert] = []
    ws, we = sql_time(start), sql_time(end)
    where = f"{j.pop}/{j.rollout_id}"

    def make(kind, metric, statistic, segment, arm, direction, est, lo, hi, p, severity, summary, description):
        aid = alert_id(j.rollout_id, j.pop, kind, metric, statistic, segment, arm, j.control_arm, direction)
        out.append(Alert(aid, now, j.rollout_id, j.pop, kind, metric, statistic, segment, arm, j.control_arm,
                         direction, est, lo, hi, p, severity, "none", ws, we, summary, description, report_url, now))

    for r in j.results:
        if r.outcome not in ("regression", "improvement", "shift"):
            continue
        if r.role == "guardrail":
            if r.outcome != "regression":
                continue
            summary = (f"{r.treatment_arm} regressed {r.metric} {r.statistic} by {_pct(r.estimate, r.statistic)} vs "
                       f"{r.control_arm} on {where}")
            desc = (f"Guardrail {r.metric} {r.statistic} ({r.severity}) on {where}, window {ws}–{we} UTC: "
                    f"{r.treatment_arm} {_value(r.metric, r.value_treatment, r.statistic)} vs {r.control_arm} "
                    f"{_value(r.metric, r.value_control, r.statistic)}, {_pct(r.estimate, r.statistic)} "
                    f"(interval {_pct(r.ci_low, r.statistic)} to {_pct(r.ci_high, r.statistic)}; one-sided p={r.p_value:.2g} that it is "
                    f"within the tolerated {_margin(r)}, "
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
            summary = (f"{r.treatment_arm} {r.outcome}: {r.metric} {r.statistic}{seg} {_pct(r.estimate, r.statistic)} vs "
                       f"{r.control_arm} on {where}")
            desc = (f"Informational ({kind}) finding on {where}, window {ws}–{we} UTC: {r.metric} {r.statistic}{seg} "
                    f"{r.treatment_arm} {_value(r.metric, r.value_treatment, r.statistic)} vs {r.control_arm} "
                    f"{_value(r.metric, r.value_control, r.statistic)}, {_pct(r.estimate, r.statistic)} (95% interval {_pct(r.ci_low, r.statistic)} to "
                    f"{_pct(r.ci_high, r.statistic)}; p={r.p_value:.2g}, BH q={r.q_value:.2g}; {r.hosts_treatment} vs "
                    f"{r.hosts_control} hosts).")
            make(kind, r.metric, r.statistic, r.segment, r.treatment_arm, r.outcome, r.estimate, r.ci_low, r.ci_high,
                 r.p_value, "info", summary, desc)
    for t in j.trips:
        summary = (f"circuit breaker: {t.treatment_arm} retransmits {t.max_ratio:.1f}× {t.control_arm} for "
                   f"{t.minutes} min on {where}")
        desc = (f"Circuit breaker on {where}: {t.treatment_arm} retransmitted {t.treatment_pct:.2f}% of bytes vs "
                f"{t.control_pct:.2f}% on {t.control_arm} — more than {t.breaker.ratio:g}× for {t.minutes} consecutive "
                f"minutes ({t.first_minute}–{t.last_minute} UTC). Deterministic rule, no statistics involved.")
        make("breaker", "retrans_pct", f"breaker:{t.breaker.ratio:g}x/{t.breaker.minutes}m", "all", t.treatment_arm,
             "regression", t.max_ratio - 1, math.nan, math.nan, math.nan, "page", summary, desc)
    failed = [g for g in j.gates if g.status == "fail"]
    for g in failed:
        who = f"{g.arm}/{g.host}" if g.host else (g.arm or "rollout")
        make("gate", "data_quality", g.gate, g.host or "all", g.arm, "regression", g.value, math.nan, math.nan,
             math.nan, "ticket", f"data-quality gate {g.gate} failed for {who} on {where}: no decision",
             f"Data-quality gate {g.gate} failed for {who} on {where}, window {ws}–{we} UTC: {g.detail}. The judge "
             f"makes no decision while a gate fails (it never passes a canary on bad data).")
    return out


# ---- storage --------------------------------------------------------------------------------------

_COLUMNS = ("alert_id", "ts_ms", "first_seen_ms", "rollout_id", "pop", "kind", "metric", "statistic", "segment",
            "treatment_arm", "control_arm", "direction", "estimate", "ci_low", "ci_high", "p_value", "severity",
            "action", "window_start", "window_end", "summary", "description", "report_url")


def _store_row(a: Alert, seq: int) -> bytes:
    d = {k: getattr(a, k) for k in _COLUMNS}
    for k in ("estimate", "ci_low", "ci_high", "p_value"):
        if not math.isfinite(d[k]):
            d[k] = "nan"
    d["version"] = seq
    return orjson.dumps(d) + b"\n"


def read_alerts(wh: Warehouse, rollout_id: str = "", severity: str = "", alert_ids: list[str] | None = None,
                kinds: list[str] | None = None) -> list[Alert]:
    res = wh.query(
        f"""SELECT {', '.join(_COLUMNS)} FROM alerts FINAL
            WHERE ({{r:String}} = '' OR rollout_id = {{r:String}})
              AND ({{s:String}} = '' OR severity = {{s:String}})
              AND (empty({{ids:Array(String)}}) OR has({{ids:Array(String)}}, alert_id))
              AND (empty({{kinds:Array(String)}}) OR has({{kinds:Array(String)}}, kind))
            ORDER BY indexOf(['page', 'ticket', 'info'], severity), rollout_id, treatment_arm, kind, metric,
                     statistic, segment""",
        params={"r": rollout_id, "s": severity, "ids": alert_ids or [], "kinds": kinds or []})
    out = []
    for row in res.rows:
        d = dict(zip(_COLUMNS, row))
        for k in ("estimate", "ci_low", "ci_high", "p_value"):
            d[k] = math.nan if d[k] is None else float(d[k])
        out.append(Alert(**d))
    return out


def write_alerts(wh: Warehouse, alerts: list[Alert], seq: int) -> list[Alert]:
    """Upsert alerts by id, keeping the first time each was seen and what the controller did.
    Returns the alerts that are new or whose severity or estimate changed (what to notify)."""
    if not alerts:
        return []
    existing = {a.alert_id: a for a in read_alerts(wh, alert_ids=[a.alert_id for a in alerts])}
    changed = []
    for a in alerts:
        old = existing.get(a.alert_id)
        if old is not None:
            a.first_seen_ms = old.first_seen_ms
            a.action = old.action
            if old.severity == a.severity and _close(old.estimate, a.estimate):
                continue
        changed.append(a)
    wh.insert_raw("alerts", b"".join(_store_row(a, seq) for a in alerts))
    return changed


def _close(a: float, b: float) -> bool:
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.isfinite(a) == math.isfinite(b)
    return abs(a - b) <= 0.005 * max(1.0, abs(a))


def set_action(wh: Warehouse, alert_ids: list[str], action: str) -> list[Alert]:
    """Record what the rollout controller did about these alerts (``halted``, ``rolled_back``)."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    rows = read_alerts(wh, alert_ids=list(alert_ids))
    if not rows:
        return []
    seq = time.time_ns()
    for a in rows:
        a.action = action
    wh.insert_raw("alerts", b"".join(_store_row(a, seq) for a in rows))
    return rows


# ---- webhook --------------------------------------------------------------------------------------

def alertmanager_payload(alerts: list[Alert]) -> list[dict]:
    """Alertmanager API v2 ``postableAlerts``: labels identify, annotations explain."""
    out = []
    for a in alerts:
        did = {"none": "the rollout controller has not acted (yet)", "halted": "the rollout controller halted the arm",
               "rolled_back": "the rollout controller rolled the arm back to control"}[a.action]
        out.append({
            "labels": {"alertname": "CcabRegression" if a.kind in ("guardrail", "breaker") else f"Ccab_{a.kind}",
                       "severity": a.severity, "rollout_id": a.rollout_id, "pop": a.pop, "kind": a.kind,
                       "metric": a.metric, "statistic": a.statistic, "segment": a.segment,
                       "treatment_arm": a.treatment_arm, "control_arm": a.control_arm, "alert_id": a.alert_id},
            "annotations": {"summary": a.summary, "description": f"{a.description} Action: {did}.",
                            "action": a.action, "estimate": _pct(a.estimate, a.statistic),
                            "ci": f"{_pct(a.ci_low, a.statistic)} to {_pct(a.ci_high, a.statistic)}",
                            "p_value": f"{a.p_value:.3g}" if math.isfinite(a.p_value) else "n/a",
                            "report": a.report_url},
            "startsAt": datetime.fromtimestamp(a.first_seen_ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z"),
            "generatorURL": a.report_url or "ccab://alerts/" + a.alert_id,
        })
    return out


def notify(url: str, alerts: list[Alert], timeout_s: float = 10.0) -> int:
    """POST ``alerts`` to ``url`` (Alertmanager-compatible); returns how many were sent. Raises
    ``RuntimeError`` naming the URL and the HTTP status when the receiver refuses them."""
    if not alerts:
        return 0
    body = json.dumps(alertmanager_payload(alerts)).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            if resp.status >= 300:
                raise RuntimeError(f"alert webhook {url} answered HTTP {resp.status}")
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"alert webhook {url} answered HTTP {exc.code}: {exc.read()[:200]!r}") from None
    except urllib.error.URLError as exc:
        raise RuntimeError(f"alert webhook {url} unreachable: {exc.reason}") from None
    return len(alerts)
