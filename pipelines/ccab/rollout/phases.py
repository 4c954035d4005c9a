"""A rollout's phases and its one transition function (pure: no I/O, no clock).

The shape of Argo Rollouts' reconcile loop: the controller observes (a look's verdicts, the
circuit breakers' trips, every host applied, an operator's command), and

    transition(phase, observation, plan) -> Step(phase', effects, outcome)

decides what the rollout and its arms become. This is the ONE place a rollout's ``status``, an
arm's state, the stage and the promoted arm are assigned; the controller (controller.py) writes the
new phase to the state file and carries out the effects at its edges (audit log, Kafka publish,
alerts' actions in the warehouse, pages). A command that is not allowed in a phase raises
:class:`ControllerError` and changes nothing.

Phases (``status``): ``running`` (stages advance by looks) → ``completed`` (an arm promoted and
applied everywhere); ``paused`` (by hand: hosts keep their arm, nothing advances); ``halted`` /
``rolled_back`` (every host back to control). Arms: ``active`` → ``promoted`` | ``halted`` |
``rolled_back`` (and back to ``active`` by ``resume``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Mapping, Union

from ccab.rollout.plan import Plan
from ccab.rollout.state import TERMINAL
ACTION_RANK = {"continue": 0, "hold": 1, "halt_arm": 2, "rollback_arm": 3, "rollback_all": 4}
BAD_ARM = ("halted", "rolled_back")


class ControllerError(RuntimeError):
    """An operation was refused or could not be done; the state is unchanged (or consistent)."""


@dataclass(frozen=True)
class Phase:
    """What the transition decides: the rollout's status, its stage and looks, its arms' states."""

    status: str
    stage: int
    looks_done: int
    arms: Mapping[str, str]
    promoted: str | None = None

    def active(self) -> list[str]:
        return [a for a, s in self.arms.items() if s == "active"]


# ---------------------------------------------------------------------------------- observations
@dataclass(frozen=True)
class ArmDecision:
    """What a look decided for one arm: an action of ACTION_RANK and the judge's reasons."""

    action: str
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Look:
    """A look's decisions (:func:`decide`) for the arms that were active."""

    per_arm: Mapping[str, ArmDecision]
    look_no: int


@dataclass(frozen=True)
class Breakers:
    """The active arms whose circuit breaker tripped, in the order they were checked."""

    arms: tuple[str, ...]


@dataclass(frozen=True)
class Applied:
    """Every host of a promoted rollout runs its assignment (nothing deferred, all applied)."""


@dataclass(frozen=True)
class Command:
    """An operator's command: ``halt``, ``rollback``, ``resume``, ``promote`` (``arm`` or the whole
    rollout). ``force``: the rollout is terminal and the operator said ``--force``."""

    action: Literal["halt", "rollback", "resume", "promote"]
    arm: str | None = None
    why: str = ""
    force: bool = False


Observation = Union[Look, Breakers, Applied, Command]


# ---------------------------------------------------------------------------------- effects
@dataclass(frozen=True)
class ArmEnded:
    """``arm`` became ``state`` (halted / rolled_back) because of ``act`` (a policy action, or
    ``by_hand``): audit it, record the action on its alerts, page, resolve its alerts."""

    arm: str
    state: str
    act: str
    why: str


@dataclass(frozen=True)
class Hold:
    arms: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Advanced:
    stage: int
    why: str
    arms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Promoted:
    """``arm`` promoted; ``halted``: every other arm that is halted now (their alerts resolve)."""

    arm: str
    why: str
    halted: tuple[str, ...] = ()


@dataclass(frozen=True)
class Passed:
    arms: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Paused:
    why: str


@dataclass(frozen=True)
class RolledBack:
    """``arm`` (None: every arm) rolled back by hand; ``arms``: the arms whose alerts resolve."""

    arm: str | None
    why: str
    arms: tuple[str, ...]


@dataclass(frozen=True)
class Resumed:
    arm: str | None
    why: str


@dataclass(frozen=True)
class Completed:
    arm: str


Effect = Union[ArmEnded, Hold, Advanced, Promoted, Passed, Paused, RolledBack, Resumed, Completed]


@dataclass(frozen=True)
class Step:
    phase: Phase
    effects: tuple = ()
    outcome: str = ""  # a look's outcome: hold, continue, advanced, promoted, passed, halted, rolled_back


