"""Rollout controller, pure parts: plan validation, design, signing, state; the stage machine with
a fake judge and an in-memory bus (the Kafka and real-judge paths: test_rollout_kafka.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from ccab.rollout import design
from ccab.rollout.controller import Controller, ControllerError
from ccab.rollout.plan import PlanError, load_plan, plan_from_dict, plan_to_yaml
from ccab.rollout.signing import load_private_key, load_public_key, sign, verify
from ccab.rollout.state import Store

from paths import REPO, VECTORS
PLAN = REPO / "rollout" / "plans" / "tyo1-bbr-canary.yaml"


def base_plan(**over) -> dict:
    raw = {
        "rollout_id": "r1",
        "pops": ["p1", "p2"],
        "inventory": {"hosts": {"p1": [f"h1-{i:02d}" for i in range(12)], "p2": [f"h2-{i:02d}" for i in range(9)]}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "b1", "cc": "bbr"}, {"name": "b2", "cc": "bbr2"}],
        "control_arm": "control",
        "design": {"seed": 7},
        "stages": [{"name": "s1", "hosts": 1}, {"name": "s2", "fraction": 0.3}],
        "limits": {"max_hosts_per_pop_per_step": 3, "min_control_hosts": 2},
        "guardrails": [{"metric": "retrans_pct", "statistic": "ratio", "margin": 2.5}],
    }
    raw.update(over)
    return raw


# ------------------------------------------------------------------------------------ plan


def test_example_plan_loads_and_round_trips():
    plan = load_plan(PLAN)
    assert plan.treatment_arms == ("bbr1", "bbr2")
    assert len(plan.hosts_of("tyo1")) == 21
    again = plan_from_dict(yaml.safe_load(plan_to_yaml(plan)))
    assert again.digest == plan.digest


@pytest.mark.parametrize("change, expected", [
    ({"stages": [{"name": "a", "fraction": 0.2}, {"name": "b", "fraction": 1.5}]}, "stages[1].fraction: must be in (0, 1]"),
    ({"arms": [{"name": "control", "cc": "cubic"}, {"name": "b1", "cc": "bbrv2"}]}, "arms[1].cc: unknown congestion control 'bbrv2'"),
    ({"control_arm": "ctl"}, "control_arm: 'ctl' is not an arm"),
    ({"guardrails": [{"metric": "retrans_pct", "statistic": "p42", "margin": 1}]}, "guardrails[0].statistic: unknown statistic 'p42'"),
    ({"guardrails": [{"metric": "loss", "statistic": "p50", "margin": 1}]}, "guardrails[0].metric: unknown value 'loss'"),
    ({"guardrails": [{"metric": "rtt_us", "statistic": "p50", "margin": -1}]}, "guardrails[0].margin: must be in (0"),
    ({"stages": [{"name": "a", "hosts": 5}]}, "stages[0].hosts: 5 hosts x 2 treatment arm(s) in p2 leaves fewer than"),
    ({"design": {}}, "design.seed: required"),
    ({"limits": {"max_hosts_per_pop_per_step": 0}}, "limits.max_hosts_per_pop_per_step: must be in [1"),
    ({"stages": [{"name": "a"}]}, "stages[0].fraction: required"),
    ({"bogus": 1}, "bogus: unknown field"),
    ({"inventory": {"hosts": {"p9": ["x"]}}}, "inventory.hosts.p9[0]: PoP 'p9' is not in pops"),
])
def test_plan_errors_name_the_field(change, expected):
    with pytest.raises(PlanError) as exc:
        plan_from_dict(base_plan(**change))
    assert any(p.startswith(expected) for p in exc.value.problems), exc.value.problems


def test_all_problems_reported_at_once():
    raw = base_plan(control_arm="x", stages=[{"name": "a", "fraction": 2}])
    raw["arms"][1]["cc"] = "nope"
    with pytest.raises(PlanError) as exc:
        plan_from_dict(raw)
    assert len(exc.value.problems) >= 3


def test_malformed_yaml_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("rollout_id: x\narms: [\n")
    with pytest.raises(PlanError, match="not valid YAML: line"):
        load_plan(f)


# ------------------------------------------------------------------------------------ design


def test_randomization_is_deterministic_and_stratified():
    plan = plan_from_dict(base_plan())
    a, b = design.randomize(plan), design.randomize(plan_from_dict(base_plan()))
    assert a == b
    other = design.randomize(plan_from_dict(base_plan(design={"seed": 8})))
    assert other != a
    arms = design.stage_arms(plan, 1)  # 0.3 x 12 = 4 per arm in p1, 0.3 x 9 = 3 in p2
    for pop, n in (("p1", 4), ("p2", 3)):
        got = [arms[h] for h in plan.hosts_of(pop)]
        assert got.count("b1") == n and got.count("b2") == n
    # nested stages: a host treated at stage 0 keeps its arm at stage 1
    s0 = design.stage_arms(plan, 0)
    assert all(arms[h] == a0 for h, a0 in s0.items() if a0 != "control")


def test_pairing_blocks_have_one_host_per_arm():
    plan = plan_from_dict(base_plan(design={"seed": 3, "pairing": True}))
    slots = design.randomize(plan)["p1"]
    hosts = plan.hosts_of("p1")
    for i in range(0, 12, 3):
        block = [slots[h] for h in hosts[i:i + 3]]
        assert sorted(str(s.arm) for s in block) == ["None", "b1", "b2"]
        assert len({s.slot for s in block}) == 1


def test_switchback_schedule_alternates_and_is_reproducible():
    plan = plan_from_dict(base_plan(design={"seed": 1, "switchback": {"period_minutes": 60, "periods": 6,
                                                                      "arms": ["control", "b2"]}}))
    s = design.switchback_schedule(plan, "p1", 0)
    assert s == design.switchback_schedule(plan, "p1", 0)
    assert len(s) == 6 and all(sorted(x[2] for x in s[i:i + 2]) == ["b2", "control"] for i in (0, 2, 4))
    arms = design.switchback_arms(plan, 0, s[1][0] + 1)
    assert {arms[h] for h in plan.hosts_of("p1")} == {s[1][2]}


def test_blast_radius_caps_moves_away_from_control_only():
    plan = plan_from_dict(base_plan(limits={"max_hosts_per_pop_per_step": 3, "min_control_hosts": 2}))
    target = design.stage_arms(plan, 1)
    now, deferred = design.plan_changes(plan, {}, target)
    for pop in plan.pops:
        away = [c for c in now if c.pop == pop and c.after != "control"]
        assert len(away) == 3
    assert {c.host for c in deferred}.isdisjoint({c.host for c in now})
    # going back to control is never deferred
    current = {h: "b1" for h in plan.hosts_of("p1")}
    back, later = design.plan_changes(plan, current, {h: "control" for h in plan.hosts_of("p1")})
    assert len(back) == 12 and not later
    frac = plan_from_dict(base_plan(limits={"max_fraction_per_pop_per_step": 0.2, "min_control_hosts": 2}))
    assert design.step_cap(frac, "p1") == 2 and design.step_cap(frac, "p2") == 1


# ------------------------------------------------------------------------------------ signing


def test_signing_reproduces_the_vector():
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")
    signed = json.loads((VECTORS / "assignment_signed.json").read_text())
    again = sign(signed, key)
    assert again["signature"] == signed["signature"]
    pub = load_public_key(VECTORS / "test_ed25519_public.b64")
    assert verify(signed, pub) is None
    tampered = json.loads((VECTORS / "assignment_tampered.json").read_text())
    assert verify(tampered, pub) == "bad signature"
    from ccab.contracts import canonical_json
    assert canonical_json(signed) == (VECTORS / "assignment_canonical.txt").read_bytes().rstrip(b"\n")


# ------------------------------------------------------------------------------------ state


def test_state_round_trip_and_audit(tmp_path):
    store = Store(tmp_path / "r")
    from ccab.rollout.state import new_state

    st = new_state("r", "d" * 64, "p.yaml")
    st["hosts"]["h"] = {"arm": "b1", "generation": 3, "status": "pending", "record": {"x": 1}}
    store.save(st)
    loaded = store.load()
    assert loaded["hosts"] == st["hosts"] and loaded["plan_digest"] == st["plan_digest"]
    store.audit("a", "first")
    with open(store.audit_file, "a") as f:
        f.write('{"torn": ')  # a crash mid-line
    store.audit("b", "second")
    events = [e["event"] for e in store.read_audit()]
    assert events == ["a", "b"]
    assert not list(tmp_path.glob("r/.*tmp"))


# ------------------------------------------------------------------------------------ stage machine


@dataclass
class FakeVerdict:
    pop: str
    treatment_arm: str
    decision: str
    rollout_id: str = "r1"
    control_arm: str = "control"
    reasons: list = field(default_factory=list)
    alert_ids: list = field(default_factory=list)
    gates_failed: list = field(default_factory=list)


class MemoryBus:
    """In-memory stand-in for the topics (unit tests of the stage machine only)."""

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
            self.statuses.append({"schema": "agent_status/1", "host": r["host"], "pop": r["pop"], "state": "applied",
                                  "generation": r["generation"], "rollout_id": r["rollout_id"], "arm": r["arm"]})


def _ctl(tmp_path, plan, bus, verdicts, actions):
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")

    def judge(start, end, look, planned):
        return verdicts.pop(0) if verdicts else []
    return Controller(plan, Store(tmp_path / plan.rollout_id), bus, key, judge=judge,
                      set_action=lambda ids, a: actions.append((ids, a)))


W = (datetime(2025, 11, 20, 0, tzinfo=timezone.utc), datetime(2025, 11, 20, 3, tzinfo=timezone.utc))


def test_stage_machine_halts_breaching_arm_and_promotes_passing(tmp_path):
    plan = load_plan(PLAN)
    bus, actions = MemoryBus(), []
    verdicts = [[FakeVerdict("tyo1", "bbr1", "rollback", "tyo1-bbr-canary", reasons=["retrans_pct ratio +380%"],
                             alert_ids=["al-1"]),
                 FakeVerdict("tyo1", "bbr2", "pass", "tyo1-bbr-canary")]]
    ctl = _ctl(tmp_path, plan, bus, verdicts, actions)
    res = ctl.start()
    assert res.deferred == 6 and len(res.published) == 15
    # not applied yet: nothing more leaves control, no look
    res = ctl.step(window=W)
    assert not res.published and res.look is None
    bus.apply_all()
    res = ctl.step(window=W)
    assert len(res.published) == 6 and res.look is None  # the rest of the stage first
    bus.apply_all()
    res = ctl.step(window=W)
    assert res.look["outcome"] == "promoted"
    assert ctl.state["arms"] == {"bbr1": "rolled_back", "bbr2": "promoted"}
    assert actions == [(["al-1"], "rolled_back")]
    moved = {r["host"]: r["arm"] for r in res.published}
    bbr1_hosts = [h for h, v in ctl.state["hosts"].items() if v["record"]["arm"] == "control"]
    assert all(moved.get(h, "control") != "bbr1" for h in moved)
    # every bbr1 host went back to control in this same look
    assert sum(1 for a in moved.values() if a == "control") == 7
    assert len(bbr1_hosts) >= 7
    events = [e["event"] for e in ctl.store.read_audit()]
    assert "look" in events and "rollback_arm" in events and "promote" in events
    # generations strictly increase per host, one record per (host, generation)
    seen = set()
    for r in bus.records:
        assert (r["host"], r["generation"]) not in seen
        seen.add((r["host"], r["generation"]))


def test_no_decision_holds_and_manual_actions_need_a_reason(tmp_path):
    plan = plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1, "min_duration_minutes": 60}]))
    bus, actions = MemoryBus(), []
    ctl = _ctl(tmp_path, plan, bus, [[FakeVerdict(p, a, "no_decision") for p in plan.pops for a in ("b1", "b2")]],
               actions)
    ctl.start()
    bus.apply_all()
    res = ctl.step(window=W)
    assert res.look["outcome"] == "hold" and ctl.state["stage"] == 0
    with pytest.raises(ControllerError, match="reason"):
        ctl.halt(" ", arm="b1")
    res = ctl.halt("operator saw loss", arm="b1", alert_ids=["al-9"])
    assert all(r["arm"] == "control" for r in res.published) and len(res.published) == 2
    assert actions == [(["al-9"], "halted")]
    res = ctl.rollback("done")
    assert ctl.state["status"] == "rolled_back"
    assert {v["arm"] for v in ctl.state["hosts"].values()} == {"control"}


def test_started_rollout_refuses_a_changed_plan(tmp_path):
    plan = plan_from_dict(base_plan())
    bus = MemoryBus()
    _ctl(tmp_path, plan, bus, [], []).start()
    other = plan_from_dict(base_plan(design={"seed": 99}))
    with pytest.raises(ControllerError, match="plan changed"):
        _ctl(tmp_path, other, bus, [], []).step()
