"""`stages[i].fractions`: the treated share varied across PoPs (issue 18, interference), validated
like every plan field and used by the design the controller assigns from."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml
from ccab.rollout import design
from ccab.rollout.plan import PlanError, plan_as_dict, plan_from_dict, plan_to_yaml
from factories import base_plan

POPS = [f"q{i}" for i in range(6)]


def _plan(stages, seed=11, **over):
    raw = base_plan(pops=POPS, inventory={"hosts": {p: [f"{p}-h{j:02d}" for j in range(20)] for p in POPS}},
                    arms=[{"name": "control", "cc": "cubic"}, {"name": "b2", "cc": "bbr2"}],
                    design={"seed": seed}, stages=stages, limits={"min_control_hosts": 2}, **over)
    return plan_from_dict(raw)


def _treated_share(plan, stage_index):
    arms = design.stage_arms(plan, stage_index)
    out = {}
    for pop in plan.pops:
        hosts = plan.hosts_of(pop)
        out[pop] = sum(arms[h] != plan.control_arm for h in hosts) / len(hosts)
    return out


def test_fractions_spread_over_pops_balanced_seeded_and_nested():
    plan = _plan([{"name": "low", "fractions": [0.1, 0.2, 0.3]}, {"name": "high", "fractions": [0.2, 0.5, 0.3]}])
    low, high = _treated_share(plan, 0), _treated_share(plan, 1)
    assert Counter(low.values()) == {0.1: 2, 0.2: 2, 0.3: 2}   # each value on as many PoPs
    assert Counter(high.values()) == {0.2: 2, 0.3: 2, 0.5: 2}
    for pop in POPS:                                          # a PoP keeps its rank: stages grow, nested
        assert high[pop] >= low[pop]
        treated_low = {h for h, a in design.stage_arms(plan, 0).items() if a != "control" and h.startswith(pop)}
        treated_high = {h for h, a in design.stage_arms(plan, 1).items() if a != "control" and h.startswith(pop)}
        assert treated_low <= treated_high
    again = _plan([{"name": "low", "fractions": [0.3, 0.1, 0.2]}, {"name": "high", "fractions": [0.5, 0.2, 0.3]}])
    assert _treated_share(again, 0) == low                    # the order of the list does not matter
    other = [_treated_share(_plan([{"name": "low", "fractions": [0.1, 0.2, 0.3]}], seed=s), 0) for s in range(12, 20)]
    assert any(o != low for o in other)                       # which PoP gets which share is the seed's draw


def test_fractions_round_trip_and_plans_without_them_keep_their_digest():
    plan = _plan([{"name": "s", "fractions": [0.1, 0.5]}])
    again = plan_from_dict(yaml.safe_load(plan_to_yaml(plan).split("\n", 1)[1]))
    assert again.digest == plan.digest and again.stages[0].fractions == (0.1, 0.5)
    plain = plan_from_dict(base_plan())   # a plan's digest never depends on an option it does not use
    assert all("fractions" not in st for st in plan_as_dict(plain)["stages"])
    assert "fractions" not in plan_to_yaml(plain)


@pytest.mark.parametrize("stage, expected", [
    ({"name": "s", "fractions": [0.2, 0.2]}, "stages[0].fractions: give at least two different fractions"),
    ({"name": "s", "fractions": [0.1, 1.5]}, "stages[0].fractions[1]: must be in (0, 1], got 1.5"),
    ({"name": "s", "fractions": [0.1, "x"]}, "stages[0].fractions[1]: must be a number in (0, 1]"),
    ({"name": "s", "fractions": 0.1}, "stages[0].fractions: must be a list"),
    ({"name": "s", "fractions": [0.1, 0.2], "fraction": 0.1}, "stages[0]: give one of fraction, fractions or hosts"),
    ({"name": "s", "fractions": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]}, "stages[0].fractions: 7 fractions but 6 PoP(s)"),
    ({"name": "s", "fractions": [0.1, 0.95]}, "stages[0].fractions: 19 hosts x 1 treatment arm(s) in"),
])
def test_fractions_errors_name_the_field(stage, expected):
    with pytest.raises(PlanError) as exc:
        _plan([stage])
    assert any(p.startswith(expected) for p in exc.value.problems), exc.value.problems


def test_a_later_stage_may_not_shrink_a_pops_share():
    with pytest.raises(PlanError) as exc:
        _plan([{"name": "a", "fractions": [0.1, 0.5]}, {"name": "b", "fraction": 0.3}])
    assert any("smaller than stages[0]" in p for p in exc.value.problems), exc.value.problems


def test_controller_publishes_each_pops_own_treated_share(tmp_path):
    """The controller's signed assignments follow the per-PoP fractions (fake bus, real signing)."""
    from test_controller import MemoryBus, _ctl

    plan = _plan([{"name": "spread", "fractions": [0.1, 0.3, 0.5]}])
    bus = MemoryBus()
    res = _ctl(tmp_path, plan, bus, [], []).start()
    assert not res.deferred
    published = {r["host"]: (r["pop"], r["arm"]) for r in bus.records}
    assert set(published) == {h for p in POPS for h in plan.hosts_of(p)}
    share = {p: sum(a == "b2" for pop, a in published.values() if pop == p) / 20 for p in POPS}
    assert share == _treated_share(plan, 0) and sorted(share.values()) == [0.1, 0.1, 0.3, 0.3, 0.5, 0.5]