# ---------------------------------------------------------------------------------- decisions
def decide(verdicts: list, plan: Plan, active: list[str]) -> dict[str, dict]:
    """A look's verdicts -> per active arm ``{action, reasons, alert_ids, decisions}``: the
    strictest action of its PoPs' verdicts (the plan's policy maps each decision to an action);
    no verdict for an arm or for one of its PoPs is ``hold``, never ``continue``."""
    per_arm: dict[str, dict] = {a: {"action": "hold", "reasons": ["no verdict from the judge for this arm"],
                                    "alert_ids": [], "decisions": []} for a in active}
    got = set()
    for v in verdicts:
        if v.treatment_arm not in per_arm or (v.rollout_id and v.rollout_id != plan.rollout_id):
            continue
        if v.pop not in plan.pops:
            continue
        action = {"rollback": plan.policy.rollback, "halt": plan.policy.halt, "continue": "continue",
                  "pass": "continue", "no_decision": plan.policy.no_decision,
                  "inconclusive_by_design": plan.policy.inconclusive_by_design}.get(v.decision, "hold")
        a = per_arm[v.treatment_arm]
        if v.treatment_arm not in got:
            got.add(v.treatment_arm)
            a.update(action="continue", reasons=[])
        if ACTION_RANK[action] >= ACTION_RANK[a["action"]]:
            a["action"] = action
        said = [str(r).strip() for r in (v.reasons or []) if str(r).strip()]  # a blank reason says nothing
        a["reasons"] += [f"{v.pop}: {v.decision}: {r}" for r in said] or [f"{v.pop}: {v.decision} (the judge gave "
                                                                          f"no reason)"]
        a["alert_ids"] += list(v.alert_ids or [])
        a["decisions"].append({"pop": v.pop, "decision": v.decision, "gates_failed": list(v.gates_failed or [])})
    for arm in active:
        if arm not in got:
            continue
        missing = set(plan.pops) - {d["pop"] for d in per_arm[arm]["decisions"]}
        if missing and per_arm[arm]["action"] == "continue":
            per_arm[arm]["action"] = "hold"
            per_arm[arm]["reasons"].append(f"no verdict for PoP(s) {', '.join(sorted(missing))}")
    return per_arm


# ---------------------------------------------------------------------------------- transition
def transition(phase: Phase, obs: Observation, plan: Plan) -> Step:
    """The one place a rollout's phase changes: ``phase`` + ``obs`` -> the new phase, the effects
    the controller carries out (in order), and a look's outcome. Raises :class:`ControllerError`
    for a command the phase does not allow (nothing changes)."""
    if isinstance(obs, Look):
        return _look(phase, obs, plan)
    if isinstance(obs, Breakers):
        return _breakers(phase, obs, plan)
    if isinstance(obs, Applied):
        if phase.promoted and phase.status == "running":
            return Step(replace(phase, status="completed"), (Completed(phase.promoted),), "completed")
        return Step(phase)
    if isinstance(obs, Command):
        return _command(phase, obs, plan)
    raise TypeError(f"not an observation: {obs!r}")


def _look(phase: Phase, obs: Look, plan: Plan) -> Step:
    arms = dict(phase.arms)
    effects: list = []
    rollback_all = any(d.action == "rollback_all" for d in obs.per_arm.values())
    for arm, d in obs.per_arm.items():
        act = "rollback_all" if rollback_all and d.action != "rollback_all" else d.action
        if act in ("rollback_arm", "rollback_all", "halt_arm"):
            new = "halted" if act == "halt_arm" else "rolled_back"
            arms[arm] = new
            why = "; ".join(d.reasons) if d.action == act else "another arm triggered rollback_all"
            effects.append(ArmEnded(arm, new, act, why))
    nxt = replace(phase, arms=arms, looks_done=phase.looks_done + 1)
    still = nxt.active()
    holds = [a for a in still if obs.per_arm.get(a, ArmDecision("continue")).action == "hold"]
    stage = plan.stages[min(phase.stage, len(plan.stages) - 1)]
    if rollback_all:
        return Step(replace(nxt, status="rolled_back"), tuple(effects), "rolled_back")
    if not still:
        status = "rolled_back" if any(s == "rolled_back" for s in arms.values()) else "halted"
        return Step(replace(nxt, status=status), tuple(effects), status)
    if holds:
        why = "not advancing: " + "; ".join(f"{a}: {'; '.join(obs.per_arm[a].reasons)}" for a in holds)
        return Step(nxt, tuple(effects) + (Hold(tuple(holds), why),), "hold")
    if nxt.looks_done >= stage.looks:
        return _advance(nxt, still, f"look {obs.look_no}/{stage.looks} passed for {', '.join(still)}", plan,
                        tuple(effects))
    return Step(nxt, tuple(effects), "continue")


