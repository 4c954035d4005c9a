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
import http.client
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
from ccab.base.vocabulary import zero_base_text
from ccab.base.warehouse import Warehouse
from ccab.judge.model import HIGHER_IS_WORSE, RolloutJudgement

ACTIONS = ("none", "halted", "rolled_back", "promoted")
STATUSES = ("firing", "acknowledged", "resolved")


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
    look: int = 1
    status: str = "firing"

    def as_dict(self) -> dict:
        d = asdict(self)
        for k in ("estimate", "ci_low", "ci_high", "p_value"):
            if not (isinstance(d[k], float) and math.isfinite(d[k])):
                d[k] = None
        return d


def times(x: float) -> str:
    """A breaker's ratio as printed everywhere (text, annotations, audit): ``8.55×``; a control arm
    with no retransmits at all gives an infinite ratio: ``∞× (none on control)``."""
    return f"{x:.2f}×" if math.isfinite(x) else "∞× (none on control)"


def alert_id(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]


def _pct(x: float, statistic: str = "") -> str:
    """A relative effect as a percentage; a share statistic's absolute difference in points."""
    if not math.isfinite(x):
        return "n/a"
    return f"{100 * x:+.2f} pp" if statistic.startswith("share_above") else f"{x:+.1%}"


def _effect(r) -> str:
    """A result's effect: relative, or from a zero base the difference ('+2.3 ms from 0')."""
    return zero_base_text(r.metric, r.statistic, r.estimate, r.value_treatment, r.value_control) \
        or _pct(r.estimate, r.statistic)


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
        return ", ".join(f"{r.statistic} {_effect(r)}" for r in rs)

    if better and not worse:
        return "improvement", f"improvement derived from the quantiles: {names(better)} better, none worse"
    if worse and not better:
        return "regression", f"regression derived from the quantiles: {names(worse)} worse, none better"
    if better and worse:
        return "none", f"no direction: quantiles moved both ways ({names(better)} better; {names(worse)} worse)"
    return "none", "no direction: no quantile moved significantly on its own (a change of shape)"


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
            summary = (f"{r.treatment_arm} regressed {r.metric} {r.statistic} by {_effect(r)} vs "
                       f"{r.control_arm} on {where}")
            desc = (f"Guardrail {r.metric} {r.statistic} ({r.severity}) on {where}, window {ws}–{we} UTC: "
                    f"{r.treatment_arm} {_value(r.metric, r.value_treatment, r.statistic)} vs {r.control_arm} "
                    f"{_value(r.metric, r.value_control, r.statistic)}, {_effect(r)} "
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
            summary = (f"{r.treatment_arm} {r.outcome}: {r.metric} {r.statistic}{seg} {_effect(r)} vs "
                       f"{r.control_arm} on {where}")
            desc = (f"Informational ({kind}) finding on {where}, window {ws}–{we} UTC: {r.metric} {r.statistic}{seg} "
                    f"{r.treatment_arm} {_value(r.metric, r.value_treatment, r.statistic)} vs {r.control_arm} "
                    f"{_value(r.metric, r.value_control, r.statistic)}, {_effect(r)} (95% interval {_pct(r.ci_low, r.statistic)} to "
                    f"{_pct(r.ci_high, r.statistic)}; p={r.p_value:.2g}, BH q={r.q_value:.2g}; {r.hosts_treatment} vs "
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


# ---- storage --------------------------------------------------------------------------------------

_COLUMNS = ("alert_id", "ts_ms", "first_seen_ms", "rollout_id", "pop", "kind", "metric", "statistic", "segment",
            "treatment_arm", "control_arm", "direction", "estimate", "ci_low", "ci_high", "p_value", "severity",
            "action", "window_start", "window_end", "summary", "description", "report_url", "look", "status")


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


def before_rollout(wh: Warehouse, alerts: list[Alert]) -> set[str]:
    """The ids of ``alerts`` judged on a window that ended before their rollout's first assignment
    was issued (a ``ccab_compare`` run over pre-rollout hours): not findings about the rollout."""
    rollouts = sorted({a.rollout_id for a in alerts})
    if not rollouts:
        return set()
    started = dict(wh.query("SELECT rollout_id, min(issued_at_ms) FROM assignments WHERE has({r:Array(String)}, "
                            "rollout_id) GROUP BY rollout_id", params={"r": rollouts}).rows)
    out = set()
    for a in alerts:
        ms = started.get(a.rollout_id)
        if ms is None:
            continue
        end = datetime.fromisoformat(str(a.window_end).replace(" ", "T").replace("Z", ""))
        if end.tzinfo is None:
            end = end.replace(tzinfo=timezone.utc)
        if end.timestamp() * 1000 <= int(ms):
            out.add(a.alert_id)
    return out


def write_alerts(wh: Warehouse, alerts: list[Alert], seq: int) -> list[Alert]:
    """Upsert alerts by id, keeping the first time each was seen and what the controller did.
    Every computation goes to ``alert_history`` (append-only, with its window and look). An alert
    the controller acted on (``action`` != none) or that was resolved is **frozen**: its row keeps
    the numbers that were acted on, a later analysis only adds history. Returns the alerts that
    are new or whose severity or estimate changed (what to notify)."""
    if not alerts:
        return []
    existing = {a.alert_id: a for a in read_alerts(wh, alert_ids=[a.alert_id for a in alerts])}
    changed, rows = [], []
    for a in alerts:
        old = existing.get(a.alert_id)
        if old is not None:
            if old.action != "none" or old.status == "resolved":
                continue  # evidence of an action: never rewritten
            a.first_seen_ms = old.first_seen_ms
            a.action = old.action
            a.status = old.status
            rows.append(a)
            if old.severity == a.severity and _close(old.estimate, a.estimate):
                continue
        else:
            rows.append(a)
        changed.append(a)
    if rows:
        wh.insert_raw("alerts", b"".join(_store_row(a, seq) for a in rows))
    wh.insert_raw("alert_history", b"".join(_history_row(a) for a in alerts))
    return changed


def _history_row(a: Alert) -> bytes:
    d = {"alert_id": a.alert_id, "computed_ms": a.ts_ms, "rollout_id": a.rollout_id, "pop": a.pop,
         "treatment_arm": a.treatment_arm, "window_start": a.window_start, "window_end": a.window_end,
         "look": a.look, "severity": a.severity, "summary": a.summary}
    for k in ("estimate", "ci_low", "ci_high", "p_value"):
        v = getattr(a, k)
        d[k] = v if math.isfinite(v) else "nan"
    return orjson.dumps(d) + b"\n"


def alert_history(wh: Warehouse, alert_id_: str) -> list[dict]:
    """Every computation of one alert, oldest first (window, look, numbers)."""
    res = wh.query("""SELECT computed_ms, window_start, window_end, look, estimate, severity, summary
                      FROM alert_history WHERE alert_id = {a:String}
                      ORDER BY computed_ms, look, window_end""", params={"a": alert_id_})
    return [dict(zip(("computed_ms", "window_start", "window_end", "look", "estimate", "severity", "summary"),
                     (r[0], str(r[1]), str(r[2]), int(r[3]), float(r[4]), r[5], r[6]))) for r in res.rows]


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
        if action != "none":
            a.status = "resolved"  # the arm was acted on: the page is over
    wh.insert_raw("alerts", b"".join(_store_row(a, seq) for a in rows))
    return rows


def set_status(wh: Warehouse, alert_ids: list[str], status: str) -> list[Alert]:
    """``acknowledged`` (a person took it) or ``resolved``; returns the alerts changed."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    rows = [a for a in read_alerts(wh, alert_ids=list(alert_ids)) if a.status != status]
    for a in rows:
        a.status = status
    if rows:
        wh.insert_raw("alerts", b"".join(_store_row(a, time.time_ns()) for a in rows))
    return rows


def resolve_arm(wh: Warehouse, rollout_id: str, arm: str, action: str) -> list[Alert]:
    """Resolve every open alert of ``arm`` in ``rollout_id`` (the arm was promoted, rolled back or
    halted); an alert nobody acted on gets ``action``. Returns them (to send with ``endsAt``)."""
    rows = [a for a in read_alerts(wh, rollout_id=rollout_id) if a.treatment_arm == arm and a.status != "resolved"]
    for a in rows:
        a.status = "resolved"
        if a.action == "none":
            a.action = action
    if rows:
        wh.insert_raw("alerts", b"".join(_store_row(a, time.time_ns()) for a in rows))
    return rows


# ---- webhook --------------------------------------------------------------------------------------

def alertmanager_payload(alerts: list[Alert]) -> list[dict]:
    """Alertmanager API v2 ``postableAlerts``: labels identify, annotations explain."""
    out = []
    for a in alerts:
        did = {"none": "the rollout controller has not acted (yet)", "halted": "the rollout controller halted the arm",
               "rolled_back": "the rollout controller rolled the arm back to control",
               "promoted": "the arm was promoted"}.get(a.action, a.action)
        nxt = (f"ccab rollout status {a.rollout_id} --audit 20" if a.action != "none" else
               f"ccab rollout rollback {a.rollout_id} --arm {a.treatment_arm} --reason 'page {a.alert_id}' "
               f"--alert {a.alert_id}   (or: ccab rollout status {a.rollout_id})")
        est = times(a.estimate) if a.kind == "breaker" else _pct(a.estimate, a.statistic)
        item = {
            "labels": {"alertname": "CcabRegression" if a.kind in ("guardrail", "breaker") else f"Ccab_{a.kind}",
                       "severity": a.severity, "team": "ccab", "component": "rollout",
                       "rollout": a.rollout_id, "arm": a.treatment_arm, "guardrail": f"{a.metric}:{a.statistic}",
                       "rollout_id": a.rollout_id, "pop": a.pop, "kind": a.kind,
                       "metric": a.metric, "statistic": a.statistic, "segment": a.segment,
                       "treatment_arm": a.treatment_arm, "control_arm": a.control_arm, "alert_id": a.alert_id},
            "annotations": {"summary": a.summary, "description": f"{a.description} Action: {did}.",
                            "runbook": nxt, "window": f"{a.window_start}..{a.window_end} (look {a.look})",
                            "action": a.action, "estimate": est,
                            "ci": f"{_pct(a.ci_low, a.statistic)} to {_pct(a.ci_high, a.statistic)}",
                            "p_value": f"{a.p_value:.3g}" if math.isfinite(a.p_value) else "n/a",
                            "report": a.report_url},
            "startsAt": datetime.fromtimestamp(a.first_seen_ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z"),
            "generatorURL": a.report_url or "ccab://alerts/" + a.alert_id,
        }
        if a.status == "resolved":
            item["endsAt"] = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        out.append(item)
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
    except (OSError, http.client.HTTPException) as exc:  # the peer dropped the connection, a timeout
        what = {"RemoteDisconnected": "closed the connection without an answer"}.get(type(exc).__name__, "")
        raise RuntimeError(f"alert webhook {url} {what or 'failed'}: {type(exc).__name__}"
                           + (f": {exc}" if str(exc) and not what else "")
                           + "; the alerts may not have been delivered") from None
    return len(alerts)
