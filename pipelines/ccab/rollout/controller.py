"""The controller: the thin edges around a rollout's one transition function.

plan -> start -> stage k assignments -> enough hosts `applied` -> looks (judge) -> advance / hold /
halt an arm / roll back -> ... -> promote. What the rollout and its arms become is decided in ONE
place, :func:`ccab.rollout.phases.transition` (pure); this module observes (the bus, the
:class:`~ccab.rollout.analysis.Analysis`: judge, breakers), hands the observation to the transition,
writes the new phase to the state file (:meth:`Controller._enter`, the one place a status is
stored) and carries out its effects: audit log, alerts' actions, pages, Kafka publish.

Everything published goes through :meth:`Controller._converge`: compute the wanted arm per host
(design.py), diff it against what each host was last sent, cap moves away from control by the
blast radius (moves back to control are never capped), and publish signed records for the hosts
that change — with a write-ahead intent in the state file (state.py) so that a crash at any point
never gives a host two generations for one change.

Safety rules (README "Safety"):
- A host on a halted or rolled-back arm is sent back to control in the same step, uncapped.
- Moves away from control wait until ``min_applied`` of the published hosts report `applied`.
- A look runs only when the stage is fully published, applied, and its window is at least the
  stage's ``min_duration_minutes`` long; a judge that cannot decide means *hold*, never *pass*.
- After an automatic halt/rollback the alerts that were the evidence get their action recorded
  (``Analysis.record_action``).

The data and the Kafka I/O are injected (one ``analysis`` object and a ``bus``), so the controller is
unit-tested with a fake judge and an in-memory bus; ``ccab.pipeline.controller_analysis`` builds the
real analysis for the CLI, the service and the lab. Files: phases.py (transition), analysis.py,
bus.py (Kafka, pager protocol, agents' refusals), pages.py (page payloads), ownership.py (which
rollout owns a host).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

from ccab.base import atomicfile
from ccab.base.contracts import (ASSIGNMENT_MAX_BYTES, ASSIGNMENT_SEGMENT_SCHEMA, ASSIGNMENT_SET_SCHEMA, TOPIC_ASSIGNMENTS,
                                 rollout_id_problem)
from ccab.judge.alerts.text import times
from ccab.rollout import design, phases, prefixset
from ccab.rollout.analysis import NO_ANALYSIS, Analysis
from ccab.rollout.bus import REFUSAL_CAUSES, Bus, KafkaBus, Pager, refusal_cause  # noqa: F401 - re-exported
from ccab.rollout.ownership import ACTIVE_STATUSES, host_owners, overlap_message, plan_hosts  # noqa: F401
from ccab.rollout.pages import PAGE_MIN_FIRING_S, breaker_payload  # noqa: F401 - re-exported
from ccab.rollout.phases import BAD_ARM, ControllerError, Phase, Step  # noqa: F401 - re-exported
from ccab.rollout.plan import Plan, load_plan, plan_to_yaml
from ccab.rollout.publish import (KafkaUnavailable, agent_generations, latest_assignments, next_generation,
                                  valid_generation, wire)
from ccab.rollout.signing import sign, verify
from ccab.rollout.state import (TERMINAL, HostAssignment, PublishIntent, RolloutState, StateError, Store,
                                 now_ms)


class JudgeFailed(RuntimeError):
    """The judge raised; the look decided nothing (the audit log has ``look_failed``)."""


@dataclass
class StepResult:
    published: list[dict] = field(default_factory=list)
    deferred: int = 0
    applied: int = 0
    enrolled: int = 0
    look: dict | None = None
    messages: list[str] = field(default_factory=list)
    unpublished: str = ""  # a manual halt/rollback recorded in the state, not yet sent: why (Kafka down)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


class Controller:
    def __init__(self, plan: Plan, store: Store, bus: Bus, key=None, *, analysis: Analysis = NO_ANALYSIS,
                 pager: Pager | None = None, clock: Callable[[], int] = now_ms,
                 say: Callable[[str], None] = lambda _m: None, page_min_firing_s: float = PAGE_MIN_FIRING_S):
        self.plan, self.store, self.bus, self.key = plan, store, bus, key
        self.analysis, self.pager, self.clock, self.say = analysis, pager, clock, say
        self._prefixes = None  # a segment plan: its prefixes (the networks dictionary), resolved once
        self._set_ref = None  # ... and, when they do not fit a record, the prefix set published for them
        self.page_min_firing_ms = int(page_min_firing_s * 1000)
        self.only_owned = False  # --force on a terminal rollout: touch only hosts it still owns
        self.offline = ""  # a manual halt/rollback found Kafka down: why (its publish waits for Kafka)
        self.take_over: list[str] = []  # `start --take-over X`: rollouts of another deployment, finished
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
               "issued_at_ms": self.clock(),
               # the controller's own bookkeeping (agents ignore it): a state file older than the
               # topic is recognised by its stage as well as by its generations (check_fresh), among
               # the records of this run of the rollout (a rollout id may be started again afresh)
               "stage": self.state.stage if self.state else 0,
               "run_started_ms": self.state.started_ms if self.state else None}
        if a.bbr_version is not None:
            rec["bbr_version"] = str(a.bbr_version)  # optional field the agent checks (rollout/README.md)
        if self.plan.segment and a.name != self.plan.control_arm:
            rec = self._segment_record(rec, a)
        if self.key is None:
            raise ControllerError("no signing key (--key FILE or CCAB_ROLLOUT_KEY)")
        signed = sign(rec, self.key)
        if rec["schema"] == ASSIGNMENT_SEGMENT_SCHEMA and len(wire(signed)) > ASSIGNMENT_MAX_BYTES:
            # too many prefixes for one record: name a signed prefix set instead (assignment/3)
            pol = {k: v for k, v in rec["policy"].items() if k != "prefixes"}
            signed = sign({**rec, "schema": ASSIGNMENT_SET_SCHEMA, "policy": {**pol, "prefix_set": self._prefix_set()}},
                          self.key)
        if len(wire(signed)) > ASSIGNMENT_MAX_BYTES:
            raise ControllerError(f"the assignment for {host} is {len(wire(signed))} bytes, over the agents' "
                                  f"{ASSIGNMENT_MAX_BYTES}-byte limit (a segment of too many prefixes?)")
        return signed

    def _segment_record(self, rec: dict, a) -> dict:
        """assignment/2 for a treated host of a segment plan: the host keeps the control's algorithm,
        the segment's prefixes get the treatment's (contracts/CONTRACTS.md)."""
        seg = self.plan.segment
        if self._prefixes is None:
            if self.analysis.segment_prefixes is None:
                raise ControllerError(f"the plan targets segment {', '.join(seg)} and this controller has no "
                                      "networks dictionary to resolve it")
            self._prefixes = list(self.analysis.segment_prefixes(seg))
            if not self._prefixes:
                raise ControllerError(f"segment {', '.join(seg)}: no prefixes (ccab networks load)")
        ctl = self.plan.arm(self.plan.control_arm)
        rec = {k: v for k, v in rec.items() if k != "bbr_version"}  # bbr_version checks the host's cc
        rec.update(schema=ASSIGNMENT_SEGMENT_SCHEMA, cc=ctl.cc, qdisc=ctl.qdisc,
                   policy={"segment": ",".join(seg), "cc": a.cc, "prefixes": self._prefixes})
        return rec

    def _prefix_set(self) -> dict:
        """{name, version, sha256} of the segment's prefixes as a prefix set on the topic: the newest
        complete version with this content if there is one, else a new version (the highest seen + 1),
        published — acknowledged by the broker — before any assignment naming it."""
        if self._set_ref is not None:
            return self._set_ref
        name, prefixes = ",".join(self.plan.segment), self._prefixes
        sha = prefixset.digest(prefixes)
        on_topic = self.bus.prefix_sets()
        have = prefixset.versions(on_topic, name, self.key.public_key())
        same = [v for v, d in have.items() if d == sha]
        if same and max(same) == max(have):
            version = max(same)
        else:
            seen = [r["version"] for r in on_topic if r.get("name") == name and isinstance(r.get("version"), int)]
            version = max(seen, default=0) + 1
            try:
                recs = prefixset.chunks(name, version, prefixes, self.key, self.clock())
            except prefixset.PrefixSetError as exc:
                raise ControllerError(str(exc)) from None
            self.bus.publish_prefix_set(recs)
            self._audit("prefix_set_published", f"{name} version {version}: {len(prefixes)} prefixes in "
                        f"{len(recs)} chunks, sha256 {sha[:12]}", name=name, version=version, sha256=sha,
                        prefixes=len(prefixes), chunks=len(recs))
        self._set_ref = {"name": name, "version": version, "sha256": sha}
        return self._set_ref

    def _topic_latest(self, records: list[dict], statuses: list[dict] | None = None) -> dict[str, dict]:
        """host -> the newest record on the topic that an agent would accept from this controller
        (with the agents' answers ``statuses``: not one it refused or would refuse)."""
        public = self.key.public_key() if self.key is not None else None
        applied, refused = agent_generations(statuses or [])
        return latest_assignments(records, public, {h: v.generation for h, v in self.st.hosts.items()},
                                  applied, refused)

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

    def _publish(self, changes: list[design.Change], topic_latest: dict[str, dict], why: str,
                 applied: dict[str, int] | None = None) -> list[dict]:
        """``applied``: host -> the generation its agent last applied (the next record is at most
        MAX_GENERATION_JUMP ahead of it: ``publish.next_generation``)."""
        if not changes:
            return []
        applied = applied or {}
        pop_of = {h: p for p in self.plan.pops for h in self.plan.hosts_of(p)}
        records = []
        for c in changes:
            gen = next_generation(self.st.generation_of(c.host), int(topic_latest.get(c.host, {}).get("generation", 0)),
                                  applied.get(c.host))
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

    def _re_sign(self, result: StepResult, statuses: list[dict], topic_latest: dict[str, dict],
                 applied: dict[str, int], foreign: dict) -> None:
        """Hosts whose agent refused their current assignment's signature ("bad signature": it was
        signed with another key, e.g. `promote --key WRONG`) while this controller's key did not
        sign it: the same arm again, at the next generation, signed with this key. A controller
        given a wrong key re-signs nothing the agents applied (they never refused those)."""
        if self.key is None:
            return
        public = self.key.public_key()
        refused_sig = {(s.get("host"), s.get("generation")) for s in statuses
                       if s.get("state") == "refused" and "signature" in str(s.get("reason", "")).lower()}
        changes = [design.Change(h, v.pop, v.arm, v.arm) for h, v in sorted(self.st.hosts.items())
                   if h not in foreign and v.status == "published" and v.record
                   and (h, v.generation) in refused_sig and verify(v.record, public) is not None]
        if not changes:
            return
        why = (f"{len(changes)} host(s) refused their assignment's signature (signed with another key): the same "
               f"arm again, signed with this controller's key")
        self._audit("re_signed", why, hosts=[c.host for c in changes])
        result.published += self._publish(changes, topic_latest, why, applied)
        for r in result.published:
            topic_latest[r["host"]] = r
        result.messages.append(why)

    def _converge(self, result: StepResult, wait_applied_s: float = 0.0, poll_s: float = 1.0) -> None:
        """Publish what the plan wants now, batch by batch within the blast radius, waiting up to
        ``wait_applied_s`` for each batch to be applied before the next."""
        deadline = time.monotonic() + wait_applied_s
        statuses = self.bus.agent_status()
        records = self.bus.assignments()
        topic_latest = self._topic_latest(records, statuses)
        applied, _ = agent_generations(statuses)
        foreign = self.foreign_hosts(records, statuses)
        self._re_sign(result, statuses, topic_latest, applied, foreign)
        while True:
            now, deferred = design.plan_changes(self.plan, self.current_arms(), self.target())
            skipped = [c.host for c in now + deferred if c.host in foreign]
            if skipped:
                now = [c for c in now if c.host not in foreign]
                deferred = [c for c in deferred if c.host not in foreign]
                owners = sorted({foreign[h][0] for h in skipped})
                result.messages.append(f"{len(skipped)} host(s) left alone: owned by rollout(s) {', '.join(owners)} "
                                       f"({', '.join(sorted(skipped)[:8])})")
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
                result.published += self._publish(batch, topic_latest, why, applied)
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

    # ------------------------------------------------------------------------------ the service
    def tick(self, breakers: bool = True) -> StepResult:
        """What ``ccab controller run`` does for one rollout every interval: finish an interrupted
        publish, publish what is due (within the blast radius), evaluate the circuit breakers on
        the freshest per-minute data (at most once a minute), run a look when the stage's
        ``min_duration_minutes`` of data are there (:meth:`look_due_at`), and resolve the pages of arms that are back on control or promoted.
        ``breakers=False``: the service has just run them (:meth:`tick_breakers`)."""
        self._require_state()
        result = StepResult()
        self.apply_requests(result)
        try:
            self.check_fresh()  # a stale state is refused before anything acts on it
        except KafkaUnavailable:
            pass  # the breakers still run (on the warehouse) and record their decision; publishing waits
        if breakers and self.breakers_due():
            self.check_breakers(result)
        if self.st.status in ("running", "paused"):
            res = self.step() if self.analysis.judge is not None else None
            if res is not None:
                result.published += res.published
                result.look, result.applied, result.enrolled = res.look, res.applied, res.enrolled
                result.deferred = res.deferred
                result.messages += res.messages
        else:
            self.reconcile()
            self._converge(result)
        self.resolve_pages(result)
        return result

    def breakers_due(self) -> bool:
        """A running rollout's circuit breakers are evaluated once a minute."""
        st = self.st
        return (st.status == "running" and self.analysis.breakers is not None and bool(self.plan.breakers)
                and (st.breaker_checked_ms is None or self.clock() - st.breaker_checked_ms >= 60_000))

    def tick_breakers(self) -> StepResult:
        """Only the circuit breakers, when due (after the same freshness check as :meth:`tick`): the
        service runs them for every rollout before any rollout's look or publish, so a long look of
        one rollout never delays another's breaker."""
        self._require_state()
        result = StepResult()
        if not self.breakers_due():
            return result
        try:
            self.check_fresh()
        except KafkaUnavailable:
            pass  # as in tick: the breakers run on the warehouse; publishing waits
        if self.breakers_due():
            self.check_breakers(result)
        return result

    def check_breakers(self, result: StepResult) -> list[dict]:
        """The plan's circuit breakers on [now - longest breaker - 2 min, now): an active arm that
        trips is rolled back (``policy.rollback``) in this tick, its hosts uncapped to control."""
        st, plan = self.st, self.plan
        now = self.clock()
        longest = max(b.minutes for b in plan.breakers)
        end = _utc(now).replace(second=0, microsecond=0)
        start = max(end - timedelta(minutes=longest + 2), _utc(st.started_ms or now).replace(second=0, microsecond=0))
        began = time.monotonic()
        try:
            trips = list(self.analysis.breakers(start, end)) if end > start else []
        except Exception as exc:  # noqa: BLE001 - no data, no decision: the next tick tries again (not a
            # minute later: a breaker due while the warehouse restarts must not lose its minute)
            self._audit("breaker_failed", f"breakers on {_iso(start)}..{_iso(end)}: {type(exc).__name__}: {exc}; "
                        "tried again at the next tick")
            return []
        st.breaker_checked_ms = now
        tripped = {arm: [t for t in trips if t.get("arm") == arm and t.get("pop") in plan.pops]
                   for arm in [a for a, s in st.arms.items() if s == "active"]}
        tripped = {arm: mine for arm, mine in tripped.items() if mine}
        # every evaluation is on record (not printed: once a minute), so "was each minute's breaker
        # evaluated, and when?" has an answer (the soak's on-time count reads these)
        self.store.audit("breakers_checked", "", "controller", stage=st.stage, checked_ms=now,
                         window=[_iso(start), _iso(end)], took_ms=round((time.monotonic() - began) * 1000),
                         tripped=sorted(tripped))
        step = phases.transition(self._phase(), phases.Breakers(tuple(tripped)), plan)
        self._enter(step)
        fired = []
        for eff in step.effects:  # ArmEnded, one per tripped arm
            arm, new, mine = eff.arm, eff.state, tripped[eff.arm]
            ids = [t["alert_id"] for t in mine if t.get("alert_id")]
            worst = max(mine, key=lambda t: t["max_ratio"])
            why = (f"circuit breaker: {arm} retransmits {times(worst['max_ratio'])} {worst['control_arm']} for "
                   f"{worst['minutes']} min from {worst['first_minute']} on {worst['pop']}")
            self._audit("rollback_arm" if new == "rolled_back" else "halt_arm",
                        f"{arm} {new.replace('_', ' ')} ({eff.act}): its hosts go back to {plan.control_arm}: {why}",
                        arm=arm, alert_ids=ids, breaker_window=[_iso(start), _iso(end)], trips=mine)
            self._record_action(ids, new)
            payloads = self._alert_payloads(ids)
            self._page(arm, payloads or [breaker_payload(plan.rollout_id, t, new) for t in mine], new)
            self._arm_done(arm, new)
            fired += mine
            result.messages.append(why)
        self._save()
        if fired:
            self._converge(result)  # Kafka down: raises; the rollback is in the state, the next tick publishes it
        return fired

    # ------------------------------------------------------------------------------ the phase
    def _phase(self) -> Phase:
        st = self.st
        return Phase(status=st.status, stage=st.stage, looks_done=st.looks_done, arms=dict(st.arms),
                     promoted=st.promoted)

    def _enter(self, step: Step) -> None:
        """Store the phase the transition decided: the one place a rollout's status, its arms'
        states, its stage and its promoted arm are written (then saved, before any effect)."""
        st, ph = self.st, step.phase
        if ph.stage != st.stage:  # a new stage: its clock starts now, its hosts have not applied yet
            st.stage_started_ms = self.clock()
            st.stage_applied_ms = None
        st.status, st.stage, st.looks_done, st.promoted = ph.status, ph.stage, ph.looks_done, ph.promoted
        st.arms = dict(ph.arms)
        self._save()

    def _record_action(self, alert_ids: list[str], action: str) -> None:
        if alert_ids and self.analysis.record_action is not None:
            self.analysis.record_action(alert_ids, action)

    def _alert_payloads(self, alert_ids: list[str]) -> list[dict]:
        if alert_ids and self.analysis.alert_payloads is not None:
            return self.analysis.alert_payloads(alert_ids)
        return []

    def _outcome(self, step: Step, actor: str) -> None:
        """Carry out the effects of a transition that are the same whoever caused it: the audit
        entries of a hold, an advance, a pass, a promotion (and the alerts of the arms it ends). An
        arm that ended by a look, a breaker or a command: the caller audits it with its evidence."""
        for eff in step.effects:
            if isinstance(eff, phases.Hold):
                self._audit("hold", eff.why, arms=list(eff.arms))
            elif isinstance(eff, phases.Advanced):
                self._audit("advance", eff.why, actor=actor, arms=list(eff.arms))
            elif isinstance(eff, phases.Passed):
                self._audit("passed", eff.why, actor=actor, arms=list(eff.arms))
            elif isinstance(eff, phases.Promoted):
                self._audit("promote", f"{eff.arm} promoted to every host ({eff.why}); hosts move within the "
                            "blast-radius limit", actor=actor, arm=eff.arm)
                self._arm_done(eff.arm, "promoted")
                for a in eff.halted:
                    self._arm_done(a, "halted")

    def _page(self, arm: str, alerts: list[dict], action: str) -> None:
        """Fire ``alerts`` in Alertmanager and remember them (state.pages) until they are resolved."""
        if not alerts:
            return
        st = self.st
        for a in alerts:
            # a page fires: the stored alert is already resolved once the arm was acted on
            # (set_action) and its payload carries endsAt, which Alertmanager would take as resolved
            # at once; the page stays open until the arm's hosts are back on control (resolve_pages)
            a.pop("endsAt", None)
            a.setdefault("annotations", {})["action"] = action
        known = {json.dumps(a["labels"], sort_keys=True) for a in st.pages.get(arm, [])}
        st.pages.setdefault(arm, []).extend(a for a in alerts if json.dumps(a["labels"], sort_keys=True) not in known)
        st.pages_fired_ms.setdefault(arm, self.clock())
        self._save()
        if self.pager is None:
            return
        try:
            self.pager.fire(alerts)
            self._audit("paged", f"{len(alerts)} alert(s) of {arm} sent to Alertmanager", arm=arm,
                        alerts=[a["labels"] for a in alerts])
        except Exception as exc:  # noqa: BLE001 - the pages stay in state: resent on the next tick
            self._audit("page_failed", f"{type(exc).__name__}: {exc}", arm=arm)

    def _arm_done(self, arm: str, state: str) -> bool:
        """The arm was promoted, rolled back or halted: its alerts are resolved in the warehouse,
        and in Alertmanager at once unless the controller paged them (those resolve when the hosts
        are back on control: :meth:`resolve_pages`). False: the warehouse did not answer."""
        if self.analysis.arm_done is None:
            return True
        try:
            alerts = self.analysis.arm_done(arm, state)
        except Exception as exc:  # noqa: BLE001 - the warehouse is down: the alerts stay open, said so
            self._audit("resolve_failed", f"alerts of {arm}: {type(exc).__name__}: {exc}", arm=arm)
            return False
        paged = {json.dumps(a["labels"], sort_keys=True) for a in self.st.pages.get(arm, [])}
        now = [a for a in alerts if json.dumps(a["labels"], sort_keys=True) not in paged]
        if now and self.pager is not None:
            try:
                self.pager.resolve(now)
            except Exception as exc:  # noqa: BLE001
                self._audit("resolve_failed", f"{type(exc).__name__}: {exc}", arm=arm)
                return True  # resolved in the warehouse; Alertmanager's copy ends by its own timeout
        if alerts:
            self._audit("alerts_resolved", f"{len(alerts)} alert(s) of {arm} resolved: arm {state}", arm=arm,
                        alert_ids=[a["labels"].get("alert_id") for a in alerts])
        return True

    def resolve_pages(self, result: StepResult) -> None:
        """Resolve (``endsAt``) the pages of an arm that is no longer active: rolled back or halted
        once all its hosts are applied back on control; promoted at once."""
        st = self.st
        if not st.pages:
            return
        statuses = None
        for arm in list(st.pages):
            state = st.arms.get(arm)
            if state == "active":
                continue
            if state in BAD_ARM:
                if statuses is None:
                    statuses = self.bus.agent_status() if self.bus is not None else []
                applied_gen: dict[str, int] = {}
                for s in statuses:
                    if s.get("state") == "applied" and valid_generation(s.get("generation")):
                        applied_gen[s["host"]] = max(applied_gen.get(s["host"], -1), s["generation"])
                pending = [h for h, v in st.hosts.items() if v.arm == arm or (
                    v.arm == self.plan.control_arm and applied_gen.get(h, -1) < v.generation)]
                if pending:
                    continue
            until = st.pages_fired_ms.get(arm, 0) + self.page_min_firing_ms
            if self.clock() < until:  # too young: Alertmanager would never notify anyone of it
                result.messages.append(f"the page(s) of {arm} stay firing until {_utc(until):%H:%M:%S} UTC "
                                       f"(at least {self.page_min_firing_ms / 1000:g} s: Alertmanager's group_wait)")
                continue
            alerts = st.pages[arm]
            if self.pager is not None:
                try:
                    self.pager.resolve(alerts)
                except Exception as exc:  # noqa: BLE001 - retried next tick
                    self._audit("resolve_failed", f"{type(exc).__name__}: {exc}", arm=arm)
                    continue
            del st.pages[arm]
            st.pages_fired_ms.pop(arm, None)
            self._save()
            self._audit("resolved", f"{len(alerts)} page(s) of {arm} resolved: arm {state}", arm=arm,
                        alerts=[a["labels"] for a in alerts])
            result.messages.append(f"resolved {len(alerts)} page(s) of {arm} ({state})")

    # ------------------------------------------------------------------------------ ownership
    @property
    def topic_name(self) -> str:
        """The assignments topic this controller publishes to (for messages)."""
        return getattr(self.bus, "assignments_topic", None) or TOPIC_ASSIGNMENTS

    def topic_owners(self, records: list[dict], statuses: list[dict] | None = None) -> dict[str, tuple[str, str]]:
        """Hosts of this plan whose newest record on the assignments topic — signed with this
        controller's key, not refused by the host's agent: what the agent runs or will run — names
        another rollout that still owns them as far as this data dir knows: not one it knows as
        completed or rolled back (a rollout of another deployment, with another ``$CCAB_DATA_DIR``
        on the same Kafka, is not known here), and not one this rollout took over (``--take-over``).
        With ``only_owned`` (``--force`` on a terminal rollout) any other rollout's record counts.
        host -> (rollout, why)."""
        mine = plan_hosts(self.plan) | set(self.current_arms())
        public = self.key.public_key() if self.key is not None else None
        applied, refused = agent_generations(statuses or [])
        newest = latest_assignments([r for r in records if r.get("host") in mine], public, None, applied, refused)
        taken = set(self.state.taken_over if self.state else self.take_over)
        root = self.store.dir.parent
        finished: dict[str, bool] = {}
        out: dict[str, tuple[str, str]] = {}
        for h, r in newest.items():
            owner = r.get("rollout_id")
            if not isinstance(owner, str) or owner == self.plan.rollout_id or owner in taken:
                continue
            if owner not in finished:
                try:
                    other = Store(root / owner).load() if not rollout_id_problem(owner) else None
                except StateError:
                    other = None
                finished[owner] = other is not None and other.status in TERMINAL
            if not finished[owner] or self.only_owned:  # --force: even a finished one's hosts are not ours
                out[h] = (owner, f"newest record on {self.topic_name}, generation {r['generation']}")
        return out

    def foreign_hosts(self, records: list[dict] | None = None,
                      statuses: list[dict] | None = None) -> dict[str, tuple[str, str]]:
        """Hosts of this plan that another rollout owns (never touched by this one): an active
        rollout of this data dir, or one the assignments topic names (:meth:`topic_owners`; the
        topic is read when ``records`` is not given and there is a bus)."""
        mine = plan_hosts(self.plan) | set(self.current_arms())
        owners = host_owners(self.store.dir.parent, exclude=self.plan.rollout_id)
        out = {h: o for h, o in owners.items() if h in mine}
        if records is None and self.bus is not None:
            records = self.bus.assignments()
        for h, o in self.topic_owners(records or [], statuses).items():
            out.setdefault(h, o)
        return out

    def check_overlap(self, records: list[dict] | None = None, statuses: list[dict] | None = None) -> None:
        clash = {h: o for h, o in host_owners(self.store.dir.parent, exclude=self.plan.rollout_id).items()
                 if h in plan_hosts(self.plan)}
        if clash:
            raise ControllerError(overlap_message(self.plan.rollout_id, clash))
        if records is None:
            return
        clash = self.topic_owners(records, statuses)
        if clash:
            by: dict[str, list[str]] = {}
            for h, (owner, _why) in sorted(clash.items()):
                by.setdefault(owner, []).append(h)
            parts = [f"{len(hs)} host(s) ({', '.join(hs[:8])}{', ...' if len(hs) > 8 else ''}) belong to rollout "
                     f"{o}" for o, hs in by.items()]
            first = next(iter(by))
            raise ControllerError(
                f"rollout {self.plan.rollout_id} overlaps: " + "; ".join(parts) + f" — the newest signed record on "
                f"{self.topic_name} for each names it, and this data dir ({self.store.dir.parent}) does not know it "
                f"as finished: another deployment (another $CCAB_DATA_DIR on the same Kafka) runs it. A host belongs "
                f"to at most one active rollout: finish or roll back {first} where it runs, or take those hosts out "
                f"of the plan; once it is finished there, `ccab rollout start PLAN --take-over {first}`")

    # ------------------------------------------------------------------------------ freshness
    def stale_state(self, records: list[dict]) -> str:
        """Why the state file is older than what the assignments topic shows for this rollout
        ("" when it is not): a record of this run of the rollout (same id and ``run_started_ms``),
        signed with this controller's key, with a higher generation for a host than the state has,
        or from a later stage."""
        st = self.st
        public = self.key.public_key() if self.key is not None else None
        ours = self._this_run(records)
        newer = []
        for h, r in sorted(self._ours_on_topic(ours).items()):
            v = st.hosts.get(h)
            if v is None or r["generation"] > v.generation:
                newer.append(f"{h} generation {r['generation']} on the topic vs {v.generation if v else 'none'} here")
        stages = [r["stage"] for r in ours if isinstance(r.get("stage"), int) and not isinstance(r.get("stage"), bool)
                  and (public is None or verify(r, public) is None)]
        why = []
        if stages and max(stages) > st.stage:
            why.append(f"stage {max(stages)} on the topic vs {st.stage} here")
        if newer:
            why.append(f"{len(newer)} host(s) newer on the topic ({'; '.join(newer[:4])}{'; ...' if len(newer) > 4 else ''})")
        return ", ".join(why)

    def _this_run(self, records: list[dict]) -> list[dict]:
        """The records of this run of this rollout (same id, same start)."""
        return [r for r in records if r.get("rollout_id") == self.plan.rollout_id
                and r.get("run_started_ms") == self.st.started_ms]

    def _ours_on_topic(self, ours: list[dict]) -> dict[str, dict]:
        """host -> the newest of this rollout's records an agent would accept: signed with this
        controller's key, at most MAX_GENERATION_JUMP beyond what the state sent (a forged jump is
        not evidence of a newer state)."""
        public = self.key.public_key() if self.key is not None else None
        return latest_assignments(ours, public, {h: v.generation for h, v in self.st.hosts.items()})

    def check_fresh(self, records: list[dict] | None = None, adopt: bool = False) -> None:
        """Refuse a state file older than the topic shows for this rollout (restored from a
        backup, copied from another data dir): it would publish too little (a rollback leaving
        hosts on a treatment arm) or re-flip hosts. With ``adopt`` (a halt or rollback: moving
        hosts to safety must not be blocked) the hosts' newest records are taken from the topic
        instead, audited as ``state_adopted``."""
        if records is None:
            records = self.bus.assignments()
        why = self.stale_state(records)
        if not why:
            return
        rid = self.plan.rollout_id
        if not adopt:
            raise ControllerError(
                f"the state of rollout {rid} ({self.store.state_file}) is older than {self.topic_name} shows for it: "
                f"{why}. It was restored from a backup or written by another controller; refusing to act on it. Put "
                f"the newest state.json back, or `ccab rollout rollback {rid} --reason ...` (takes the hosts' newest "
                f"records from the topic and sends every host back to {self.plan.control_arm})")
        ours = self._ours_on_topic(self._this_run(records))
        taken = []
        for h, r in ours.items():
            v = self.st.hosts.get(h)
            if v is None or r["generation"] > v.generation:
                self.st.hosts[h] = HostAssignment(pop=r.get("pop", ""), arm=r["arm"], cc=r["cc"], qdisc=r.get("qdisc"),
                                                  generation=r["generation"], status="published", record=r)
                taken.append(h)
        stages = [r.get("stage") for r in ours.values() if isinstance(r.get("stage"), int)]
        if stages and max(stages) > self.st.stage:
            self.st.stage = max(stages)
        self._save()
        self._audit("state_adopted", f"the state was older than {self.topic_name} ({why}): took {len(taken)} "
                    f"host(s)' newest records from the topic", hosts=taken)

    # ------------------------------------------------------------------------------ commands
    def start(self, wait_applied_s: float = 0.0, reason: str = "") -> StepResult:
        if self.state:
            if self.state.plan_digest != self.plan.digest:
                raise ControllerError(f"rollout {self.plan.rollout_id!r} already exists with another plan "
                                      f"(state in {self.store.dir})")
            raise ControllerError(f"rollout {self.plan.rollout_id!r} is already started (status "
                                  f"{self.state.status}); use `ccab rollout step` or `status`")
        if self.plan.design.switchback is not None:
            raise ControllerError(f"rollout {self.plan.rollout_id!r}: {design.SWITCHBACK_REFUSAL}")
        # a host belongs to one active rollout: this data dir's rollouts, and the assignments topic
        # (another deployment on the same Kafka)
        self.check_overlap(self.bus.assignments(), self.bus.agent_status())
        self.state = RolloutState(rollout_id=self.plan.rollout_id, plan_digest=self.plan.digest,
                                  plan_path=str(self.plan.source), seed=self.plan.design.seed,
                                  started_ms=self.clock(), stage_started_ms=self.clock(),
                                  arms={a: "active" for a in self.plan.treatment_arms},
                                  taken_over=list(self.take_over))

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
        self.apply_requests(result)
        records = self.bus.assignments()
        self.check_fresh(records)
        resent = self.reconcile(records)
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
                self._enter(phases.transition(self._phase(), phases.Applied(), self.plan))
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
        if window is None:
            window = self.look_window()
            start, end = window
            due = self.look_due_at()
            if int(end.timestamp() * 1000) < due:
                result.messages.append(
                    f"stage {stage.name}: next look at {_iso(_utc(due))}, when {stage.min_duration_minutes} min of "
                    f"data are there since {'the last look' if self._looked_this_stage() else 'its hosts applied'} "
                    f"(window so far {_iso(start)}..{_iso(end)})")
                return result
        start, end = window
        minutes = (end - start).total_seconds() / 60
        if minutes < stage.min_duration_minutes or minutes <= 0:
            result.messages.append(f"stage {stage.name}: look window {_iso(start)}..{_iso(end)} is {minutes:.0f} min, "
                                   f"the stage needs {stage.min_duration_minutes} min; no look yet")
            return result
        result.look = self.look(start, end)
        self._converge(result, wait_applied_s=0.0)  # a rollback goes out in the same look
        return result

    def look_window(self) -> tuple[datetime, datetime]:
        """The automatic look window: from the first whole minute after the stage's hosts applied
        their assignments to the current whole minute (the judge reads the rollups of the hours
        that cover it, the current one as far as it is loaded: ``pipeline.controller_judge``)."""
        applied = _utc(self.st.stage_applied_ms)
        start = applied.replace(second=0, microsecond=0)
        if start < applied:
            start += timedelta(minutes=1)
        end = _utc(self.clock()).replace(second=0, microsecond=0)
        return start, max(start, end)

    def _looked_this_stage(self) -> bool:
        st = self.st
        return bool(st.last_look_ms and st.stage_applied_ms and st.last_look_ms > st.stage_applied_ms)

    def look_due_at(self) -> int:
        """When (ms) the stage's next automatic look is due: ``min_duration_minutes`` of data since
        the hosts applied, then again ``min_duration_minutes`` after each look's window end (a look
        that held counts: the next one waits for new data, never the same window twice)."""
        start, _ = self.look_window()
        since = _utc(self.st.last_look_ms) if self._looked_this_stage() else start
        return int((since + timedelta(minutes=max(1, self._stage().min_duration_minutes))).timestamp() * 1000)

    def look(self, start: datetime, end: datetime) -> dict:
        """Run the judge for [start, end) and act on its verdicts."""
        if self.analysis.judge is None:
            raise ControllerError("no judge configured")
        st, plan = self.st, self.plan
        stage = self._stage()
        look_no = min(st.looks_done + 1, stage.looks)
        try:
            verdicts = self.analysis.judge(start, end, look_no, stage.looks)
        except Exception as exc:  # noqa: BLE001 - a judge that fails decides nothing: hold
            self._audit("look_failed", f"judge failed on {_iso(start)}..{_iso(end)}: {type(exc).__name__}: {exc}; "
                        "nothing changes (hold)", window=[_iso(start), _iso(end)])
            raise JudgeFailed(f"the judge failed ({type(exc).__name__}: {exc}); no decision taken, hosts unchanged; "
                              "re-run `ccab rollout step` with the same window") from exc
        per_arm = phases.decide(verdicts, plan, [a for a, s in st.arms.items() if s == "active"])
        evidence = {"window": [_iso(start), _iso(end)], "look": look_no, "looks_planned": stage.looks,
                    "verdicts": [{"pop": v.pop, "treatment_arm": v.treatment_arm, "control_arm": v.control_arm,
                                  "decision": v.decision, "reasons": list(v.reasons or []),
                                  "alert_ids": list(v.alert_ids or []), "gates_failed": list(v.gates_failed or [])}
                                 for v in verdicts]}
        obs = phases.Look({a: phases.ArmDecision(d["action"], tuple(d["reasons"])) for a, d in per_arm.items()},
                          look_no)
        step = phases.transition(self._phase(), obs, plan)
        said = "; ".join(f"{a} -> {d['action']}" for a, d in per_arm.items()) or (
            "no active treatment arm (" + ", ".join(f"{a} {s.replace('_', ' ')}" for a, s in st.arms.items())
            + f"): nothing to judge; the rollout becomes {step.phase.status}")
        self._audit("look", f"stage {stage.name} look {look_no}/{stage.looks} on {_iso(start)}..{_iso(end)}: {said}",
                    **evidence)
        st.last_look_ms = int(end.timestamp() * 1000)
        self._enter(step)
        for eff in step.effects:
            if not isinstance(eff, phases.ArmEnded):
                continue
            arm, new, d = eff.arm, eff.state, per_arm[eff.arm]
            self._audit("halt_arm" if new == "halted" else "rollback_arm",
                        f"{arm} {new.replace('_', ' ')} ({eff.act}): its hosts go back to {plan.control_arm}: {eff.why}",
                        arm=arm, alert_ids=d["alert_ids"], decisions=d["decisions"])
            if d["alert_ids"] and self.analysis.record_action is not None:
                self._record_action(d["alert_ids"], new)
                self._audit("alerts_actioned", f"{len(d['alert_ids'])} alert(s) marked {new}", arm=arm,
                            alert_ids=d["alert_ids"], action=new)
            if d["alert_ids"] and self.analysis.alert_payloads is not None:
                self._page(arm, self._alert_payloads(d["alert_ids"]), new)
            self._arm_done(arm, new)
        self._outcome(step, "controller")
        return {"per_arm": per_arm, "outcome": step.outcome, **evidence}

    # ------------------------------------------------------------------------------ by hand
    def _manual(self, reason: str, action: str = "", force: bool = False,
                alert_ids: list[str] | None = None) -> list[str]:
        """Checks before an action by hand; returns notes for the operator (an unchecked alert id)."""
        self._require_state()
        if not reason.strip():
            raise ControllerError("--reason is required for a manual action (it goes to the audit log)")
        notes: list[str] = []
        if alert_ids:
            known = self.analysis.known_alerts
            try:
                found = set(known(list(alert_ids))) if known else set(alert_ids)
            except Exception as exc:  # noqa: BLE001 - the warehouse is down: a halt/rollback must not wait for it
                if action not in ("halt", "rollback"):
                    raise
                found = set(alert_ids)
                notes.append(f"alert id(s) {', '.join(alert_ids)} not checked: the warehouse does not answer "
                             f"({type(exc).__name__})")
            unknown = sorted(set(alert_ids) - found)
            if unknown:
                rid = self.plan.rollout_id
                raise ControllerError(f"unknown alert id(s) {', '.join(unknown)}: not an alert of rollout {rid} "
                                      f"(list them: ccab alerts --rollout {rid})")
        if action and self.st.status in TERMINAL:
            if not force:
                raise ControllerError(
                    f"rollout {self.plan.rollout_id} is {self.st.status}: a terminal state, `{action}` is refused "
                    f"(its hosts may belong to another rollout now). --force {action}s only the hosts this "
                    f"rollout still owns")
            self.only_owned = True
        if action not in ("halt", "rollback"):
            records = self.bus.assignments()
            self.check_fresh(records)
            self.reconcile(records)
            return notes
        try:  # a halt/rollback is recorded even when Kafka is down; the publish waits for Kafka
            records = self.bus.assignments()
            self.check_fresh(records, adopt=True)  # moving hosts to safety is never blocked by a stale state
            self.reconcile(records)
        except KafkaUnavailable as exc:
            self.offline = str(exc)
        return notes

    def _converge_or_defer(self, result: StepResult) -> None:
        """After a manual halt/rollback saved in the state: publish it, or, with Kafka down, say
        so in ``result.unpublished`` (the state keeps it; the next tick or step publishes it)."""
        if not self.offline:
            try:
                self._converge(result)
                return
            except KafkaUnavailable as exc:
                self.offline = str(exc)
        result.unpublished = self.offline
        self._audit("publish_deferred", f"Kafka is down: the change is recorded and is published when Kafka is "
                    f"back ({self.offline})", actor="operator")

    def apply_requests(self, result: StepResult) -> None:
        """Apply the operators' halt/rollback requests recorded while this rollout's lock was busy
        (``ccab rollout halt|rollback`` beside the service, ``Store.add_request``), oldest first.
        Call with the lock held. Each is applied once (audited with its id), then removed."""
        done = {e.get("request") for e in self.store.read_audit() if e.get("request")}
        for path, req in self.store.requests():
            rid, action, args = req.get("id"), req.get("action"), dict(req.get("args") or {})
            if rid not in done:
                if action not in ("halt", "rollback"):
                    self._audit("request_refused", f"request {rid}: unknown action {action!r}", actor="operator",
                                request=rid)
                else:
                    try:
                        res = getattr(self, action)(**args)
                        result.published += res.published
                        result.messages += res.messages
                        if res.unpublished:
                            result.unpublished = res.unpublished
                        self._audit("request_applied", f"{action} requested at {_iso(_utc(req.get('ts_ms', 0)))} "
                                    "while the rollout was busy: applied", actor="operator", request=rid)
                    except ControllerError as exc:
                        self._audit("request_refused", f"request {rid} ({action}): {exc}", actor="operator",
                                    request=rid)
                    result.messages.append(f"applied the {action} request {rid} of an operator")
            path.unlink(missing_ok=True)

    def owes_publish(self) -> bool:
        """The state decided a change the agents were not sent yet (Kafka was down, a crash): an
        interrupted publish, an enrolled host whose arm is not the one the state wants, an open
        page or an operator's request. The service ticks a terminal rollout while this holds."""
        if self.state is None:
            return False
        if self.st.intent or self.st.pages or self.store.requests():
            return True
        want = self.target()
        return any(want.get(h, v.arm) != v.arm for h, v in self.st.hosts.items())

    def _command(self, action: str, reason: str, arm: str | None = None, force: bool = False) -> Step:
        """An operator's command through the transition; its new phase stored."""
        step = phases.transition(self._phase(), phases.Command(action, arm, reason, force), self.plan)
        self._enter(step)
        return step

    def promote(self, reason: str, arm: str | None = None) -> StepResult:
        self._manual(reason)
        step = self._command("promote", f"by hand: {reason}", arm)
        self._outcome(step, "operator")
        result = StepResult()
        self._converge(result)
        return result

    def halt(self, reason: str, arm: str | None = None, alert_ids: list[str] | None = None,
             force: bool = False) -> StepResult:
        notes = self._manual(reason, "halt", force, alert_ids)
        self._command("halt", reason, arm, force)
        if arm is not None:
            self._audit("halt_arm", f"by hand: {arm} halted, its hosts go back to {self.plan.control_arm}: {reason}",
                        actor="operator", arm=arm, alert_ids=alert_ids or [])
        else:
            self._audit("pause", f"by hand: rollout paused, hosts keep their arm, nothing advances: {reason}",
                        actor="operator", alert_ids=alert_ids or [])
        result = StepResult(messages=notes)
        self._converge_or_defer(result)  # the agents first: the alerts' bookkeeping never delays them
        self._manual_bookkeeping(result, [arm] if arm is not None else [], "halted", alert_ids or [])
        return result

    def rollback(self, reason: str, arm: str | None = None, alert_ids: list[str] | None = None,
                 force: bool = False) -> StepResult:
        notes = self._manual(reason, "rollback", force, alert_ids)
        step = self._command("rollback", reason, arm, force)
        self._audit("rollback_arm" if arm else "rollback",
                    f"by hand: {arm or 'every treatment arm'} rolled back to {self.plan.control_arm}: {reason}",
                    actor="operator", arm=arm, alert_ids=alert_ids or [])
        result = StepResult(messages=notes)
        self._converge_or_defer(result)  # the agents first: the alerts' bookkeeping never delays them
        arms = [a for eff in step.effects for a in eff.arms]  # RolledBack: the arms whose alerts resolve
        self._manual_bookkeeping(result, arms, "rolled_back", alert_ids or [])
        return result

    def _manual_bookkeeping(self, result: StepResult, arms: list[str], state: str, alert_ids: list[str]) -> None:
        """After a halt/rollback by hand was published (or deferred): the arms' alerts resolved and
        the evidence alerts' action recorded in the warehouse. A warehouse that does not answer
        (within the analysis' short wait) leaves them for later, said in one line."""
        failed = [a for a in arms if not self._arm_done(a, state)]
        try:
            self._record_action(alert_ids, state)
        except Exception as exc:  # noqa: BLE001 - the warehouse is down: the action is said, not lost
            self._audit("action_failed", f"alerts {', '.join(alert_ids)} not marked {state}: "
                        f"{type(exc).__name__}: {exc}", alert_ids=alert_ids)
            failed.append("evidence alerts")
        if failed:
            result.messages.append(f"alerts not updated ({', '.join(failed)}): the warehouse does not answer; "
                                   f"the {state} itself is done (audit log: resolve_failed/action_failed)")

    def resume(self, reason: str, arm: str | None = None) -> StepResult:
        self._manual(reason)
        self._command("resume", reason, arm)
        self._audit("resume", f"by hand: {arm or 'rollout'} resumed: {reason}", actor="operator", arm=arm)
        result = StepResult()
        self._converge(result)
        return result

    def refusals(self, statuses: list[dict]) -> list[dict]:
        """The hosts whose newest answer to their current assignment is a refusal, grouped by the
        likely cause: ``[{reason, cause, hosts, pop_counts, example}]``."""
        last: dict[str, dict] = {}
        for s in statuses:
            h = s.get("host")
            if h not in self.st.hosts or s.get("state") not in ("applied", "refused", "error"):
                continue
            gen = s.get("generation")
            if valid_generation(gen) and gen not in (0, self.st.hosts[h].generation):
                continue  # an answer to another generation (an agent that cannot verify may send none)
            last[h] = s
        groups: dict[str, dict] = {}
        for h, s in sorted(last.items()):
            if s.get("state") != "refused":
                continue
            short, cause = refusal_cause(str(s.get("reason", "")))
            g = groups.setdefault(short, {"reason": short, "cause": cause, "hosts": [], "pops": {},
                                          "example": str(s.get("reason", ""))[:200]})
            g["hosts"].append(h)
            pop = self.st.hosts[h].pop
            g["pops"][pop] = g["pops"].get(pop, 0) + 1
        return sorted(groups.values(), key=lambda g: -len(g["hosts"]))

    def summary(self, statuses: list[dict] | None = None) -> dict:
        self._require_state()
        st = self.st
        if statuses is None and self.bus is not None:
            statuses = self.bus.agent_status()
        ok, n, latest = self._applied(statuses) if statuses is not None else (0, 0, {})
        by_arm: dict[str, int] = {}
        for v in st.hosts.values():
            by_arm[v.arm] = by_arm.get(v.arm, 0) + 1
        return {"rollout_id": st.rollout_id, "status": st.status, "stage": st.stage,
                "stage_name": self._stage().name, "looks_done": st.looks_done, "arms": st.arms,
                "promoted": st.promoted, "hosts_per_arm": by_arm, "applied": ok, "enrolled": n,
                "pending_intent": asdict(st.intent) if st.intent else None,
                "refusals": self.refusals(statuses or []),
                "agents": {h: {"state": s.get("state"), "generation": s.get("generation"), "reason": s.get("reason", "")}
                           for h, s in sorted(latest.items())}}


def load_state_plan(store: Store) -> Plan:
    """The plan a started rollout was started with (the copy in its state directory)."""
    if not store.plan_file.exists():
        raise StateError(f"no plan copy at {store.plan_file}")
    return load_plan(store.plan_file)
