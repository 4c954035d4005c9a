"""Evidence is immutable (issue 16): the alert the controller acted on keeps its numbers; every
computation is in alert_history with its window and look; one number per breaker finding."""

from __future__ import annotations

import math

from ccab.judge.alerts.build import breaker_alert
from ccab.judge.alerts.close import resolve_arm, set_action, set_status
from ccab.judge.alerts.model import Alert
from ccab.judge.alerts.notify import alertmanager_payload
from ccab.judge.alerts.store import alert_history, read_alerts, write_alerts
from ccab.judge.model import Breaker, BreakerTrip


def _alert(estimate: float, ws: str, we: str, look: int = 1, arm: str = "bbr1") -> Alert:
    return Alert("a" * 20, 1, "r1", "tyo1", "guardrail", "retrans_pct", "ratio", "all", arm, "control",
                 "regression", estimate, estimate - 1, estimate + 1, 0.001, "page", "none", ws, we,
                 f"{arm} regressed retrans_pct ratio by {estimate:+.1%}", "d", "", 1, look)


def test_a_later_analysis_never_rewrites_the_alert_the_controller_acted_on(warehouse):
    write_alerts(warehouse, [_alert(8.31, "2025-11-20 00:00:00", "2025-11-20 03:00:00")], 1)
    set_action(warehouse, ["a" * 20], "rolled_back")
    # `ccab analyze` on another window finds the same finding with another number
    write_alerts(warehouse, [_alert(8.881, "2025-11-20 00:00:00", "2025-11-20 06:00:00", look=2)], 2)
    (a,) = read_alerts(warehouse, alert_ids=["a" * 20])
    assert a.estimate == 8.31 and a.window_end.startswith("2025-11-20 03:00") and a.action == "rolled_back"
    assert a.status == "resolved"
    hist = alert_history(warehouse, "a" * 20)
    assert [h["estimate"] for h in hist] == [8.31, 8.881] and [h["look"] for h in hist] == [1, 2]


def test_alerts_of_a_promoted_arm_are_resolved_and_acknowledged_exists(warehouse):
    write_alerts(warehouse, [_alert(0.3, "2025-11-20 00:00:00", "2025-11-20 03:00:00", arm="bbr2")], 1)
    assert set_status(warehouse, ["a" * 20], "acknowledged")[0].status == "acknowledged"
    (r,) = resolve_arm(warehouse, "r1", "bbr2", "promoted")
    (a,) = read_alerts(warehouse, alert_ids=["a" * 20])
    assert a.status == "resolved" and a.action == "promoted"
    (p,) = alertmanager_payload([r])
    assert "endsAt" in p and p["labels"]["rollout"] == "r1" and p["labels"]["arm"] == "bbr2"


def test_breaker_alert_has_one_number_in_json_and_text():
    t = BreakerTrip("bbr1", "control", Breaker(ratio=3, minutes=5), "2025-11-20 00:03:00", "2025-11-20 00:07:00", 5,
                    8.5512, 4.2, 0.49)
    a = breaker_alert("r1", "tyo1", t)
    assert math.isclose(a.estimate, 8.5512)
    assert "8.55×" in a.summary and "8.55×" in a.description
    (p,) = alertmanager_payload([a])
    assert p["annotations"]["estimate"] == "8.55×"
    assert p["annotations"]["runbook"].startswith("ccab rollout rollback r1 --arm bbr1")


def test_breaker_against_a_control_without_retransmits_prints_infinity_not_inf():
    t = BreakerTrip("bbr", "control", Breaker(ratio=3, minutes=5), "2026-11-24 05:02:00", "2026-11-24 05:06:00", 5,
                    math.inf, 9.9, 0.0)
    a = breaker_alert("r1", "lab", t)
    assert "∞× (none on control)" in a.summary and "inf" not in a.summary
    assert a.as_dict()["estimate"] is None
    assert alertmanager_payload([a])[0]["annotations"]["estimate"] == "∞× (none on control)"
