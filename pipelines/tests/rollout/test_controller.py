"""Signing, durable state and the stage machine of the controller (fake judge and bus)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import Controller, ControllerError
from ccab.rollout.plan import load_plan, plan_from_dict
from ccab.rollout.signing import load_private_key, load_public_key, sign, verify
from ccab.rollout.state import HostAssignment, PublishIntent, RolloutState, StateError, Store
from paths import REPO, VECTORS
from factories import base_plan

PLAN = REPO / "rollout" / "plans" / "tyo1-bbr-canary.yaml"




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
    from ccab.base.contracts import canonical_json
    assert canonical_json(signed) == (VECTORS / "assignment_canonical.txt").read_bytes().rstrip(b"\n")


# ------------------------------------------------------------------------------------ state


def test_state_round_trip_and_audit(tmp_path):
    store = Store(tmp_path / "r")
    st = RolloutState("r", "d" * 64, "p.yaml", arms={"b1": "active"})
    st.hosts["h"] = HostAssignment(pop="p1", arm="b1", cc="bbr", qdisc=None, generation=3, status="pending",
                                   record={"x": 1})
    st.intent = PublishIntent("i1", 5, ["h"])
    store.save(st)
    loaded = store.load()
    assert loaded == st  # typed state survives the JSON file exactly
    (tmp_path / "r" / "state.json").write_text('{"version": 1, "hosts": 3}')
    with pytest.raises(StateError, match="not a rollout state"):
        store.load()
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
        self.sets: list[dict] = []

    def publish(self, records):
        self.records += [dict(r) for r in records]
        return len(records)

    def publish_prefix_set(self, records):
        self.sets += [dict(r) for r in records]
        return len(records)

    def prefix_sets(self):
        return list(self.sets)

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
    return Controller(plan, Store(tmp_path / plan.rollout_id), bus, key,
                      analysis=Analysis(judge=judge, record_action=lambda ids, a: actions.append((ids, a))))


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
    assert ctl.state.arms == {"bbr1": "rolled_back", "bbr2": "promoted"}
    assert actions == [(["al-1"], "rolled_back")]
    moved = {r["host"]: r["arm"] for r in res.published}
    bbr1_hosts = [h for h, v in ctl.state.hosts.items() if v.record["arm"] == "control"]
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
    assert res.look["outcome"] == "hold" and ctl.state.stage == 0
    with pytest.raises(ControllerError, match="reason"):
        ctl.halt(" ", arm="b1")
    res = ctl.halt("operator saw loss", arm="b1", alert_ids=["al-9"])
    assert all(r["arm"] == "control" for r in res.published) and len(res.published) == 2
    assert actions == [(["al-9"], "halted")]
    res = ctl.rollback("done")
    assert ctl.state.status == "rolled_back"
    assert {v.arm for v in ctl.state.hosts.values()} == {"control"}


def test_started_rollout_refuses_a_changed_plan(tmp_path):
    plan = plan_from_dict(base_plan())
    bus = MemoryBus()
    _ctl(tmp_path, plan, bus, [], []).start()
    other = plan_from_dict(base_plan(design={"seed": 99}))
    with pytest.raises(ControllerError, match="plan changed"):
        _ctl(tmp_path, other, bus, [], []).step()


def test_hostile_records_on_the_topic_never_lock_a_host_out_of_rollbacks(tmp_path):
    """A forged record with a huge generation, a null generation and a signed jump beyond the
    agents' ceiling sit on the assignments topic: the controller's next record for that host (a
    rollback) still gets the next generation the agent accepts, and statuses with a null or
    unknown generation change nothing."""
    from ccab.rollout.publish import MAX_GENERATION_JUMP

    plan = load_plan(PLAN)
    bus, actions = MemoryBus(), []
    ctl = _ctl(tmp_path, plan, bus, [], actions)
    ctl.start()
    bus.apply_all()
    host = next(h for h, v in ctl.state.hosts.items() if v.arm != "control")
    gen = ctl.state.hosts[host].generation
    forged = dict(ctl.state.hosts[host].record, generation=2**63 - 1, signature="AAAA")
    too_far = sign(dict(ctl.state.hosts[host].record, generation=gen + MAX_GENERATION_JUMP + 1),
                   load_private_key(VECTORS / "test_ed25519_seed.hex"))
    bus.records += [forged, dict(forged, generation=None), too_far]
    bus.statuses += [{"schema": "agent_status/1", "host": host, "state": "applied", "generation": None,
                      "rollout_id": plan.rollout_id}]
    res = ctl.rollback("operator test: hostile topic")
    mine = [r for r in res.published if r["host"] == host]
    assert [r["generation"] for r in mine] == [gen + 1] and mine[0]["arm"] == plan.control_arm


# ------------------------------------------------------------------------------------ segment plans


def test_segment_plan_publishes_signed_policies_to_treated_hosts_only(tmp_path):
    """A plan with stages[i].segment: treated hosts get assignment/2 (the control's algorithm as the
    host default, the treatment's for the segment's prefixes), control hosts assignment/1; both signed
    (a changed prefix fails verification); the rollback sends assignment/1, which empties the policy."""
    raw = base_plan(stages=[{"name": "s1", "hosts": 1, "segment": "access:mobile"}])
    plan = plan_from_dict(raw)
    assert plan.segment == ("access:mobile",)
    bus, asked = MemoryBus(), []

    def resolve(seg):
        asked.append(seg)
        return ["10.201.0.0/16", "2001:db8:201::/48"]
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")
    ctl = Controller(plan, Store(tmp_path / plan.rollout_id), bus, key,
                     analysis=Analysis(judge=lambda *a: [], segment_prefixes=resolve))
    ctl.start()
    pub = load_public_key(VECTORS / "test_ed25519_public.b64")
    treated = [r for r in bus.records if r["arm"] != "control"]
    control = [r for r in bus.records if r["arm"] == "control"]
    assert treated and control and asked == [("access:mobile",)]  # resolved once
    for r in treated:
        assert r["schema"] == "assignment/2" and r["cc"] == "cubic"  # the host default stays the control's
        assert r["policy"] == {"segment": "access:mobile", "cc": plan.arm(r["arm"]).cc,
                               "prefixes": ["10.201.0.0/16", "2001:db8:201::/48"]}
        assert verify(r, pub) is None
        tampered = {**r, "policy": {**r["policy"], "prefixes": ["0.0.0.0/0"]}}
        assert verify(tampered, pub) == "bad signature"
    assert all(r["schema"] == "assignment/1" and "policy" not in r for r in control)
    bus.records.clear()
    ctl.rollback("test")
    assert bus.records and all(r["schema"] == "assignment/1" and r["arm"] == "control" for r in bus.records)


def test_segment_plan_errors(tmp_path):
    from ccab.rollout.plan import PlanError
    with pytest.raises(PlanError, match=r"stages\[0\].segment: 'access:unknown' is not a segment"):
        plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1, "segment": "access:unknown"}]))
    with pytest.raises(PlanError, match="every stage targets the same segment"):
        plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1, "segment": "access:mobile"},
                                         {"name": "s2", "hosts": 2, "segment": ["access:mobile", "country:JP"]}]))
    plan = plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1, "segment": ["access:mobile", "asn:64500"]}]))
    assert plan.segment == ("access:mobile", "asn:64500")
    assert plan_from_dict(base_plan()).digest == plan_from_dict(base_plan()).digest  # digest unchanged w/o segment
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")
    ctl = Controller(plan, Store(tmp_path / plan.rollout_id), MemoryBus(), key, analysis=Analysis(judge=lambda *a: []))
    with pytest.raises(ControllerError, match="no networks dictionary"):
        ctl.start()


def test_segment_too_large_for_a_record_becomes_a_signed_prefix_set(tmp_path):
    """A segment whose prefixes do not fit the 16 KiB record (2,000 /24s; main refused the rollout:
    "over the agents' 16384-byte limit") is published as a signed prefix_set/1 in chunks, before the
    assignment/3 records that name it by {name, version, sha256}; the chunks assemble to the segment,
    a tampered chunk fails verification; the same content again reuses the version, new content
    gets the next one."""
    from ccab.rollout.publish import wire
    plan = plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1, "segment": "access:mobile"}]))
    key = load_private_key(VECTORS / "test_ed25519_seed.hex")
    pub = load_public_key(VECTORS / "test_ed25519_public.b64")
    many = [f"10.{i // 256}.{i % 256}.0/24" for i in range(2000)]
    bus = MemoryBus()
    order = []
    bus.publish_prefix_set = lambda recs: (order.append("set"), bus.sets.extend(recs), len(recs))[-1]
    publish = bus.publish
    bus.publish = lambda recs: (order.append("assignments"), publish(recs))[-1]
    ctl = Controller(plan, Store(tmp_path / "big"), bus, key,
                     analysis=Analysis(judge=lambda *a: [], segment_prefixes=lambda seg: many))
    ctl.start()
    from ccab.rollout import prefixset
    assert order[0] == "set" and "assignments" in order
    treated = [r for r in bus.records if r["arm"] != "control"]
    assert treated
    sha = prefixset.digest(many)
    for r in treated:
        assert r["schema"] == "assignment/3" and verify(r, pub) is None
        assert r["policy"] == {"segment": "access:mobile", "cc": plan.arm(r["arm"]).cc,
                               "prefix_set": {"name": "access:mobile", "version": 1, "sha256": sha}}
        assert len(wire(r)) <= 16384
    assert len(bus.sets) > 1 and all(len(wire(c)) <= 16384 for c in bus.sets)
    assert prefixset.assemble(bus.sets, "access:mobile", 1, pub) == many
    bad = [dict(c) for c in bus.sets]
    bad[1] = {**bad[1], "prefixes": ["0.0.0.0/0"] + bad[1]["prefixes"][1:]}
    with pytest.raises(prefixset.PrefixSetError, match="bad signature"):
        prefixset.assemble(bad, "access:mobile", 1, pub)
    with pytest.raises(prefixset.PrefixSetError, match="chunks"):
        prefixset.assemble(bus.sets[1:], "access:mobile", 1, pub)
    # a controller (another run, the same sets topic) of the same content reuses version 1; new content is version 2
    def rerun(name, prefixes):
        again = MemoryBus()
        again.sets = bus.sets
        Controller(plan, Store(tmp_path / name / plan.rollout_id), again, key,
                   analysis=Analysis(judge=lambda *a: [], segment_prefixes=lambda seg: prefixes)).start()
        return {r["policy"]["prefix_set"]["version"] for r in again.records if r["arm"] != "control"}
    n = len(bus.sets)
    assert rerun("again", many) == {1} and len(bus.sets) == n
    assert rerun("other", many[:-1]) == {2}
    assert prefixset.assemble(bus.sets, "access:mobile", 2, pub) == many[:-1]
