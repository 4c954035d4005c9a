"""Storing alerts: ``alerts`` (ReplacingMergeTree by id: the newest version of each) and
``alert_history`` (every computation, append-only); reading them back."""

from __future__ import annotations

import math
from datetime import datetime, timezone

import orjson
from ccab.base.warehouse import Warehouse
from ccab.judge.alerts.model import Alert

_COLUMNS = ("alert_id", "ts_ms", "first_seen_ms", "rollout_id", "pop", "kind", "metric", "statistic", "segment",
            "treatment_arm", "control_arm", "direction", "estimate", "ci_low", "ci_high", "p_value", "severity",
            "action", "window_start", "window_end", "summary", "description", "report_url", "look", "status")


def store_row(a: Alert, seq: int) -> bytes:
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
        wh.insert_raw("alerts", b"".join(store_row(a, seq) for a in rows))
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
