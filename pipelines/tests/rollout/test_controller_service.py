"""The controller service: leader election between two replicas, /metrics per the contract in
deploy/prometheus/README.md, /healthz, and its pages in the real Alertmanager (Debian's binary,
alertmanager_fixture): labels that route, silences honoured, endsAt after the rollback."""

from __future__ import annotations

import urllib.request
from datetime import datetime, timezone

from alertmanager_fixture import wait_until
from ccab.alerting import create_silence, list_alerts
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import Controller
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.service import AlertmanagerPager, Service
from ccab.rollout.signing import load_private_key
from ccab.rollout.state import Store
from factories import base_plan
from paths import VECTORS
from test_controller_safety import MemoryBus

KEY = VECTORS / "test_ed25519_seed.hex"
T0 = int(datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc).timestamp() * 1000)
TRIP = {"pop": "p1", "arm": "b1", "control_arm": "control", "metric": "retrans_pct", "ratio": 3.0, "minutes": 5,
        "max_ratio": 8.55, "treatment_pct": 4.2, "control_pct": 0.49, "first_minute": "2026-01-01 12:03:00",
        "last_minute": "2026-01-01 12:07:00", "alert_id": "c" * 20}


def _plan(rid):
    return plan_from_dict(base_plan(rollout_id=rid, stages=[{"name": "s1", "hosts": 2}],
                                    breakers=[{"metric": "retrans_pct", "ratio": 3, "minutes": 5}]))


def _setup(root, rid, bus, pager=None, trip=True):
    now = [T0]
    plan = _plan(rid)

    def make(store):
        return Controller(plan, store, bus, load_private_key(KEY), clock=lambda: now[0], pager=pager,
                          analysis=Analysis(breakers=lambda s, e: [dict(TRIP)]
                                            if trip and now[0] >= T0 + 9 * 60_000 else []))
    make(Store(root / rid)).start()
    return make, now


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_two_replicas_one_leader_metrics_and_health(tmp_path):
    root = tmp_path / "rollouts"
    bus = MemoryBus()
    make, now = _setup(root, "r1", bus, trip=False)
    bus.apply_all()
    a = Service(root, make, interval_s=1, say=lambda _m: None, clock=lambda: now[0] / 1000)
    b = Service(root, make, interval_s=1, say=lambda _m: None, clock=lambda: now[0] / 1000)
    assert b.healthy()[0] is False  # no loop yet
    a.loop_once()
    b.loop_once()
    assert a.leader.is_leader and not b.leader.is_leader
    httpd = a.serve("127.0.0.1", 0)
    try:
        port = httpd.server_address[1]
        code, text = _get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200
        assert "ccab_controller_is_leader 1" in text
        assert f"ccab_controller_heartbeat_timestamp_seconds {T0 / 1000:.3f}" in text
        assert 'ccab_rollout_status{rollout="r1",status="running"} 1' in text
        assert 'ccab_rollout_status{rollout="r1",status="completed"} 0' in text
        assert 'ccab_rollout_arm_state{rollout="r1",arm="b1",state="active"} 1' in text
        assert 'ccab_rollout_stage{rollout="r1"} 0' in text
        code, text = _get(f"http://127.0.0.1:{port}/healthz")
        assert code == 200 and "leader" in text
    finally:
        httpd.shutdown()
    assert "ccab_rollout_status" not in b.metrics_text() and "ccab_controller_is_leader 0" in b.metrics_text()
    a.leader.release()  # the leader dies: the standby takes over at its next loop, with a new token
    b.loop_once()
    assert b.leader.is_leader and b.leader.token == 2


def test_the_breaker_page_reaches_alertmanager_silenced_then_resolved(tmp_path, alertmanager):
    root = tmp_path / "rollouts"
    bus = MemoryBus()
    pager = AlertmanagerPager(alertmanager.url)
    make, now = _setup(root, "r-am", bus, pager)
    bus.apply_all()
    svc = Service(root, make, interval_s=1, say=lambda _m: None, clock=lambda: now[0] / 1000)
    create_silence(alertmanager.url, {"rollout": "r-am", "arm": "b1"}, created_by="on-call", comment="known, INC-7")
    now[0] += 2 * 60_000
    svc.loop_once()
    assert not list_alerts(alertmanager.url, {"rollout": "r-am"})
    now[0] += 9 * 60_000
    svc.loop_once()  # the breaker trips: b1 rolled back and paged
    (a,) = wait_until(lambda: list_alerts(alertmanager.url, {"rollout": "r-am"}), what="the page")
    lab = a["labels"]
    assert (lab["rollout"], lab["pop"], lab["arm"], lab["severity"], lab["guardrail"]) == \
        ("r-am", "p1", "b1", "page", "breaker:retrans_pct")
    assert a["status"]["state"] == "suppressed" and a["status"]["silencedBy"]  # the silence is honoured
    assert a["annotations"]["runbook"] == "ccab rollout status r-am --audit 20"
    assert "8.55×" in a["annotations"]["summary"]
    st = Store(root / "r-am").load()
    assert st.arms["b1"] == "rolled_back" and st.pages["b1"]
    bus.apply_all()  # the agents applied control again
    now[0] += 60_000
    svc.loop_once()
    wait_until(lambda: not list_alerts(alertmanager.url, {"rollout": "r-am"}), what="the page resolved (endsAt)")
    assert not Store(root / "r-am").load().pages


