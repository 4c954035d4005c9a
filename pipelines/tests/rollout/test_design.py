"""The pure design (ccab.rollout.design): stratified randomization, pairing, switchback, blast radius."""

from __future__ import annotations


from ccab.rollout import design
from ccab.rollout.plan import plan_from_dict
from paths import REPO
from factories import base_plan

PLAN = REPO / "rollout" / "plans" / "tyo1-bbr-canary.yaml"




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
