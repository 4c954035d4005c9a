"""Ownership, terminal states, refusals, unknown alerts, breakers and pages of the controller
(issue 16's unsafe cases; fake judge and in-memory bus: unit tests of the stage machine)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import Controller, ControllerError
from ccab.rollout.leader import LeaderLock
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.signing import load_private_key
from ccab.rollout.state import FencedOut, Store
from factories import base_plan
from paths import VECTORS


class MemoryBus:
    def __init__(self):
        self.records: list[dict] = []
        self.statuses: list[dict] = []

    def publish(self, records):
        self.records += [dict(r) for r in records]
        return len(records)

    def assignments(self):
        return list(self.records)

    def agent_status(self):
        return list(self.statuses)

    def apply_all(self):
        for r in self.records:
            self.statuses.append({"host": r["host"], "pop": r["pop"], "state": "applied",
                                  "generation": r["generation"], "rollout_id": r["rollout_id"], "arm": r["arm"]})


class Pager:
    def __init__(self):
        self.fired: list[dict] = []
        self.resolved: list[dict] = []

    def fire(self, alerts):
        self.fired += alerts

    def resolve(self, alerts):
        self.resolved += alerts


KEY = VECTORS / "test_ed25519_seed.hex"


def _plan(rid="r1", **over):
    raw = base_plan(rollout_id=rid, stages=[{"name": "s1", "hosts": 2}], **over)
    raw.setdefault("breakers", [{"metric": "retrans_pct", "ratio": 3, "minutes": 5}])
    return plan_from_dict(raw)


def _ctl(root, plan, bus, **kw):
    return Controller(plan, Store(root / plan.rollout_id), bus, load_private_key(KEY), **kw)


def _complete(root, bus):
    """Rollout r1 promoted b1 to every host and completed."""
    ctl = _ctl(root, _plan("r1"), bus)
    ctl.start()
    bus.apply_all()
    ctl.promote("review ok", arm="b1")
    for _ in range(20):
        bus.apply_all()
        res = ctl.step(window=(datetime(2025, 1, 1, tzinfo=timezone.utc),) * 2)
        if ctl.state.status == "completed":
            break
    assert ctl.state.status == "completed", res.messages
    return ctl


def test_rollback_and_halt_of_a_completed_rollout_are_refused(tmp_path):
    bus = MemoryBus()
    ctl = _complete(tmp_path, bus)
    before = len(bus.records)
    with pytest.raises(ControllerError, match="terminal"):
        ctl.rollback("pager")
    with pytest.raises(ControllerError, match="terminal"):
        ctl.halt("pager")
    with pytest.raises(ControllerError, match="terminal"):
        ctl.halt("pager", arm="b1")
    assert len(bus.records) == before and ctl.store.load().status == "completed"


def test_second_rollout_over_the_same_hosts_is_refused_naming_hosts_and_owner(tmp_path):
    bus = MemoryBus()
    first = _ctl(tmp_path, _plan("r1"), bus)
    first.start()
    second = _ctl(tmp_path, _plan("tyo1-bbr2-trial"), bus)
    with pytest.raises(ControllerError, match=r"belong to active rollout r1 \(running\)") as e:
        second.start()
    assert "h1-00" in str(e.value)
    assert not second.store.exists()


def test_forced_rollback_of_a_completed_rollout_touches_only_hosts_it_still_owns(tmp_path):
    bus = MemoryBus()
    _complete(tmp_path, bus)
    # another rollout took over the p2 hosts after r1 completed
    other = _ctl(tmp_path, _plan("r2", pops=["p2"], inventory={"hosts": {"p2": [f"h2-{i:02d}" for i in range(9)]}}),
                 bus)
    other.start()
    r1 = _ctl(tmp_path, _plan("r1"), bus)
    n = len(bus.records)
    r1.rollback("pager", force=True)
    moved = {r["host"] for r in bus.records[n:]}
    assert moved and all(h.startswith("h1-") for h in moved)


def test_unknown_alert_ids_are_refused(tmp_path):
    bus = MemoryBus()
    ctl = _ctl(tmp_path, _plan(), bus, analysis=Analysis(known_alerts=lambda ids: {i for i in ids if i == "a" * 20}))
    ctl.start()
    with pytest.raises(ControllerError, match="unknown alert id.*deadbeef"):
        ctl.halt("INC-1", arm="b1", alert_ids=["deadbeef"])
    ctl.halt("INC-1", arm="b1", alert_ids=["a" * 20])
    assert ctl.state.arms["b1"] == "halted"


def test_status_names_refusals_and_their_likely_cause(tmp_path):
    bus = MemoryBus()
    ctl = _ctl(tmp_path, _plan(), bus)
    ctl.start()
    for r in bus.records:
        bus.statuses.append({"host": r["host"], "pop": r["pop"], "state": "refused", "generation": r["generation"],
                             "reason": "signature: ed25519 verification failed"})
    summary = ctl.summary()
    (g,) = summary["refusals"]
    assert g["reason"] == "bad signature" and "public key does not match `--key`" in g["cause"]
    assert len(g["hosts"]) == len(bus.records)


def test_breaker_rolls_the_arm_back_pages_and_resolves_after_the_hosts_are_back(tmp_path):
    bus, pager = MemoryBus(), Pager()
    now = [int(datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc).timestamp() * 1000)]
    trip = {"pop": "p1", "arm": "b1", "control_arm": "control", "ratio": 3.0, "minutes": 5, "max_ratio": 8.55,
            "treatment_pct": 4.2, "control_pct": 0.49, "first_minute": "2026-01-01 12:03:00",
            "last_minute": "2026-01-01 12:07:00", "alert_id": "b" * 20}
    calls = []

    def breakers(start, end):
        calls.append((start, end))
        return [trip] if len(calls) > 1 else []

    ctl = _ctl(tmp_path, _plan(), bus, analysis=Analysis(breakers=breakers), pager=pager, clock=lambda: now[0])
    ctl.start()
    bus.apply_all()
    now[0] += 2 * 60_000
    ctl.tick()
    assert ctl.state.arms["b1"] == "active"
    ctl.tick()  # same minute: breakers not evaluated again
    assert len(calls) == 1
    now[0] += 9 * 60_000
    res = ctl.tick()
    assert ctl.state.arms["b1"] == "rolled_back"
    assert all(ctl.state.hosts[h].arm != "b1" for h in ctl.state.hosts), res.messages
    (page,) = pager.fired
    assert page["labels"]["rollout"] == "r1" and page["labels"]["arm"] == "b1" and page["labels"]["pop"] == "p1"
    assert page["annotations"]["estimate"] == "8.55×" and "8.55×" in page["annotations"]["summary"]
    assert not pager.resolved  # the hosts have not applied control yet
    audit = [e for e in ctl.store.read_audit() if e["event"] == "rollback_arm"]
    assert audit[-1]["trips"][0]["max_ratio"] == 8.55 and audit[-1]["alert_ids"] == ["b" * 20]
    bus.apply_all()
    now[0] += 30_000
    res = ctl.tick()  # the hosts are back, but the page is younger than Alertmanager's group_wait
    assert not pager.resolved and any("stay firing until" in m for m in res.messages), res.messages
    now[0] += 30_000  # 60 s (controller.PAGE_MIN_FIRING_S) after it fired
    ctl.tick()
    assert pager.resolved and pager.resolved[0]["labels"] == page["labels"]
    assert not ctl.store.load().pages


def test_a_stale_leader_is_fenced_out(tmp_path):
    root = tmp_path / "rollouts"
    a = LeaderLock(root)
    tok = a.try_acquire()
    assert tok == 1 and LeaderLock(root).try_acquire() is None
    bus = MemoryBus()
    plan = _plan()
    ctl = Controller(plan, Store(root / plan.rollout_id, fence=tok), bus, load_private_key(KEY))
    ctl.start()
    a.release()  # e.g. the process was paused and lost its lock; a standby took over
    b = LeaderLock(root)
    assert b.try_acquire() == 2
    with pytest.raises(FencedOut):
        ctl.halt("late write", arm="b1")
    assert json.loads((root / "r1" / "state.json").read_text())["arms"]["b1"] == "active"


@pytest.mark.parametrize("content", ['{"token":1e400}', '{"token":-1e400}', '{"token":NaN}', '{"token":1.5}',
                                     '{"token":-3}', '{"token":true}', '{"token":"7"}', '{"token":9007199254740992}',
                                     '{}', '[1]', 'garbage', ''])
def test_a_bad_leader_file_is_refused_with_one_line(tmp_path, content, monkeypatch, capsys):
    """Issue 29: `leader.json` with `{"token": 1e400}` crashed `ccab controller run` (OverflowError);
    other bad tokens were silently taken as 0 and overwritten (a fencing token going backwards
    fences the newest state out). A token is a whole number in [0, 2^53-1]: anything else is
    refused, naming the file, and the lock is not kept."""
    from ccab import cli
    from ccab.rollout.state import StateError

    root = tmp_path / "rollouts"
    root.mkdir()
    (root / "leader.json").write_text(content)
    with pytest.raises(StateError, match=r"leader\.json.*fencing token"):
        LeaderLock(root).try_acquire()
    fresh = LeaderLock(root)  # the failed attempt released the lock: this one gets as far as the file
    with pytest.raises(StateError):
        fresh.try_acquire()
    assert (root / "leader.json").read_text() == content  # never overwritten
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CCAB_ROLLOUT_KEY", str(KEY))
    assert cli.main(["controller", "run", "--once", "--metrics-addr", ""]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "leader.json" in err and "Traceback" not in err, err