def test_a_page_from_the_warehouse_alert_fires_in_alertmanager_until_the_hosts_are_back(tmp_path, alertmanager,
                                                                                       warehouse_env):
    """Wired as `ccab controller run` wires it: the breaker's alert is stored in the warehouse, the
    controller records its action on it (which resolves the stored alert) and pages from the stored
    alert; the page must still fire in Alertmanager and resolve only after the hosts applied control."""
    import time

    from ccab.judge.alerts.build import breaker_alert
    from ccab.judge.alerts.store import write_alerts
    from ccab.judge.model import Breaker, BreakerTrip
    from ccab.pipeline import alert_payloads, arm_done, open_warehouse, record_action

    rid, root, bus = "r-wh", tmp_path / "rollouts", MemoryBus()
    now = [T0]
    plan = _plan(rid)

    def breakers(start, end):  # as pipeline.controller_breakers: the trip is stored as an alert first
        if now[0] < T0 + 9 * 60_000:
            return []
        t = BreakerTrip("b1", "control", Breaker(ratio=3, minutes=5), "2026-01-01 12:03:00", "2026-01-01 12:07:00",
                        5, 8.55, 4.2, 0.49)
        alert = breaker_alert(rid, "p1", t)
        with open_warehouse() as wh:
            write_alerts(wh, [alert], time.time_ns())
        return [dict(TRIP, alert_id=alert.alert_id)]

    def make(store):
        return Controller(plan, store, bus, load_private_key(KEY), clock=lambda: now[0],
                          pager=AlertmanagerPager(alertmanager.url),
                          analysis=Analysis(breakers=breakers, record_action=record_action,
                                            alert_payloads=alert_payloads, arm_done=arm_done(rid)))
    make(Store(root / rid)).start()
    bus.apply_all()
    svc = Service(root, make, interval_s=1, say=lambda _m: None, clock=lambda: now[0] / 1000)
    now[0] += 11 * 60_000
    svc.loop_once()  # the breaker trips: b1 rolled back, paged from the stored (already resolved) alert
    st = Store(root / rid).load()
    assert st.arms["b1"] == "rolled_back" and st.pages["b1"]
    (a,) = wait_until(lambda: list_alerts(alertmanager.url, {"rollout": rid}), what="the page firing")
    assert a["status"]["state"] == "active" and a["labels"]["arm"] == "b1" and a["labels"]["severity"] == "page"
    now[0] += 60_000
    svc.loop_once()  # the agents have not applied control yet: the page stays open
    assert list_alerts(alertmanager.url, {"rollout": rid})
    bus.apply_all()
    now[0] += 60_000
    svc.loop_once()
    wait_until(lambda: not list_alerts(alertmanager.url, {"rollout": rid}), what="the page resolved (endsAt)")
    assert not Store(root / rid).load().pages


def test_every_rollouts_due_breakers_run_before_any_look_and_each_evaluation_is_on_record(tmp_path):
    """A loop evaluates the due breakers of every rollout first: a long look of one rollout (the
    judge under load) never delays another rollout's breaker. Each evaluation is in the audit
    (``breakers_checked``) and its time on /metrics."""
    root = tmp_path / "rollouts"
    bus = MemoryBus()
    calls: list[str] = []
    now = [T0]

    def make_for(rid):
        hosts = {"p1": [f"{rid}-p1-{i:02d}" for i in range(12)], "p2": [f"{rid}-p2-{i:02d}" for i in range(9)]}
        plan = plan_from_dict(base_plan(rollout_id=rid, inventory={"hosts": hosts},  # disjoint hosts
                                        stages=[{"name": "s1", "hosts": 2, "min_duration_minutes": 10},
                                                {"name": "s2", "hosts": 2}],
                                        breakers=[{"metric": "retrans_pct", "ratio": 3, "minutes": 5}]))

        def judge(*_a, **_k):
            calls.append(f"look {rid}")  # (the judge under load: seconds to minutes)
            return []  # no verdict: hold

        def breakers(_s, _e):
            calls.append(f"breakers {rid}")
            return []

        def make(store):
            return Controller(plan, store, bus, load_private_key(KEY), clock=lambda: now[0],
                              analysis=Analysis(breakers=breakers, judge=judge))
        make(Store(root / rid)).start()
        return make

    makers = {rid: make_for(rid) for rid in ("r1", "r2")}
    bus.apply_all()
    svc = Service(root, lambda store: makers[store.dir.name](store), interval_s=1, say=lambda _m: None,
                  clock=lambda: now[0] / 1000)
    svc.loop_once()  # publishes
    bus.apply_all()
    now[0] += 60_000
    svc.loop_once()  # sees the hosts applied: the stage's 10 minutes start
    calls.clear()
    now[0] += 11 * 60_000  # both stages' looks and both rollouts' breakers are due
    assert svc.loop_once() == []
    assert calls[:2] == ["breakers r1", "breakers r2"], calls
    assert "breakers r1" not in calls[2:] and "breakers r2" not in calls[2:], calls
    assert any(c.startswith("look") for c in calls[2:]), calls
    for rid in ("r1", "r2"):
        checked = [e for e in Store(root / rid).read_audit() if e["event"] == "breakers_checked"]
        assert checked and checked[-1]["checked_ms"] == now[0] and checked[-1]["tripped"] == []
    text = svc.metrics_text()
    # (whole digits: 1.76727e+09 would be 1,000 s off)
    assert f'ccab_rollout_breakers_checked_timestamp_seconds{{rollout="r1"}} {now[0] // 1000}' in text
