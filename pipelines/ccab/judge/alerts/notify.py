"""Sending alerts: Alertmanager API v2 postable alerts, POSTed to a webhook."""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.request
from datetime import datetime, timezone

from ccab.judge.alerts.model import Alert
from ccab.judge.alerts.text import pct, times


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
        est = times(a.estimate) if a.kind == "breaker" else pct(a.estimate, a.statistic)
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
                            "ci": f"{pct(a.ci_low, a.statistic)} to {pct(a.ci_high, a.statistic)}",
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
