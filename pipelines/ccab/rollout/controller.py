"""The stage machine: plan -> start -> stage k assignments -> enough hosts `applied` -> looks
(judge) -> advance / hold / halt an arm / roll back -> ... -> promote.

Everything the controller does goes through :meth:`Controller._converge`: compute the wanted arm
per host (design.py), diff it against what each host was last sent, cap moves away from control
by the blast radius (moves back to control are never capped), and publish signed records for the
hosts that change — with a write-ahead intent in the state file (state.py) so that a crash at any
point never gives a host two generations for one change.

Safety rules (README "Safety"):
- A host on a halted or rolled-back arm is sent back to control in the same step, uncapped.
- Moves away from control wait until ``min_applied`` of the published hosts report `applied`.
- A look runs only when the stage is fully published, applied, and its window is at least the
  stage's ``min_duration_minutes`` long; a judge that cannot decide means *hold*, never *pass*.
- After an automatic halt/rollback the alerts that were the evidence get their action recorded
  (``ccab.judge.alerts.set_action``).

The judge and the Kafka I/O are injected (:class:`Controller` takes a ``judge`` callable and a
``bus``), so the stage machine can be unit-tested with a fake judge; the CLI wires the real ones.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable, Protocol

from ccab.base import atomicfile
from ccab.base.contracts import TOPIC_AGENT_STATUS, TOPIC_ASSIGNMENTS
from ccab.rollout import design
from ccab.rollout.plan import Plan, load_plan, plan_to_yaml
from ccab.rollout.publish import (Publisher, latest_assignments, read_agent_status, read_assignments,
                                  valid_generation)
from ccab.rollout.signing import sign
from ccab.rollout.state import HostAssignment, PublishIntent, RolloutState, StateError, Store, now_ms

# judge(start, end, look, looks_planned) -> verdicts (objects with pop, treatment_arm, control_arm,
# decision, reasons, alert_ids, gates_failed)
JudgeFn = Callable[[datetime, datetime, int, int], list]
ActionFn = Callable[[list[str], str], None]  # set_action(alert_ids, "halted" | "rolled_back")

ACTION_RANK = {"continue": 0, "hold": 1, "halt_arm": 2, "rollback_arm": 3, "rollback_all": 4}
BAD_ARM = ("halted", "rolled_back")


class ControllerError(RuntimeError):
    """An operation was refused or could not be done; the state is unchanged (or consistent)."""


class JudgeFailed(RuntimeError):
    """The judge raised; the look decided nothing (the audit log has ``look_failed``)."""


class Bus(Protocol):
    def publish(self, records: list[dict]) -> int: ...
    def assignments(self) -> list[dict]: ...
    def agent_status(self) -> list[dict]: ...


class KafkaBus:
    """The real bus: ccab.rollout.publish on the configured brokers."""

    def __init__(self, bootstrap: str, assignments_topic: str | None = None, status_topic: str | None = None,
                 timeout_s: float = 15.0):
        self.bootstrap = bootstrap
        self.assignments_topic = assignments_topic or TOPIC_ASSIGNMENTS
        self.status_topic = status_topic or TOPIC_AGENT_STATUS
        self.timeout_s = timeout_s
        self._pub = None

    def publish(self, records: list[dict]) -> int:
        if self._pub is None:
            self._pub = Publisher(self.bootstrap, self.assignments_topic, self.timeout_s)
        return self._pub.publish(records)

    def assignments(self) -> list[dict]:
        return read_assignments(self.bootstrap, self.assignments_topic, self.timeout_s)

    def agent_status(self) -> list[dict]:
        return read_agent_status(self.bootstrap, self.status_topic, self.timeout_s)


@dataclass
class StepResult:
    published: list[dict] = field(default_factory=list)
    deferred: int = 0
    applied: int = 0
    enrolled: int = 0
    look: dict | None = None
    messages: list[str] = field(default_factory=list)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


class Controller:
    def __init__(self, plan: Plan, store: Store, bus: Bus, key=None, *, judge: JudgeFn | None = None,
                 set_action: ActionFn | None = None, clock: Callable[[], int] = now_ms,
                 say: Callable[[str], None] = lambda _m: None):
        self.plan, self.store, self.bus, self.key = plan, store, bus, key
        self.judge, self.set_action, self.clock, self.say = judge, set_action, clock, say
        self.state: RolloutState | None = store.load() if store.exists() else None

    def reload(self) -> None:
        """Re-read the state file (call after taking ``store.locked()``)."""
        self.state = self.store.load() if self.store.exists() else None

    # ------------------------------------------------------------------------------ helpers
    def _audit(self, event: str, reason: str = "", actor: str = "controller", **details) -> None:
        e = self.store.audit(event, reason, actor, stage=self.state.stage if self.state else None, **details)
        self.say(f"[{e['seq']}] {event}: {reason}" if reason else f"[{e['seq']}] {event}")

    def _save(self) -> None:
        self.store.save(self.st)

    @property
    def st(self) -> RolloutState:
        """The state of a started rollout (``_require_state`` has checked it exists)."""
        if self.state is None:
            raise ControllerError(f"rollout {self.plan.rollout_id!r} is not started (ccab rollout start PLAN)")
        return self.state

    def _require_state(self) -> None:
        if self.st.plan_digest != self.plan.digest:
            raise ControllerError(
                f"the plan changed since the rollout started (digest {self.plan.digest[:12]} != "
                f"{self.st.plan_digest[:12]}); the controller uses {self.store.plan_file}")

    def current_arms(self) -> dict[str, str | None]:
        return {h: v.arm for h, v in self.state.hosts.items()} if self.state else {}

    def target(self) -> dict[str, str]:
        """host -> arm the plan wants now (before the blast-radius cap)."""
        st = self.st
        plan = self.plan
        status = st.status
        arms = st.arms
        current = self.current_arms()
        if status in ("rolled_back", "halted"):
            want = {h: plan.control_arm for p in plan.pops for h in plan.hosts_of(p)}
        elif status == "paused":
            want = {h: (a or plan.control_arm) for h, a in current.items()}
            for p in plan.pops:
                for h in plan.hosts_of(p):
                    want.setdefault(h, plan.control_arm)
        elif plan.design.switchback is not None:
            want = design.switchback_arms(plan, st.started_ms or self.clock(), self.clock())
        else:
            want = design.stage_arms(plan, st.stage, arms, st.promoted)
        for h, a in list(want.items()):
            if arms.get(a) in BAD_ARM:
                want[h] = plan.control_arm
            cur = current.get(h)
            if cur and arms.get(cur) in BAD_ARM and want[h] != plan.control_arm:
                want[h] = plan.control_arm  # off a halted arm: back to control first, then onwards
        return want

    def _applied(self, statuses: list[dict] | None = None) -> tuple[int, int, dict[str, dict]]:
        """(hosts whose current generation is applied, enrolled hosts, host -> latest status)."""
        if statuses is None:
            statuses = self.bus.agent_status()
        rid = self.plan.rollout_id
        latest: dict[str, dict] = {}
        best_applied: dict[str, int] = {}
        for s in statuses:
            h, gen = s.get("host"), s.get("generation")
            if h not in self.st.hosts or not valid_generation(gen) or gen > self.st.hosts[h].generation:
                continue  # only generations this controller published
            if s.get("state") == "applied" and s.get("rollout_id") == rid:
                best_applied[h] = max(best_applied.get(h, -1), gen)
            if s.get("state") in ("applied", "refused", "error"):
                if h not in latest or gen >= latest[h]["generation"]:
                    latest[h] = s
        hosts = self.st.hosts
        ok = sum(1 for h, v in hosts.items() if v.status == "published" and best_applied.get(h, -1) >= v.generation)
        return ok, len(hosts), latest

    def _stage(self):
        return self.plan.stages[min(self.st.stage, len(self.plan.stages) - 1)]

    # ------------------------------------------------------------------------------ publishing
    def _record(self, host: str, pop: str, arm: str, generation: int) -> dict:
        a = self.plan.arm(arm)
        rec = {"schema": "assignment/1", "rollout_id": self.plan.rollout_id, "generation": generation,
               "pop": pop, "host": host, "arm": a.name, "cc": a.cc, "qdisc": a.qdisc,
               "issued_at_ms": self.clock()}
        if a.bbr_version is not None:
            rec["bbr_version"] = str(a.bbr_version)  # optional field the agent checks (rollout/README.md)
        if self.key is None:
            raise ControllerError("no signing key (--key FILE or CCAB_ROLLOUT_KEY)")
        return sign(rec, self.key)

    def _topic_latest(self, records: list[dict]) -> dict[str, dict]:
        """host -> the newest record on the topic that an agent would accept from this controller."""
        public = self.key.public_key() if self.key is not None else None
        return latest_assignments(records, public, {h: v.generation for h, v in self.st.hosts.items()})

    def reconcile(self, topic_records: list[dict] | None = None) -> list[str]:
        """Finish a publish that a crash interrupted: records already on the topic are marked
        published; the others are produced again byte for byte. Returns the hosts re-sent."""
        intent = self.st.intent
        if intent is None:
            return []
        latest = self._topic_latest(topic_records if topic_records is not None else self.bus.assignments())
        resend, already = [], []
        for h in intent.hosts:
            v = self.st.hosts[h]
            on_topic = latest.get(h)
            if v.status == "published" or (on_topic and on_topic.get("generation", -1) >= v.generation):
                v.status = "published"
                already.append(h)
            else:
                resend.append(v.record)
        if resend:
            self.bus.publish(resend)
            for r in resend:
                self.st.hosts[r["host"]].status = "published"
        self.st.intent = None
        self._save()
        self._audit("reconciled", f"interrupted publish {intent.id}: {len(already)} record(s) were on the topic, "
                    f"{len(resend)} re-sent unchanged", intent=intent.id, on_topic=already,
                    resent=[r["host"] for r in resend])
        return [r["host"] for r in resend]

    def _publish(self, changes: list[design.Change], topic_latest: dict[str, dict], why: str) -> list[dict]:
        if not changes:
            return []
        pop_of = {h: p for p in self.plan.pops for h in self.plan.hosts_of(p)}
        records = []
        for c in changes:
            prev = self.st.generation_of(c.host)
            gen = max(prev, int(topic_latest.get(c.host, {}).get("generation", 0))) + 1
            rec = self._record(c.host, pop_of[c.host], c.after, gen)
            records.append(rec)
            self.st.hosts[c.host] = HostAssignment(pop=rec["pop"], arm=rec["arm"], cc=rec["cc"], qdisc=rec["qdisc"],
                                                   generation=gen, status="pending", record=rec)
        intent = PublishIntent(id=uuid.uuid4().hex[:12], ts_ms=self.clock(), hosts=[r["host"] for r in records])
        self.st.intent = intent
        self._save()  # write-ahead: the records and their generations are durable before any is produced
        self._audit("publish_intent", why, intent=intent.id,
                    changes=[{"host": c.host, "from": c.before, "to": c.after,
                              "generation": self.st.hosts[c.host].generation} for c in changes])
        self.bus.publish(records)
        for r in records:
            self.st.hosts[r["host"]].status = "published"
        self.st.intent = None
        self._save()
        self._audit("published", f"{len(records)} assignment(s)", intent=intent.id,
                    hosts=[r["host"] for r in records])
        return records

    def _converge(self, result: StepResult, wait_applied_s: float = 0.0, poll_s: float = 1.0) -> None:
        """Publish what the plan wants now, batch by batch within the blast radius, waiting up to
        ``wait_applied_s`` for each batch to be applied before the next."""
        deadline = time.monotonic() + wait_applied_s
        topic_latest = self._topic_latest(self.bus.assignments())
        while True:
            now, deferred = design.plan_changes(self.plan, self.current_arms(), self.target())
            safe = [c for c in now if c.after == self.plan.control_arm]
            risky = [c for c in now if c.after != self.plan.control_arm]
            if risky:
                ok, n, _ = self._applied()
                published = self.st.published_hosts()
                if published and ok < self._stage().min_applied * published:
                    deferred = risky + deferred
                    risky = []
                    result.messages.append(f"waiting: {ok}/{published} hosts applied their assignment "
                                           f"(need {self._stage().min_applied:.0%}) before more hosts leave control")
            batch = safe + risky
            if batch:
                why = f"stage {self.st.stage} ({self._stage().name})"
                if self.st.promoted:
                    why = f"promoting {self.st.promoted}"
                if self.st.status in ("rolled_back", "halted"):
                    why = f"rollout {self.st.status}: every host back to {self.plan.control_arm}"
                if deferred:
                    why += f"; {len(deferred)} change(s) deferred by the blast-radius limit"
                result.published += self._publish(batch, topic_latest, why)
                for r in result.published:
                    topic_latest[r["host"]] = r
            result.deferred = len(deferred)
            if not deferred or time.monotonic() >= deadline:
                break
            while time.monotonic() < deadline:  # wait for the batch to be applied
                ok, n, _ = self._applied()
                published = self.st.published_hosts()
                if ok >= self._stage().min_applied * published:
                    break
                time.sleep(poll_s)
        if result.messages:
            result.messages = list(dict.fromkeys(result.messages))

    # ------------------------------------------------------------------------------ commands
    def start(self, wait_applied_s: float = 0.0, reason: str = "") -> StepResult:
        if self.state:
            if self.state.plan_digest != self.plan.digest:
                raise ControllerError(f"rollout {self.plan.rollout_id!r} already exists with another plan "
                                      f"(state in {self.store.dir})")
            raise ControllerError(f"rollout {self.plan.rollout_id!r} is already started (status "
                                  f"{self.state.status}); use `ccab rollout step` or `status`")
        self.state = RolloutState(rollout_id=self.plan.rollout_id, plan_digest=self.plan.digest,
                                  plan_path=str(self.plan.source), seed=self.plan.design.seed,
                                  started_ms=self.clock(), stage_started_ms=self.clock(),
                                  arms={a: "active" for a in self.plan.treatment_arms})

        atomicfile.write_bytes(self.store.plan_file, plan_to_yaml(self.plan).encode())
        self._save()
        slots = design.randomize(self.plan)
        self._audit("start", reason or "rollout started", actor="operator", plan_digest=self.plan.digest,
                    seed=self.plan.design.seed,
                    randomization={pop: {h: [s.arm, s.slot] for h, s in sl.items()} for pop, sl in slots.items()})
        result = StepResult()
        self._converge(result, wait_applied_s)
        return result

    def step(self, window: tuple[datetime, datetime] | None = None, wait_applied_s: float = 0.0) -> StepResult:
        """One controller tick: reconcile, publish what is due, and run a look when it is due."""
        self._require_state()
        result = StepResult()
        resent = self.reconcile()
        if resent:
            result.messages.append(f"re-sent {len(resent)} record(s) of an interrupted publish")
        deadline = time.monotonic() + wait_applied_s
        self._converge(result, wait_applied_s)
        ok, n, latest = self._applied()
        while ok < self._stage().min_applied * n and time.monotonic() < deadline:
            time.sleep(1.0)  # --wait-applied: give the agents time to answer
            ok, n, latest = self._applied()
        if result.deferred and time.monotonic() < deadline:
            self._converge(result, max(0.0, deadline - time.monotonic()))
            ok, n, latest = self._applied()
        result.applied, result.enrolled = ok, n
        for h, s in latest.items():
            if s.get("state") in ("refused", "error") and s.get("generation") == self.st.hosts[h].generation:
                result.messages.append(f"{h}: agent {s['state']} generation {s['generation']}: {s.get('reason', '')}")
        st = self.st
        if st.status != "running" or st.promoted:
            if st.promoted and not result.deferred and ok == n and st.status == "running":
                st.status = "completed"
                self._save()
                self._audit("completed", f"every host runs {st.promoted}", applied=ok)
            result.messages.append(f"rollout {st.status}" + (f" (promoted {st.promoted})" if st.promoted else ""))
            return result
        stage = self._stage()
        if result.deferred:
            result.messages.append(f"stage {stage.name}: {result.deferred} change(s) still to publish; no look yet")
            return result
        if ok < stage.min_applied * n:
            result.messages.append(f"stage {stage.name}: {ok}/{n} hosts applied (need {stage.min_applied:.0%}); no look yet")
            return result
        if st.stage_applied_ms is None:
            st.stage_applied_ms = self.clock()
            self._save()
            self._audit("stage_applied", f"stage {stage.name}: {ok}/{n} hosts applied", applied=ok, enrolled=n)
        if window is None:  # whole hours from the first full hour after the stage was applied
            applied_at = _utc(st.stage_applied_ms)
            start = applied_at.replace(minute=0, second=0, microsecond=0)
            if start < applied_at:
                start += timedelta(hours=1)
            window = (start, _utc(self.clock()).replace(minute=0, second=0, microsecond=0))
        start, end = window
        minutes = (end - start).total_seconds() / 60
        if minutes <= 0:
            result.messages.append(f"stage {stage.name}: applied; its first whole hour of data starts {_iso(start)}, "
                                   f"a look needs {stage.min_duration_minutes} min of data (or give --from/--to)")
            return result
        if minutes < stage.min_duration_minutes:
            result.messages.append(f"stage {stage.name}: look window {_iso(start)}..{_iso(end)} is {minutes:.0f} min, "
                                   f"the stage needs {stage.min_duration_minutes} min; no look yet")
            return result
        result.look = self.look(start, end)
        self._converge(result, wait_applied_s=0.0)  # a rollback goes out in the same look
        return result

    def look(self, start: datetime, end: datetime) -> dict:
        """Run the judge for [start, end) and act on its verdicts."""
        if self.judge is None:
            raise ControllerError("no judge configured")
        st, plan = self.st, self.plan
        stage = self._stage()
        look_no = min(st.looks_done + 1, stage.looks)
        try:
            verdicts = self.judge(start, end, look_no, stage.looks)
        except Exception as exc:  # noqa: BLE001 - a judge that fails decides nothing: hold
            self._audit("look_failed", f"judge failed on {_iso(start)}..{_iso(end)}: {type(exc).__name__}: {exc}; "
                        "nothing changes (hold)", window=[_iso(start), _iso(end)])
            raise JudgeFailed(f"the judge failed ({type(exc).__name__}: {exc}); no decision taken, hosts unchanged; "
                              "re-run `ccab rollout step` with the same window") from exc
        active = [a for a, s in st.arms.items() if s == "active"]
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
            a["reasons"] += [f"{v.pop}: {v.decision}: {r}" for r in (v.reasons or [])] or [f"{v.pop}: {v.decision}"]
            a["alert_ids"] += list(v.alert_ids or [])
            a["decisions"].append({"pop": v.pop, "decision": v.decision, "gates_failed": list(v.gates_failed or [])})
        for arm in active:
            if arm not in got:
                continue
            missing = set(plan.pops) - {d["pop"] for d in per_arm[arm]["decisions"]}
            if missing and per_arm[arm]["action"] == "continue":
                per_arm[arm]["action"] = "hold"
                per_arm[arm]["reasons"].append(f"no verdict for PoP(s) {', '.join(sorted(missing))}")
        evidence = {"window": [_iso(start), _iso(end)], "look": look_no, "looks_planned": stage.looks,
                    "verdicts": [{"pop": v.pop, "treatment_arm": v.treatment_arm, "control_arm": v.control_arm,
                                  "decision": v.decision, "reasons": list(v.reasons or []),
                                  "alert_ids": list(v.alert_ids or []), "gates_failed": list(v.gates_failed or [])}
                                 for v in verdicts]}
        self._audit("look", f"stage {stage.name} look {look_no}/{stage.looks} on {_iso(start)}..{_iso(end)}: "
                    + "; ".join(f"{a} -> {d['action']}" for a, d in per_arm.items()), **evidence)
        st.looks_done = st.looks_done + 1
        rollback_all = any(d["action"] == "rollback_all" for d in per_arm.values())
        for arm, d in per_arm.items():
            act = "rollback_all" if rollback_all and d["action"] != "rollback_all" else d["action"]
            if act in ("rollback_arm", "rollback_all", "halt_arm"):
                new = "halted" if act == "halt_arm" else "rolled_back"
                st.arms[arm] = new
                why = "; ".join(d["reasons"]) if d["action"] == act else "another arm triggered rollback_all"
                self._save()
                self._audit("halt_arm" if new == "halted" else "rollback_arm",
                            f"{arm} {new.replace('_', ' ')} ({act}): its hosts go back to {plan.control_arm}: {why}",
                            arm=arm, alert_ids=d["alert_ids"], decisions=d["decisions"])
                if d["alert_ids"] and self.set_action is not None:
                    self.set_action(d["alert_ids"], new)
                    self._audit("alerts_actioned", f"{len(d['alert_ids'])} alert(s) marked {new}", arm=arm,
                                alert_ids=d["alert_ids"], action=new)
        if rollback_all:
            st.status = "rolled_back"
        still = [a for a, s in st.arms.items() if s == "active"]
        holds = [a for a in still if per_arm.get(a, {}).get("action") == "hold"]
        outcome = "hold"
        if not still and not rollback_all:
            st.status = "rolled_back" if any(s == "rolled_back" for s in st.arms.values()) else "halted"
            outcome = st.status
        elif rollback_all:
            outcome = "rolled_back"
        elif holds:
            self._audit("hold", "not advancing: " + "; ".join(f"{a}: {'; '.join(per_arm[a]['reasons'])}" for a in holds),
                        arms=holds)
        elif st.looks_done >= stage.looks:
            outcome = self._advance(still, f"look {look_no}/{stage.looks} passed for {', '.join(still)}")
        else:
            outcome = "continue"
        self._save()
        return {"per_arm": per_arm, "outcome": outcome, **evidence}

    def _advance(self, passing: list[str], why: str, actor: str = "controller") -> str:
        st, plan = self.st, self.plan
        if st.stage + 1 < len(plan.stages):
            st.stage += 1
            st.looks_done = 0
            st.stage_started_ms = self.clock()
            st.stage_applied_ms = None
            self._save()
            self._audit("advance", f"{why}: stage {plan.stages[st['stage']].name} next", actor=actor, arms=passing)
            return "advanced"
        if plan.policy.promote_on_pass and len(passing) == 1:
            return self._promote(passing[0], why, actor)
        self._audit("passed", f"{why}: last stage done; promote by hand (ccab rollout promote --arm A --reason ...)",
                    actor=actor, arms=passing)
        return "passed"

    def _promote(self, arm: str, why: str, actor: str) -> str:
        st = self.st
        st.promoted = arm
        st.arms[arm] = "promoted"
        for a, s in st.arms.items():
            if a != arm and s == "active":
                st.arms[a] = "halted"
        self._save()
        self._audit("promote", f"{arm} promoted to every host ({why}); hosts move within the blast-radius limit",
                    actor=actor, arm=arm)
        return "promoted"

    # ------------------------------------------------------------------------------ by hand
    def _manual(self, reason: str) -> None:
        self._require_state()
        if not reason.strip():
            raise ControllerError("--reason is required for a manual action (it goes to the audit log)")
        self.reconcile()

    def promote(self, reason: str, arm: str | None = None) -> StepResult:
        self._manual(reason)
        st = self.st
        if st.status not in ("running", "paused"):
            raise ControllerError(f"cannot promote: rollout is {st['status']}")
        if arm is not None:
            if arm not in st.arms or st.arms[arm] in BAD_ARM:
                raise ControllerError(f"cannot promote {arm!r}: arms are {st['arms']}")
            self._promote(arm, f"by hand: {reason}", "operator")
        else:
            passing = [a for a, s in st.arms.items() if s == "active"]
            if st.stage + 1 >= len(self.plan.stages) and len(passing) != 1:
                raise ControllerError("last stage: say which arm to promote (--arm)")
            self._advance(passing, f"by hand: {reason}", "operator")
        result = StepResult()
        self._converge(result)
        return result

    def halt(self, reason: str, arm: str | None = None, alert_ids: list[str] | None = None) -> StepResult:
        self._manual(reason)
        st = self.st
        if arm is not None:
            if st.arms.get(arm) != "active":
                raise ControllerError(f"cannot halt {arm!r}: arms are {st['arms']}")
            st.arms[arm] = "halted"
            self._save()
            self._audit("halt_arm", f"by hand: {arm} halted, its hosts go back to {self.plan.control_arm}: {reason}",
                        actor="operator", arm=arm, alert_ids=alert_ids or [])
        else:
            st.status = "paused"
            self._save()
            self._audit("pause", f"by hand: rollout paused, hosts keep their arm, nothing advances: {reason}",
                        actor="operator", alert_ids=alert_ids or [])
        if alert_ids and self.set_action is not None:
            self.set_action(alert_ids, "halted")
        result = StepResult()
        self._converge(result)
        return result

    def rollback(self, reason: str, arm: str | None = None, alert_ids: list[str] | None = None) -> StepResult:
        self._manual(reason)
        st = self.st
        if arm is not None:
            if arm not in st.arms:
                raise ControllerError(f"no treatment arm {arm!r} (arms: {', '.join(st['arms'])})")
            st.arms[arm] = "rolled_back"
            if st.promoted == arm:
                st.promoted = None
        else:
            for a in st.arms:
                st.arms[a] = "rolled_back"
            st.promoted = None
            st.status = "rolled_back"
        self._save()
        self._audit("rollback_arm" if arm else "rollback",
                    f"by hand: {arm or 'every treatment arm'} rolled back to {self.plan.control_arm}: {reason}",
                    actor="operator", arm=arm, alert_ids=alert_ids or [])
        if alert_ids and self.set_action is not None:
            self.set_action(alert_ids, "rolled_back")
        result = StepResult()
        self._converge(result)
        return result

    def resume(self, reason: str, arm: str | None = None) -> StepResult:
        self._manual(reason)
        st = self.st
        if arm is not None:
            if st.arms.get(arm) not in BAD_ARM:
                raise ControllerError(f"arm {arm!r} is not halted or rolled back ({st['arms']})")
            st.arms[arm] = "active"
            if st.status in ("halted", "rolled_back"):
                st.status = "running"
        else:
            if st.status not in ("paused", "halted"):
                raise ControllerError(f"nothing to resume: rollout is {st['status']}")
            st.status = "running"
        self._save()
        self._audit("resume", f"by hand: {arm or 'rollout'} resumed: {reason}", actor="operator", arm=arm)
        result = StepResult()
        self._converge(result)
        return result

    def summary(self, statuses: list[dict] | None = None) -> dict:
        self._require_state()
        st = self.st
        ok, n, latest = self._applied(statuses) if statuses is not None or self.bus is not None else (0, 0, {})
        by_arm: dict[str, int] = {}
        for v in st.hosts.values():
            by_arm[v.arm] = by_arm.get(v.arm, 0) + 1
        return {"rollout_id": st.rollout_id, "status": st.status, "stage": st.stage,
                "stage_name": self._stage().name, "looks_done": st.looks_done, "arms": st.arms,
                "promoted": st.promoted, "hosts_per_arm": by_arm, "applied": ok, "enrolled": n,
                "pending_intent": asdict(st.intent) if st.intent else None,
                "agents": {h: {"state": s.get("state"), "generation": s.get("generation"), "reason": s.get("reason", "")}
                           for h, s in sorted(latest.items())}}


def load_state_plan(store: Store) -> Plan:
    """The plan a started rollout was started with (the copy in its state directory)."""
    if not store.plan_file.exists():
        raise StateError(f"no plan copy at {store.plan_file}")
    return load_plan(store.plan_file)
