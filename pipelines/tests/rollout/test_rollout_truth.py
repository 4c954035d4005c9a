"""Rollout truth in one place (issue 28): the next generation after a refused record, and operators'
actions while the controller service holds a rollout during a Kafka outage.

The stage machine with the topics in memory and agents that follow the contract's generation rule
(contracts/CONTRACTS.md, assignment/1; the Go agent's ``assignment.CheckGeneration``); the same
cases against a real broker are in test_rollout_ownership.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from ccab.rollout.controller import Controller
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.publish import MAX_GENERATION, MAX_GENERATION_JUMP, valid_generation
from ccab.rollout.signing import load_private_key, sign, verify
from ccab.rollout.state import Store
from factories import base_plan
from paths import VECTORS

KEY = load_private_key(VECTORS / "test_ed25519_seed.hex")


class ContractAgents:
    """Both topics in memory, and one agent per host applying the assignments topic in order as
    the contract says: signature checked; a generation outside [0, 2^53-1] is malformed; one not
    above the applied one is stale (ignored, no answer); one more than 1,000,000 above it is
    refused ("generation too far ahead") and leaves the applied generation where it was."""

    def __init__(self):
        self.records: list[dict] = []
        self.statuses: list[dict] = []
        self.applied: dict[str, int] = {}
        self.read = 0

    def publish(self, records):
        self.records += [dict(r) for r in records]
        return len(records)

    def assignments(self):
        return list(self.records)

    def agent_status(self):
        return list(self.statuses)

    def run(self) -> None:
        for r in self.records[self.read:]:
            h, gen = r["host"], r["generation"]
            answer = {"schema": "agent_status/1", "host": h, "pop": r["pop"], "rollout_id": r["rollout_id"],
                      "arm": r["arm"], "generation": gen}
            if not valid_generation(gen):
                self.statuses.append({**answer, "state": "refused", "reason": "malformed: generation out of range"})
            elif verify(r, KEY.public_key()) is not None:
                self.statuses.append({**answer, "state": "refused", "reason": "bad signature"})
            elif gen <= self.applied.get(h, 0):
                continue
            elif gen - self.applied.get(h, 0) > MAX_GENERATION_JUMP:
                self.statuses.append({**answer, "state": "refused", "reason": "generation too far ahead"})
            else:
                self.applied[h] = gen
                self.statuses.append({**answer, "state": "applied"})
        self.read = len(self.records)


def _plan(rid: str, stages=({"name": "s1", "hosts": 2},)):
    return plan_from_dict(base_plan(rollout_id=rid, stages=list(stages)))


def _ctl(root, rid, bus, **plan):
    return Controller(_plan(rid, **plan), Store(root / "rollouts" / rid), bus, KEY)


TWO_STAGES = dict(stages=({"name": "s1", "hosts": 1}, {"name": "s2", "fraction": 0.3}))


def test_a_refused_hostile_generation_never_freezes_a_host_for_later_rollouts(tmp_path):
    bus = ContractAgents()
    first = _ctl(tmp_path, "r1", bus, **TWO_STAGES)
    first.start()
    bus.run()
    first.rollback("done with r1")
    bus.run()
    assert first.st.status == "rolled_back"
    victim = "h1-00"
    before = bus.applied[victim]
    # a hostile record, validly signed, with the highest generation there is: the agent refuses it
    hostile = sign({"schema": "assignment/1", "rollout_id": "evil", "generation": MAX_GENERATION, "pop": "p1",
                    "host": victim, "arm": "b1", "cc": "bbr", "qdisc": None, "issued_at_ms": 1}, KEY)
    bus.publish([hostile])
    bus.run()
    assert bus.applied[victim] == before and bus.statuses[-1]["state"] == "refused"

    # every later rollout's record for that host still applies (it used to get 2^53: malformed)
    second = _ctl(tmp_path, "r2", bus)
    second.start()
    bus.run()
    mine = [r for r in bus.records if r["rollout_id"] == "r2"]
    assert all(r["generation"] <= min(MAX_GENERATION, bus.applied.get(r["host"], 0) + MAX_GENERATION_JUMP)
               for r in mine)
    ok, n, _ = second._applied()
    assert (ok, n) == (len(mine), len(mine)), [s for s in bus.statuses if s["state"] != "applied"]
    assert second.st.hosts[victim].generation == before + 1
    # and a rollback of the second rollout reaches it too
    second.rollback("pager")
    bus.run()
    assert bus.applied[victim] == second.st.hosts[victim].generation


@pytest.mark.parametrize("own,on_topic,applied,expected", [
    (4, 0, 4, 5),
    (4, 9, 4, 10),                                        # another controller's record the agent will apply
    (0, 0, 7, 8),                                         # a new rollout on a host that ran an older one
    (0, MAX_GENERATION, None, MAX_GENERATION),            # never beyond 2^53-1
    (5_000_000, 0, 3, 3 + MAX_GENERATION_JUMP),           # never more than the jump the agent accepts
])
def test_next_generation_stays_within_what_an_agent_applies(own, on_topic, applied, expected):
    from ccab.rollout.publish import next_generation

    assert next_generation(own, on_topic, applied) == expected


# ------------------------------------------------------------------------- controller run --once

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ccab(env: dict, *args: str):
    import subprocess
    import sys

    from paths import REPO

    return subprocess.run([sys.executable, "-m", "ccab.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def cli_env(tmp_path):
    import os

    env = dict(os.environ, CCAB_DATA_DIR=str(tmp_path), CCAB_ROLLOUT_KEY=str(VECTORS / "test_ed25519_seed.hex"),
               CCAB_KAFKA_BROKERS=f"127.0.0.1:{_free_port()}",  # nothing listens there: Kafka is down
               CCAB_WAREHOUSE_WAIT_S="0")  # no warehouse either: the alerts' bookkeeping fails at once
    env.pop("CCAB_CLICKHOUSE_URL", None)
    env.pop("CCAB_ALERT_WEBHOOK_URL", None)
    return env


def test_controller_run_once_exits_non_zero_when_kafka_is_down(tmp_path, cli_env):
    _ctl(tmp_path, "r1", ContractAgents()).start()  # an active rollout the loop must drive
    p = _ccab(cli_env, "controller", "run", "--once", "--metrics-addr", "", "--kafka-timeout", "2")
    assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert p.stderr.strip().splitlines()[-1].startswith(
        "ccab controller: the loop failed: r1: tick failed: KafkaUnavailable: cannot reach Kafka"), p.stderr


def test_controller_run_once_exits_non_zero_when_another_controller_leads(tmp_path, cli_env):
    from ccab.rollout.leader import LeaderLock

    other = LeaderLock(tmp_path / "rollouts")
    assert other.try_acquire() == 1
    try:
        p = _ccab(cli_env, "controller", "run", "--once", "--metrics-addr", "")
    finally:
        other.release()
    assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "not the leader: another controller holds" in p.stderr and "fencing token 1" in p.stderr
    # with the leadership free and nothing to do, one loop is a success
    assert _ccab(cli_env, "controller", "run", "--once", "--metrics-addr", "").returncode == 0


# ------------------------------------------------------- halt/rollback while the service holds it

def test_a_rollback_while_the_service_holds_the_rollout_is_recorded_and_applied_at_its_next_tick(tmp_path, cli_env):
    from ccab.rollout.service import Service

    bus = ContractAgents()
    _ctl(tmp_path, "r1", bus).start()
    bus.run()
    store = Store(tmp_path / "rollouts" / "r1")
    with store.locked():  # the service is in a tick on r1 (e.g. waiting for a broker that is down)
        p = _ccab(cli_env, "rollout", "rollback", "r1", "--reason", "INC-4 pager", "--lock-wait", "0.5",
                  "--kafka-timeout", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "another controller holds" not in p.stdout + p.stderr
    assert "rollback of r1 recorded as request" in p.stdout and "when Kafka is back" in p.stdout, p.stdout
    assert store.load().status == "running" and len(store.requests()) == 1

    svc = Service(tmp_path / "rollouts", lambda s: Controller(_plan("r1"), s, bus, KEY), interval_s=1,
                  say=lambda _m: None)
    assert svc.loop_once() == []
    st = store.load()
    assert st.status == "rolled_back" and not store.requests()
    bus.run()
    assert all(bus.applied[h] == v.generation and v.arm == "control" for h, v in st.hosts.items())
    applied = [e for e in store.read_audit() if e["event"] == "request_applied"]
    assert len(applied) == 1 and applied[0]["actor"] == "operator"
    assert svc.loop_once() == [] and len([e for e in store.read_audit() if e["event"] == "rollback"]) == 1


def test_a_rollback_with_kafka_down_is_recorded_and_published_by_the_next_tick(tmp_path, cli_env):
    """The lock is free but the broker is down: the rollback is saved, said to wait for Kafka; the
    service's next tick (the rollout is terminal but owes its agents the change) publishes it."""
    from ccab.rollout.service import Service

    bus = ContractAgents()
    _ctl(tmp_path, "r1", bus).start()
    bus.run()
    p = _ccab(cli_env, "rollout", "rollback", "r1", "--reason", "INC-5", "--kafka-timeout", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not yet published: Kafka is down" in p.stdout and "when Kafka is back" in p.stdout, p.stdout
    store = Store(tmp_path / "rollouts" / "r1")
    st = store.load()
    assert st.status == "rolled_back" and any(v.arm != "control" for v in st.hosts.values())
    svc = Service(tmp_path / "rollouts", lambda s: Controller(_plan("r1"), s, bus, KEY), interval_s=1,
                  say=lambda _m: None)
    assert svc.loop_once() == []  # Kafka (the in-memory bus) is back
    bus.run()
    st = store.load()
    assert all(v.arm == "control" and bus.applied[h] == v.generation for h, v in st.hosts.items())


def test_a_rollout_id_started_afresh_is_not_taken_for_a_stale_state(tmp_path):
    """scripts/demo-rollout.sh removes the rollout's directory and starts it again: the previous
    run's records on the topic (a later stage, higher generations) are not this run's."""
    import shutil

    bus = ContractAgents()
    first = _ctl(tmp_path, "r1", bus, **TWO_STAGES)
    first.start()
    bus.run()
    first.promote("next stage")
    for _ in range(3):
        bus.run()
        first.step()
    assert first.st.stage == 1
    shutil.rmtree(tmp_path / "rollouts" / "r1")
    again = _ctl(tmp_path, "r1", bus, **TWO_STAGES)
    again.clock = lambda: first.st.started_ms + 1000  # another start
    again.start()
    bus.run()
    again.step()  # not refused
    assert again.st.stage == 0 and all(bus.applied[h] == v.generation for h, v in again.st.hosts.items())


def test_a_state_file_put_back_is_refused_and_a_rollback_adopts_the_topic(tmp_path):
    from ccab.rollout.controller import ControllerError

    bus = ContractAgents()
    ctl = _ctl(tmp_path, "r1", bus, **TWO_STAGES)
    ctl.start()
    bus.run()
    backup = ctl.store.state_file.read_bytes()
    ctl.promote("next stage")
    for _ in range(3):
        bus.run()
        ctl.step()
    treated = {h for h, v in ctl.st.hosts.items() if v.arm != "control"}
    ctl.store.state_file.write_bytes(backup)
    stale = _ctl(tmp_path, "r1", bus, **TWO_STAGES)
    with pytest.raises(ControllerError, match=r"older than .* shows for it: stage 1 on the topic vs 0 here"):
        stale.step()
    stale.rollback("INC-3")
    bus.run()
    assert treated and all(bus.applied[h] == stale.st.hosts[h].generation and stale.st.hosts[h].arm == "control"
                           for h in treated)


def test_a_promote_signed_with_the_wrong_key_is_re_signed_by_the_next_step_with_the_key_given(tmp_path):
    """Issue 29: `ccab rollout promote` run with the wrong --key publishes records every agent refuses
    ("bad signature"); the next `ccab rollout step --key RIGHT` re-signs those hosts' assignments
    with the key it was given (a new generation, the same arm), instead of waiting forever or
    leaving a rollback as the only way out. A step with a wrong key never re-signs records the
    agents applied."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    bus, wrong = ContractAgents(), Ed25519PrivateKey.generate()
    plan = _plan("r1")
    root = tmp_path / "rollouts" / "r1"
    Controller(plan, Store(root), bus, KEY).start()
    bus.run()
    promoted = Controller(plan, Store(root), bus, wrong).promote("go", arm="b1")
    bus.run()
    moved = {r["host"] for r in promoted.published}
    arm_of = {r["host"]: r["arm"] for r in promoted.published}
    assert moved and {s["host"] for s in bus.statuses if s.get("reason") == "bad signature"} == moved

    wrong_step = Controller(plan, Store(root), bus, wrong).step()  # the same mistake again: nothing re-signed
    assert not wrong_step.published
    res = Controller(plan, Store(root), bus, KEY).step()
    assert {r["host"] for r in res.published} == moved
    assert all(verify(r, KEY.public_key()) is None and r["arm"] == arm_of[r["host"]] for r in res.published)
    bus.run()
    ctl = Controller(plan, Store(root), bus, KEY)
    assert all(bus.applied[h] == ctl.st.hosts[h].generation for h in moved)
    assert any(e["event"] == "re_signed" for e in ctl.store.read_audit())
    for _ in range(10):  # the rest of the promotion, batch by batch within the blast radius
        ctl.step()
        bus.run()
    assert ctl.st.status == "completed"


def test_a_look_never_records_an_empty_reason(tmp_path):
    """Issue 29: a look recorded with an empty reason. Every treatment arm halted by hand leaves
    nothing to judge: the look said `stage s1 look 1/1 on A..B: ` and the rollout became halted
    without a word. A verdict whose reason is blank is recorded as its PoP and decision."""
    from datetime import datetime, timezone

    from ccab.rollout.analysis import Analysis

    @dataclass
    class V:
        pop: str
        treatment_arm: str
        decision: str = "continue"
        reasons: tuple = ("",)
        rollout_id: str = "r1"
        control_arm: str = "control"
        alert_ids: tuple = ()
        gates_failed: tuple = ()

    bus = ContractAgents()
    plan = _plan("r1", stages=({"name": "s1", "hosts": 2, "looks": 2},))
    root = tmp_path / "rollouts" / "r1"
    window = (datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 1, 2, tzinfo=timezone.utc))

    def ctl():
        return Controller(plan, Store(root), bus, KEY, analysis=Analysis(
            judge=lambda *a: [V(p, arm) for p in plan.pops for arm in plan.treatment_arms]))

    ctl().start()
    bus.run()
    for _ in range(10):  # the stage's hosts, batch by batch within the blast radius, then its first look
        look = ctl().step(window=window).look
        bus.run()
        if look:
            break
    assert look["outcome"] == "continue"
    assert all(r.strip() and not r.rstrip().endswith(":") for d in look["per_arm"].values() for r in d["reasons"])
    for arm in plan.treatment_arms:
        ctl().halt("INC-1", arm=arm)
        bus.run()
    c = ctl()
    assert c.step(window=window).look["outcome"] == "halted"
    looks = [e for e in c.store.read_audit() if e["event"] == "look"]
    assert all(not e["reason"].rstrip().endswith(":") for e in looks), [e["reason"] for e in looks]
    assert "no active treatment arm" in looks[-1]["reason"] and "halted" in looks[-1]["reason"]


def test_a_rollback_with_the_warehouse_down_is_published_first_and_never_waits_its_full_wait(tmp_path, cli_env,
                                                                                                 monkeypatch, capsys):
    """An operator in an incident: the warehouse service is down (CCAB_WAREHOUSE_WAIT_S 20 s, the
    default) and Kafka too. The rollback is recorded and its publication attempted before any
    alert bookkeeping, which asks the warehouse with the short manual wait only (each wait the
    CLI would have waited is counted here, none is slept), and says in one line that the alerts
    were not updated. Real CLI (in this process), real state; the warehouse waits are observed."""
    import ccab.base.warehouse as warehouse
    from ccab.cli import main
    from ccab.cli.rollout import MANUAL_BOOKKEEPING_WAIT_S

    bus = ContractAgents()
    _ctl(tmp_path, "r1", bus).start()
    bus.run()
    for k, v in {**cli_env, "CCAB_WAREHOUSE_WAIT_S": "20"}.items():
        monkeypatch.setenv(k, v)
    waits: list[tuple[str, float]] = []  # (the rollout's status when the warehouse was asked, the wait)
    store = Store(tmp_path / "rollouts" / "r1")

    def down(_open, wait_s, say=None, **_kw):  # the service does not answer: the wait runs out
        waits.append((store.load().status, wait_s))
        raise warehouse.WarehouseUnavailable(warehouse.LOCAL_DOWN)

    monkeypatch.setattr(warehouse, "wait_local", down)
    rc = main(["rollout", "rollback", "r1", "--reason", "INC-6", "--alert", "a-1", "--kafka-timeout", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert waits and max(w for _, w in waits) <= MANUAL_BOOKKEEPING_WAIT_S < 20, waits
    # the alert id check before it (status still running), then the bookkeeping after it is recorded
    assert waits[0][0] == "running" and [s for s, _ in waits[1:]] == ["rolled_back"] * (len(waits) - 1) != [], waits
    assert "not yet published: Kafka is down" in out, out
    assert "alerts not updated" in out and "the warehouse does not answer" in out, out
    assert "alert id(s) a-1 not checked" in out, out
    assert store.load().status == "rolled_back"
