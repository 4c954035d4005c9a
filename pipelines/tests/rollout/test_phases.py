"""The rollout's one transition function (ccab.rollout.phases): a table of phase × observation ->
new phase, effects and outcome. Pure: no bus, no warehouse, no clock."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from ccab.rollout.phases import (Advanced, Applied, ArmDecision, ArmEnded, Breakers, Command, Completed,
                                 ControllerError, Hold, Look, Passed, Paused, Phase, Promoted, Resumed, RolledBack,
                                 decide, transition)
from ccab.rollout.plan import plan_from_dict
from factories import base_plan

TWO_STAGES = plan_from_dict(base_plan())  # s1, s2; arms b1, b2; policy: rollback_arm / halt_arm / hold
ONE_STAGE = plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1}]))
ALL = plan_from_dict(base_plan(policy={"rollback": "rollback_all"}))
TWO_LOOKS = plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1, "looks": 2}, {"name": "s2", "hosts": 2}]))
NO_AUTO_PROMOTE = plan_from_dict(base_plan(stages=[{"name": "s1", "hosts": 1}], policy={"promote_on_pass": False}))


def ph(status="running", stage=0, looks=0, promoted=None, **arms) -> Phase:
    return Phase(status, stage, looks, arms or {"b1": "active", "b2": "active"}, promoted)


def look(**acts) -> Look:
    return Look({a: ArmDecision(act, (f"p1: {act}",)) for a, act in acts.items()}, 1)


CASES = [
    # (name, plan, phase, observation, new phase, effect types, outcome)
    ("both pass, stage 1 of 2: advance", TWO_STAGES, ph(), look(b1="continue", b2="continue"),
     ph(stage=1), [Advanced], "advanced"),
    ("one arm holds: nothing advances", TWO_STAGES, ph(), look(b1="continue", b2="hold"),
     ph(looks=1), [Hold], "hold"),
    ("first of two looks passes: continue", TWO_LOOKS, ph(), look(b1="continue", b2="continue"),
     ph(looks=1), [], "continue"),
    ("second of two looks passes: advance", TWO_LOOKS, ph(looks=1), look(b1="continue", b2="continue"),
     ph(stage=1), [Advanced], "advanced"),
    ("halt one arm, the other passes: halt + advance", TWO_STAGES, ph(), look(b1="halt_arm", b2="continue"),
     ph(stage=1, b1="halted", b2="active"), [ArmEnded, Advanced], "advanced"),
    ("roll back one arm, the other holds", TWO_STAGES, ph(), look(b1="rollback_arm", b2="hold"),
     ph(looks=1, b1="rolled_back", b2="active"), [ArmEnded, Hold], "hold"),
    ("every arm halted: rollout halted", TWO_STAGES, ph(), look(b1="halt_arm", b2="halt_arm"),
     ph("halted", looks=1, b1="halted", b2="halted"), [ArmEnded, ArmEnded], "halted"),
    ("one halted one rolled back: rolled_back", TWO_STAGES, ph(), look(b1="halt_arm", b2="rollback_arm"),
     ph("rolled_back", looks=1, b1="halted", b2="rolled_back"), [ArmEnded, ArmEnded], "rolled_back"),
    ("rollback_all takes the passing arm too", ALL, ph(), look(b1="rollback_all", b2="continue"),
     ph("rolled_back", looks=1, b1="rolled_back", b2="rolled_back"), [ArmEnded, ArmEnded], "rolled_back"),
    ("last stage, one arm passes: promote", ONE_STAGE, ph(b1="active", b2="halted"), look(b1="continue"),
     ph(looks=1, promoted="b1", b1="promoted", b2="halted"), [Promoted], "promoted"),
    ("last stage, two arms pass: passed, promote by hand", ONE_STAGE, ph(), look(b1="continue", b2="continue"),
     ph(looks=1), [Passed], "passed"),
    ("last stage, promote_on_pass off: passed", NO_AUTO_PROMOTE, ph(b1="active", b2="halted"), look(b1="continue"),
     ph(looks=1, b1="active", b2="halted"), [Passed], "passed"),
    # circuit breakers
    ("breaker on one arm: rolled back, rollout runs on", TWO_STAGES, ph(), Breakers(("b1",)),
     ph(b1="rolled_back", b2="active"), [ArmEnded], ""),
    ("breaker on the last active arm: rollout rolled back", TWO_STAGES, ph(b1="active", b2="halted"),
     Breakers(("b1",)), ph("rolled_back", b1="rolled_back", b2="halted"), [ArmEnded], ""),
    ("breaker with rollback_all: every arm", ALL, ph(), Breakers(("b2",)),
     ph("rolled_back", b1="rolled_back", b2="rolled_back"), [ArmEnded], ""),
    ("no trip: nothing", TWO_STAGES, ph(), Breakers(()), ph(), [], ""),
    # every host applied
    ("promoted and applied: completed", ONE_STAGE, ph(promoted="b1", b1="promoted", b2="halted"), Applied(),
     ph("completed", promoted="b1", b1="promoted", b2="halted"), [Completed], "completed"),
    ("applied without a promotion: nothing", ONE_STAGE, ph(), Applied(), ph(), [], ""),
    # operators' commands
    ("halt: pause", TWO_STAGES, ph(), Command("halt", why="x"), ph("paused"), [Paused], ""),
    ("halt an arm", TWO_STAGES, ph(), Command("halt", "b1", "x"), ph(b1="halted", b2="active"), [ArmEnded], ""),
    ("halt the promoted arm of a completed rollout (--force)", ONE_STAGE,
     ph("completed", promoted="b1", b1="promoted", b2="halted"), Command("halt", "b1", "x", True),
     ph("completed", b1="halted", b2="halted"), [ArmEnded], ""),
    ("rollback everything", TWO_STAGES, ph(promoted="b1", b1="promoted", b2="halted"), Command("rollback", why="x"),
     ph("rolled_back", b1="rolled_back", b2="rolled_back"), [RolledBack], ""),
    ("rollback one arm", TWO_STAGES, ph(), Command("rollback", "b2", "x"),
     ph(b1="active", b2="rolled_back"), [RolledBack], ""),
    ("resume a paused rollout", TWO_STAGES, ph("paused"), Command("resume", why="x"), ph(), [Resumed], ""),
    ("resume an arm of a halted rollout", TWO_STAGES, ph("halted", b1="halted", b2="halted"),
     Command("resume", "b1", "x"), ph(b1="active", b2="halted"), [Resumed], ""),
    ("promote by hand: next stage", TWO_STAGES, ph(), Command("promote", why="x"), ph(stage=1), [Advanced],
     "advanced"),
    ("promote an arm by hand", TWO_STAGES, ph("paused"), Command("promote", "b2", "x"),
     ph("paused", promoted="b2", b1="halted", b2="promoted"), [Promoted], "promoted"),
]


@pytest.mark.parametrize("name,plan,phase,obs,want,effects,outcome", CASES, ids=[c[0] for c in CASES])
def test_transition(name, plan, phase, obs, want, effects, outcome):
    arms = dict(phase.arms)
    step = transition(phase, obs, plan)
    assert step.phase == want and phase.arms == arms
    assert [type(e) for e in step.effects] == effects
    assert step.outcome == outcome
    assert transition(phase, obs, plan) == step  # pure: the same answer twice, the input untouched


REFUSED = [
    ("pause a completed rollout", ONE_STAGE, ph("completed", promoted="b1", b1="promoted", b2="halted"),
     Command("halt"), "nothing to pause"),
    ("halt an arm that is not active", TWO_STAGES, ph(b1="halted", b2="active"), Command("halt", "b1"),
     "cannot halt 'b1'"),
    ("roll back an arm the plan lacks", TWO_STAGES, ph(), Command("rollback", "b9"), "no treatment arm 'b9'"),
    ("resume an active arm", TWO_STAGES, ph(), Command("resume", "b1"), "not halted or rolled back"),
    ("resume a running rollout", TWO_STAGES, ph(), Command("resume"), "nothing to resume"),
    ("promote a rolled-back rollout", TWO_STAGES, ph("rolled_back", b1="rolled_back", b2="rolled_back"),
     Command("promote", "b1"), "cannot promote: rollout is rolled_back"),
    ("promote a halted arm", TWO_STAGES, ph(b1="halted", b2="active"), Command("promote", "b1"),
     "cannot promote 'b1'"),
    ("promote without an arm, last stage, two arms", ONE_STAGE, ph(), Command("promote"), "say which arm"),
]


@pytest.mark.parametrize("name,plan,phase,obs,match", REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_commands_change_nothing(name, plan, phase, obs, match):
    with pytest.raises(ControllerError, match=match):
        transition(phase, obs, plan)


def test_arm_ended_says_why():
    step = transition(ph(), look(b1="rollback_arm", b2="continue"), TWO_STAGES)
    assert step.effects[0] == ArmEnded("b1", "rolled_back", "rollback_arm", "p1: rollback_arm")
    step = transition(ph(), look(b1="rollback_all", b2="continue"), ALL)
    assert step.effects[1] == ArmEnded("b2", "rolled_back", "rollback_all", "another arm triggered rollback_all")


@dataclass
class V:
    pop: str
    treatment_arm: str
    decision: str
    reasons: list
    rollout_id: str = "r1"
    control_arm: str = "control"
    alert_ids: tuple = ()
    gates_failed: tuple = ()


def test_decide_takes_the_strictest_pop_and_holds_on_a_missing_one():
    got = decide([V("p1", "b1", "pass", ["fine"]), V("p2", "b1", "rollback", ["worse"]),
                  V("p1", "b2", "pass", ["fine"])], TWO_STAGES, ["b1", "b2"])
    assert got["b1"]["action"] == "rollback_arm"
    assert got["b1"]["reasons"] == ["p1: pass: fine", "p2: rollback: worse"]
    assert got["b2"]["action"] == "hold" and got["b2"]["reasons"][-1] == "no verdict for PoP(s) p2"
    assert decide([], TWO_STAGES, ["b1"])["b1"] == {"action": "hold", "reasons": [
        "no verdict from the judge for this arm"], "alert_ids": [], "decisions": []}