def _breakers(phase: Phase, obs: Breakers, plan: Plan) -> Step:
    arms, status = dict(phase.arms), phase.status
    act = plan.policy.rollback
    new = "halted" if act == "halt_arm" else "rolled_back"
    effects = []
    for arm in obs.arms:
        arms[arm] = new
        if act == "rollback_all":
            for a in arms:
                if arms[a] == "active":
                    arms[a] = "rolled_back"
            status = "rolled_back"
        elif not any(s == "active" for s in arms.values()) and not phase.promoted:
            status = new
        effects.append(ArmEnded(arm, new, act, "circuit breaker"))
    return Step(replace(phase, arms=arms, status=status), tuple(effects))


def _advance(phase: Phase, passing: list[str], why: str, plan: Plan, effects: tuple = ()) -> Step:
    if phase.stage + 1 < len(plan.stages):
        stage = phase.stage + 1
        return Step(replace(phase, stage=stage, looks_done=0),
                    effects + (Advanced(stage, f"{why}: stage {plan.stages[stage].name} next", tuple(passing)),),
                    "advanced")
    if plan.policy.promote_on_pass and len(passing) == 1:
        return _promote(phase, passing[0], why, effects)
    return Step(phase, effects + (Passed(tuple(passing), f"{why}: last stage done; promote by hand (ccab rollout "
                                                         f"promote --arm A --reason ...)"),), "passed")


def _promote(phase: Phase, arm: str, why: str, effects: tuple = ()) -> Step:
    arms = {a: ("promoted" if a == arm else "halted" if s == "active" else s) for a, s in phase.arms.items()}
    halted = tuple(a for a, s in arms.items() if a != arm and s == "halted")
    return Step(replace(phase, arms=arms, promoted=arm), effects + (Promoted(arm, why, halted),), "promoted")


def _command(phase: Phase, cmd: Command, plan: Plan) -> Step:
    arms, arm, why = dict(phase.arms), cmd.arm, cmd.why
    terminal = phase.status in TERMINAL
    if cmd.action == "halt":
        if terminal and arm is None:
            raise ControllerError(f"rollout is {phase.status}: nothing to pause; to move its hosts back to control "
                                  f"use `ccab rollout rollback {plan.rollout_id} --force`")
        if arm is None:
            return Step(replace(phase, status="paused"), (Paused(why),))
        if arms.get(arm) not in (("active", "promoted") if terminal else ("active",)):
            raise ControllerError(f"cannot halt {arm!r}: arms are {arms}")
        arms[arm] = "halted"
        return Step(replace(phase, arms=arms, promoted=None if phase.promoted == arm else phase.promoted),
                    (ArmEnded(arm, "halted", "by_hand", why),))
    if cmd.action == "rollback":
        if arm is not None:
            if arm not in arms:
                raise ControllerError(f"no treatment arm {arm!r} (arms: {', '.join(arms)})")
            arms[arm] = "rolled_back"
            return Step(replace(phase, arms=arms, promoted=None if phase.promoted == arm else phase.promoted),
                        (RolledBack(arm, why, (arm,)),))
        return Step(replace(phase, arms={a: "rolled_back" for a in arms}, promoted=None, status="rolled_back"),
                    (RolledBack(None, why, tuple(arms)),))
    if cmd.action == "resume":
        if arm is not None:
            if arms.get(arm) not in BAD_ARM:
                raise ControllerError(f"arm {arm!r} is not halted or rolled back ({phase.arms})")
            arms[arm] = "active"
            status = "running" if phase.status in ("halted", "rolled_back") else phase.status
            return Step(replace(phase, arms=arms, status=status), (Resumed(arm, why),))
        if phase.status not in ("paused", "halted"):
            raise ControllerError(f"nothing to resume: rollout is {phase.status}")
        return Step(replace(phase, status="running"), (Resumed(None, why),))
    if cmd.action == "promote":
        if phase.status not in ("running", "paused"):
            raise ControllerError(f"cannot promote: rollout is {phase.status}")
        if arm is not None:
            if arm not in arms or arms[arm] in BAD_ARM:
                raise ControllerError(f"cannot promote {arm!r}: arms are {phase.arms}")
            return _promote(phase, arm, why)
        passing = phase.active()
        if phase.stage + 1 >= len(plan.stages) and len(passing) != 1:
            raise ControllerError("last stage: say which arm to promote (--arm)")
        return _advance(phase, passing, why, plan)
    raise ControllerError(f"unknown command {cmd.action!r}")


__all__ = ["ACTION_RANK", "BAD_ARM", "ControllerError", "Phase", "Look", "ArmDecision", "Breakers", "Applied",
           "Command", "Step", "ArmEnded", "Hold", "Advanced", "Promoted", "Passed", "Paused", "RolledBack",
           "Resumed", "Completed", "decide", "transition"]
