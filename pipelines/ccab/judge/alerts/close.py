"""Closing alerts: what the rollout controller did about them (``set_action``), a person's
acknowledgement or resolution (``set_status``), every open alert of an arm that is done
(``resolve_arm``)."""

from __future__ import annotations

import time

from ccab.base.warehouse import Warehouse
from ccab.judge.alerts.model import ACTIONS, STATUSES, Alert
from ccab.judge.alerts.store import read_alerts, store_row


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
    wh.insert_raw("alerts", b"".join(store_row(a, seq) for a in rows))
    return rows


def set_status(wh: Warehouse, alert_ids: list[str], status: str) -> list[Alert]:
    """``acknowledged`` (a person took it) or ``resolved``; returns the alerts changed."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    rows = [a for a in read_alerts(wh, alert_ids=list(alert_ids)) if a.status != status]
    for a in rows:
        a.status = status
    if rows:
        wh.insert_raw("alerts", b"".join(store_row(a, time.time_ns()) for a in rows))
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
        wh.insert_raw("alerts", b"".join(store_row(a, time.time_ns()) for a in rows))
    return rows
