"""The controller killed mid-tick (issue 29: measure the in-flight window of a SIGKILL).

A tick that acts on a look is cut after each of its durable writes in turn — a state save, an
audit line, a publish to the assignments topic, an alert's action in the warehouse, a page, an arm's
alerts resolved — which is what a SIGKILL between two writes leaves (each write is atomic: the
state by rename, the audit line fsynced, a Kafka batch acknowledged). Then a fresh controller (the
restarted service) ticks until nothing is left to do, and the outcome is compared with a run that
was never killed:

- the decision survives or is taken again, the same: every run ends in the same phase, every host
  on the same arm;
- no host ever gets two different records under one generation (write-ahead intent, reconcile);
- what may be lost is only the bookkeeping of a decision already stored (``LOST_AT_MOST``): its
  audit lines, the alerts' ``action``, the page — the window README "Crash safety" documents.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import Controller
from ccab.rollout.state import Store
from ccab.rollout.signing import load_private_key
from test_controller_safety import KEY, MemoryBus, Pager, _plan

TABLE = Path(os.environ["CCAB_CRASH_TABLE"]) if os.environ.get("CCAB_CRASH_TABLE") else None  # to print the window
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
ALERT = "a" * 20

#: the effects a kill may lose (each only when the kill falls between the decision's state save
#: and that effect): the audit lines of the decision, the alerts' action, the page, the alerts'
#: resolution. Never a publish: the hosts always reach the decided arm.
LOST_AT_MOST = {"audit:look", "audit:rollback_arm", "audit:alerts_actioned", "audit:promote", "audit:paged",
                "audit:alerts_resolved", "audit:resolved", "action:rolled_back", "page:b1", "done:b1:rolled_back",
                "done:b2:promoted"}


class Crash(BaseException):
    """The process died here (BaseException: no ``except Exception`` in the controller stops it)."""


class World:
    """The controller's outside: topics, agents that apply everything, a pager, the warehouse's
    alert bookkeeping; every durable write counted, and the process killed after the n-th."""

    def __init__(self):
        self.bus, self.pager = MemoryBus(), Pager()
        self._fire = self.pager.fire
        self.effects: list[str] = []
        self.kill_after: int | None = None
        self.writes = 0

    def wrote(self, what: str) -> None:
        self.effects.append(what)
        self.writes += 1
        if self.kill_after is not None and self.writes >= self.kill_after:
            raise Crash(what)

    def controller(self, root, now) -> Controller:
        store = Store(root)
        save, audit, publish, fire = store.save, store.audit, self.bus.publish, self._fire

        def saved(state):
            save(state)
            self.wrote("save")

        def audited(event, *a, **kw):
            entry = audit(event, *a, **kw)
            self.wrote(f"audit:{event}")
            return entry

        class Bus:
            def publish(_s, records):
                n = publish(records)
                self.wrote("publish")
                return n

            def assignments(_s):
                return self.bus.assignments()

            def agent_status(_s):
                return self.bus.agent_status()

        def fired(alerts):
            fire(alerts)
            self.wrote("page:" + alerts[0]["labels"]["arm"])

        def judge(start, end, look, planned):
            return [_V(p, "b1", "rollback", ALERT) for p in ("p1", "p2")] + [_V(p, "b2", "pass") for p in ("p1", "p2")]

        analysis = Analysis(judge=judge, record_action=lambda ids, a: self.wrote(f"action:{a}"),
                            alert_payloads=lambda ids: [{"labels": {"arm": "b1", "alert_id": i}} for i in ids],
                            arm_done=lambda arm, state: self.wrote(f"done:{arm}:{state}") or [])
        store.save, store.audit = saved, audited
        self.pager.fire = fired
        return Controller(_PLAN, store, Bus(), load_private_key(KEY), analysis=analysis, pager=self.pager,
                          clock=lambda: now, page_min_firing_s=0)


class _V:
    def __init__(self, pop, arm, decision, alert=""):
        self.pop, self.treatment_arm, self.control_arm, self.decision = pop, arm, "control", decision
        self.rollout_id, self.reasons, self.gates_failed = "r1", [f"{arm} {decision}"], []
        self.alert_ids = [alert] if alert else []


_PLAN = _plan(breakers=[])


def _settle(world: World, root, now) -> Controller:
    """The restarted service: tick until the rollout is done (every host applied, nothing owed)."""
    world.kill_after = None
    for _ in range(20):
        ctl = world.controller(root, now)
        ctl.tick()
        world.bus.apply_all()
        if ctl.st.status in ("completed", "rolled_back") and not ctl.owes_publish():
            break
    return world.controller(root, now)


def _started(tmp_path) -> tuple[World, object]:
    world, root = World(), tmp_path / "base" / "r1"
    world.controller(root, T0).start()
    for _ in range(10):  # the stage's hosts batch by batch, until every host applied: the stage's clock starts
        world.bus.apply_all()
        ctl = world.controller(root, T0)
        ctl.tick()
        if ctl.st.stage_applied_ms:
            return world, root
    raise AssertionError("the stage never got applied")


def _copy(world: World, root, dest) -> tuple[World, object]:
    copy = World()
    copy.bus.records, copy.bus.statuses = list(world.bus.records), list(world.bus.statuses)
    shutil.copytree(root, dest)
    return copy, dest


def _outcome(ctl: Controller) -> tuple:
    st = ctl.st
    return st.status, dict(st.arms), st.promoted, {h: v.arm for h, v in st.hosts.items()}


def _one_record_per_generation(bus: MemoryBus) -> None:
    seen: dict[tuple[str, int], bytes] = {}
    for r in bus.records:
        key, body = (r["host"], r["generation"]), repr(sorted(r.items())).encode()
        assert seen.setdefault(key, body) == body, f"two records for {key}"


def test_a_kill_after_any_write_of_a_tick_loses_no_decision_and_no_publish(tmp_path):
    base, root = _started(tmp_path)
    later = T0 + 2 * 3_600_000  # the look is due
    clean, clean_root = _copy(base, root, tmp_path / "clean" / "r1")
    start = clean.writes
    clean.controller(clean_root, later).tick()
    tick_writes = clean.writes - start
    want = _outcome(_settle(clean, clean_root, later))
    clean_effects = Counter(clean.effects)
    assert want[0] == "completed" and want[2] == "b2" and want[1]["b1"] == "rolled_back"
    assert tick_writes > 10
    lost_anywhere: set[str] = set()
    table: list[str] = []  # kill after write k: what was lost (README "Crash safety" quotes it)
    for k in range(1, tick_writes + 1):
        world, wroot = _copy(base, root, tmp_path / f"kill{k}" / "r1")
        world.kill_after = k
        with pytest.raises(Crash):
            world.controller(wroot, later).tick()
        got = _outcome(_settle(world, wroot, later))
        assert got == want, f"killed after write {k} ({world.effects[k - 1]}): {got} != {want}"
        _one_record_per_generation(world.bus)
        lost = {e for e, n in (clean_effects - Counter(world.effects)).items() if not e.startswith(("save", "publish"))
                and not e.startswith("audit:publish") and not e.startswith("audit:published")}
        table.append(f"{k:3d} {world.effects[k - 1]:<24} lost: {', '.join(sorted(lost)) or '-'}")
        lost_anywhere |= lost
    assert lost_anywhere <= LOST_AT_MOST, "\n".join(table)
    if TABLE:
        TABLE.write_text("\n".join(table) + "\n")
