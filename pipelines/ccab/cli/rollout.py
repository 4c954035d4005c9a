"""``ccab rollout``: plan, start, watch and steer a staged congestion-control rollout."""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from ccab.base.config import settings
from ccab.base.errors import fail

#: how long a person's command waits for the controller service's tick of the same rollout to end
LOCK_WAIT_S = 30.0
#: how long a halt/rollback by hand waits for the warehouse's alert bookkeeping, after publishing
MANUAL_BOOKKEEPING_WAIT_S = 2.0

EPILOG = """\
examples:
  ccab rollout keygen --out .ccab/keys                       # a signing key pair (test/dev)
  ccab rollout plan rollout/plans/tyo1-bbr-canary.yaml       # dry run: who would change, nothing published
  ccab rollout plan rollout/plans/tyo1-bbr-canary.yaml --key K --out /tmp/records.jsonl  # + signed records
  ccab rollout start rollout/plans/tyo1-bbr-canary.yaml --key K --wait-applied 60
  ccab rollout status tyo1-bbr-canary                        # stage, arms, applied hosts, last decisions
  ccab rollout step tyo1-bbr-canary --key K                  # one tick: publish what is due, look when due
  ccab rollout step tyo1-bbr-canary --key K --from 2025-11-20T00:00Z --to 2025-11-20T03:00Z  # look at this window
  ccab rollout halt tyo1-bbr-canary --arm bbr1 --reason "INC-123 retransmits" --key K
  ccab rollout rollback tyo1-bbr-canary --reason "pager" --key K   # every treatment host back to control
  ccab rollout promote tyo1-bbr-canary --arm bbr2 --reason "review ok" --key K
  ccab rollout resume tyo1-bbr-canary --reason "false alarm" --key K
  ccab rollout sim-actuator --public-key P --exit-when-idle 5  # SIMULATED hosts answer like agents

state and audit log: $CCAB_DATA_DIR/rollouts/<rollout_id>/{state.json,audit.jsonl,plan.yaml}
signing key: --key FILE, or $CCAB_ROLLOUT_KEY (64 hex chars of an Ed25519 seed, or PEM)
exit codes: 0 ok; 1 runtime failure (Kafka down, judge failed: the state stays consistent, re-run
to resume); 2 invalid plan or usage; 3 refused (e.g. not started, wrong state for the action)
"""


def _add_kafka(p: argparse.ArgumentParser) -> None:
    p.add_argument("--assignments-topic", metavar="TOPIC", help="default ccab.assignments.v1")
    p.add_argument("--status-topic", metavar="TOPIC", help="default ccab.agent_status.v1")
    p.add_argument("--prefix-sets-topic", metavar="TOPIC",
                   help="where a segment too large for one assignment record goes as a signed prefix set "
                        "(default ccab.prefix_sets.v1; the agents' --prefix-sets-topic)")
    p.add_argument("--kafka-timeout", type=float, default=15.0, metavar="S",
                   help="seconds to wait for the broker before failing (default: %(default)s)")


def _add_key(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", metavar="FILE", help="Ed25519 signing key (default: $CCAB_ROLLOUT_KEY)")


def register(sub) -> None:
    p = sub.add_parser("rollout", help="staged congestion-control rollouts: plan, start, step, halt, rollback",
                       description="Plan and drive a staged A/B rollout of congestion-control algorithms: signed "
                                   "assignment/1 records to the compacted topic, looks by the statistical judge, "
                                   "automatic halt/rollback on guardrail regressions.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rs = p.add_subparsers(dest="rollout_command", metavar="ACTION", required=True)

    a = rs.add_parser("plan", help="dry run: validate a plan and show the changes of the next step",
                      epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("plan", type=Path, metavar="PLAN.yaml", help="the rollout plan (format: pipelines/ccab/rollout/README.md)")
    a.add_argument("--out", type=Path, metavar="FILE", help="write the signed records (JSONL) here (needs --key)")
    a.add_argument("--json", action="store_true", help="print the result as JSON (for scripts)")
    _add_key(a)
    a.set_defaults(func=cmd_plan)

    a = rs.add_parser("start", help="start a rollout: first stage's assignments to Kafka")
    a.add_argument("plan", type=Path, metavar="PLAN.yaml", help="the rollout plan (format: pipelines/ccab/rollout/README.md)")
    a.add_argument("--wait-applied", type=float, default=0.0, metavar="S",
                   help="publish batch after batch (blast radius) waiting up to S seconds for applies")
    a.add_argument("--reason", default="", help="goes to the audit log")
    a.add_argument("--take-over", action="append", default=[], metavar="ROLLOUT",
                   help="hosts whose newest record on the assignments topic names ROLLOUT (a rollout of another "
                        "deployment, finished there) may be taken; repeatable. Without it such hosts are refused")
    _add_key(a), _add_kafka(a)
    a.set_defaults(func=cmd_start)

    a = rs.add_parser("status", help="where a rollout is")
    a.add_argument("rollout_id", help="the rollout (its plan's rollout_id)")
    a.add_argument("--json", action="store_true", help="print the result as JSON (for scripts)")
    a.add_argument("--audit", type=int, default=8, metavar="N", help="last N audit entries (default: %(default)s)")
    a.add_argument("--offline", action="store_true", help="do not read agent status from Kafka")
    a.add_argument("--watch", type=float, default=0, metavar="S", help="print the status again every S seconds "
                                                                        "until Ctrl-C")
    _add_kafka(a)
    a.set_defaults(func=cmd_status)

    a = rs.add_parser("step", help="one controller tick: reconcile, publish what is due, run a look when due")
    a.add_argument("rollout_id", help="the rollout (its plan's rollout_id)")
    a.add_argument("--from", dest="t_from", metavar="ISO", help="look window start, on an hour (default: the "
                                                                   "first whole minute after the stage was applied)")
    a.add_argument("--to", dest="t_to", metavar="ISO", help="look window end, on an hour (default: this minute; "
                                                               "the look runs once min_duration_minutes are there)")
    a.add_argument("--wait-applied", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for hosts to report applied (batch after batch)")
    a.add_argument("--rollups", choices=("run", "existing"), default="run",
                   help="run: recompute the hourly cohort rollups of the hours covering the look window "
                        "first, those whose raw rows changed (default); existing: judge the rollups as they "
                        "are (the hourly DAG keeps them)")
    a.add_argument("--json", action="store_true", help="print the result as JSON (for scripts)")
    _add_key(a), _add_kafka(a)
    a.set_defaults(func=cmd_step)

    for name, helptext in (("promote", "advance to the next stage, or (--arm) promote an arm to every host"),
                           ("halt", "halt an arm (--arm: its hosts go back to control) or pause the rollout"),
                           ("rollback", "roll an arm (--arm) or every treatment host back to control"),
                           ("resume", "resume a paused rollout or (--arm) a halted arm")):
        a = rs.add_parser(name, help=helptext)
        a.add_argument("rollout_id", help="the rollout (its plan's rollout_id)")
        a.add_argument("--arm", metavar="ARM", help="act on this treatment arm only (default: the whole rollout)")
        a.add_argument("--reason", required=True, help="why (required; goes to the audit log)")
        if name in ("halt", "rollback"):
            a.add_argument("--alert", action="append", default=[], metavar="ALERT_ID",
                           help="alert of this rollout that is the evidence (its action is recorded; an unknown "
                                "id is refused); repeatable")
            a.add_argument("--force", action="store_true",
                           help="act on a completed or rolled-back rollout (refused otherwise, exit 3); touches "
                                "only the hosts it still owns (not those of another active rollout)")
            a.add_argument("--lock-wait", type=float, default=5.0, metavar="S",
                           help="seconds to wait for the rollout's lock; when the controller service still "
                                "holds it (a tick, Kafka down), the action is recorded as a request the service "
                                "applies at its next tick (default: %(default)s)")
        _add_key(a), _add_kafka(a)
        a.set_defaults(func=cmd_manual, action=name)

    a = rs.add_parser("list", help="every rollout of this data dir: status, stage, arms, hosts")
    a.add_argument("--json", action="store_true", help="print the result as JSON (for scripts)")
    a.set_defaults(func=cmd_list)

    a = rs.add_parser("keygen", help="write an Ed25519 key pair (seed hex + public base64)")
    a.add_argument("--out", type=Path, required=True, metavar="DIR", help="folder for the key pair (created if missing)")
    a.add_argument("--name", default="rollout", help="file name prefix: NAME_ed25519_seed.hex / NAME_ed25519_public.b64 (default: %(default)s)")
    a.add_argument("--force", action="store_true", help="replace an existing pair of that name (refused otherwise)")
    a.set_defaults(func=cmd_keygen)

    from ccab_workshop import sim_actuator

    sim_actuator.register(rs)

    c = sub.add_parser("controller", help="the rollout controller service: drives every active rollout",
                       description="Long-running rollout controller: every --interval it reconciles every active "
                                   "rollout (publishes what is due within the blast radius, circuit breakers every "
                                   "minute on the freshest per-minute data, looks when min_duration_minutes of data are there, "
                                   "pages and resolves in Alertmanager). Run two for safety: one is the leader "
                                   "(flock + fencing token under $CCAB_DATA_DIR/rollouts), the other stands by.",
                       epilog=CONTROLLER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    cs = c.add_subparsers(dest="controller_command", metavar="ACTION", required=True)
    a = cs.add_parser("run", help="run the controller loop (until SIGTERM)")
    a.add_argument("--interval", type=float, default=15.0, metavar="S",
                   help="seconds between two loops over the rollouts (default: %(default)s)")
    a.add_argument("--metrics-addr", default="127.0.0.1:9466", metavar="HOST:PORT",
                   help="where /metrics and /healthz are served (default: %(default)s; empty: none)")
    a.add_argument("--alertmanager", metavar="URL",
                   help="Alertmanager base URL for pages (default: from $CCAB_ALERT_WEBHOOK_URL; none: no pages)")
    a.add_argument("--page-min-firing", type=float, metavar="S",
                   help="keep a page firing at least S seconds, even when the arm's hosts are back on control "
                        "sooner: Alertmanager never notifies an alert that resolved within its route's group_wait "
                        "(default: from --alertmanager-config, else 60 = the shipped page route's 30 s + 30 s)")
    a.add_argument("--alertmanager-config", type=Path, metavar="FILE",
                   help="the Alertmanager config the pages go through: the minimum firing time is its page "
                        "route's group_wait + 30 s")
    a.add_argument("--once", action="store_true",
                   help="one loop, then exit (cron, tests); exit 1 when the loop failed: not the leader, or a "
                        "rollout's tick failed (Kafka down, ...)")
    a.add_argument("--rollups", choices=("run", "existing"), default="run",
                   help="run: recompute the stale hourly rollups of the hours covering the look window first "
                        "(default); existing: the DAG does")
    _add_key(a), _add_kafka(a)
    a.set_defaults(func=cmd_controller_run)


# ----------------------------------------------------------------------------------------------


_fail = partial(fail, "rollout")


def _key(args):
    from ccab.rollout.signing import load_private_key

    path = getattr(args, "key", None) or settings().rollout_key
    return load_private_key(path) if path else None


def _bus(args):
    from ccab.rollout.controller import KafkaBus

    return KafkaBus(settings().bootstrap_servers, args.assignments_topic, args.status_topic, args.kafka_timeout,
                    prefix_sets_topic=getattr(args, "prefix_sets_topic", None))


CONTROLLER_EPILOG = """\
examples:
  ccab controller run --key K --alertmanager http://127.0.0.1:9093            # the service (systemd: rollout/deploy)
  ccab controller run --key K --once                                         # one loop
  curl -s 127.0.0.1:9466/metrics ; curl -s 127.0.0.1:9466/healthz

people keep using `ccab rollout status|halt|rollback|promote|resume`: they take the same per-rollout
lock and change the same state, and the service picks the change up at its next loop.
"""


def _alertmanager_url(explicit: str | None) -> str | None:
    url = explicit or settings().alert_webhook_url
    if not url:
        return None
    url = url.rstrip("/")
    return url[: -len("/alerts")] if url.endswith("/api/v2/alerts") else url


def _controller(args, plan=None, bookkeeping_wait_s: float | None = None):
    from ccab.pipeline import controller_analysis
    from ccab.rollout.controller import Controller, load_state_plan
    from ccab.rollout.service import AlertmanagerPager
    from ccab.rollout.state import Store

    if plan is None:
        store = Store.for_rollout(args.rollout_id)
        if not store.exists():
            raise LookupError(f"no rollout {args.rollout_id!r} in {store.dir.parent} (ccab rollout start PLAN)")
        plan = load_state_plan(store)
    store = Store.for_rollout(plan.rollout_id)
    rollups = getattr(args, "rollups", "run") == "run"
    am = _alertmanager_url(getattr(args, "alertmanager", None))
    return Controller(plan, store, _bus(args), _key(args), analysis=controller_analysis(plan, rollups, bookkeeping_wait_s),
                      pager=AlertmanagerPager(am) if am else None, say=lambda m: print(m, flush=True), **(
                          {"page_min_firing_s": args.page_min_firing}
                          if getattr(args, "page_min_firing", None) is not None else {}))


def _guard(fn):
    def run(args) -> int:
        from ccab.rollout.controller import ControllerError, JudgeFailed
        from ccab.rollout.plan import PlanError
        from ccab.rollout.publish import KafkaUnavailable
        from ccab.rollout.signing import KeyError_
        from ccab.rollout.state import StateError

        try:
            return fn(args)
        except PlanError as exc:
            return _fail(str(exc), 2)
        except KeyError_ as exc:
            return _fail(str(exc), 2)
        except LookupError as exc:
            return _fail(str(exc.args[0] if exc.args else exc), 3)
        except ControllerError as exc:
            return _fail(str(exc), 3)
        except (StateError, JudgeFailed) as exc:
            return _fail(str(exc), 1)
        except KafkaUnavailable as exc:
            return _fail(f"{exc}\nthe controller state is intact (a pending publish is reconciled on the next "
                         f"run); re-run when Kafka is back", 1)
    return run


def _print_result(res, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"published": [{"host": r["host"], "arm": r["arm"], "cc": r["cc"],
                                         "generation": r["generation"]} for r in res.published],
                          "deferred": res.deferred, "applied": res.applied, "enrolled": res.enrolled,
                          "look": res.look, "messages": res.messages}, indent=1, default=str))
        return
    if res.published:
        print(f"published {len(res.published)} assignment(s): " + ", ".join(
            f"{r['host']}→{r['arm']}#{r['generation']}" for r in res.published))
    if res.deferred:
        print(f"{res.deferred} change(s) deferred by the blast-radius limit")
    if res.look:
        print(f"look on {res.look['window'][0]}..{res.look['window'][1]}: {res.look['outcome']}")
        for arm, d in res.look["per_arm"].items():
            print(f"  {arm}: {d['action']}")
            for r in d["reasons"]:
                print(f"    - {r}")
            if d["alert_ids"]:
                print(f"    alerts: {', '.join(d['alert_ids'])}")
    for m in res.messages:
        print(m)


@_guard
def cmd_plan(args) -> int:
    from ccab.rollout import design
    from ccab.rollout.controller import Controller
    from ccab.rollout.plan import load_plan
    from ccab.rollout.state import RolloutState, Store

    plan = load_plan(args.plan)
    store = Store.for_rollout(plan.rollout_id)
    ctl = Controller(plan, store, bus=None, key=_key(args))  # type: ignore[arg-type]
    if not ctl.state:
        ctl.check_overlap()  # a host belongs to at most one active rollout: refused here already
    if ctl.state and ctl.state.plan_digest != plan.digest:
        print(f"note: rollout {plan.rollout_id} is running with another plan; showing changes from its state")
    current = ctl.current_arms()
    if not ctl.state:  # not started: what `start` would do first
        ctl.state = RolloutState(plan.rollout_id, plan.digest, str(plan.source),
                                 arms={a: "active" for a in plan.treatment_arms})
    now, deferred = design.plan_changes(plan, current, ctl.target())
    slots = design.randomize(plan)
    records = []
    if args.out:
        if ctl.key is None:
            return _fail("--out needs --key (or CCAB_ROLLOUT_KEY) to sign the records", 2)
        pop_of = {h: p for p in plan.pops for h in plan.hosts_of(p)}
        for c in now:
            gen = ctl.state.generation_of(c.host) + 1
            records.append(ctl._record(c.host, pop_of[c.host], c.after, gen))
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True, separators=(",", ":")) + "\n" for r in records))
        tmp.replace(args.out)
    if args.json:
        print(json.dumps({"rollout_id": plan.rollout_id, "digest": plan.digest, "seed": plan.design.seed,
                          "changes": [c.__dict__ for c in now], "deferred": [c.__dict__ for c in deferred],
                          "out": str(args.out) if args.out else None}, indent=1))
        return 0
    print(f"plan {plan.rollout_id} ({plan.source}) is valid; digest {plan.digest[:16]}, seed {plan.design.seed}")
    for pop in plan.pops:
        n = len(plan.hosts_of(pop))
        sizes = ", ".join(f"{s.name}: {plan.per_arm(s, pop)}/arm" for s in plan.stages)
        print(f"  {pop}: {n} hosts; stages {sizes}; at most {design.step_cap(plan, pop)} leave control per step")
    print(f"next step: {len(now)} change(s), {len(deferred)} deferred by the blast radius (dry run: nothing published)")
    for c in now + deferred:
        s = slots.get(c.pop, {}).get(c.host)
        mark = "  (deferred)" if c in deferred else ""
        print(f"  {c.pop} {c.host:<16} {c.before or '-':>8} -> {c.after:<8} cc={plan.arm(c.after).cc:<6} "
              f"slot={s.slot if s else '-'}{mark}")
    if args.out:
        print(f"wrote {len(records)} signed assignment/1 record(s) to {args.out}")
    return 0


@_guard
def cmd_start(args) -> int:
    from ccab.rollout.plan import load_plan, with_hosts

    plan = load_plan(args.plan)
    if plan.inventory.from_heartbeats:
        bus = _bus(args)
        seen: dict[str, list[str]] = {}
        for s in bus.agent_status():
            if s.get("pop") in plan.pops:
                seen.setdefault(s["pop"], []).append(s["host"])
        plan = with_hosts(plan, seen)
    ctl = _controller(args, plan)
    if ctl.key is None:
        return _fail("no signing key: --key FILE or CCAB_ROLLOUT_KEY", 2)
    ctl.take_over = list(args.take_over)
    with ctl.store.locked(wait_s=LOCK_WAIT_S):  # one controller per rollout; state read under the lock
        ctl.reload()
        res = ctl.start(wait_applied_s=args.wait_applied, reason=args.reason)
    _print_result(res)
    print(f"state: {ctl.store.dir}")
    return 0


@_guard
def cmd_step(args) -> int:
    from ccab.cli.common import parse_hour

    window = None
    if args.t_from or args.t_to:
        if not (args.t_from and args.t_to):
            return _fail("--from and --to go together", 2)
        try:
            window = (parse_hour(args.t_from, "--from"), parse_hour(args.t_to, "--to"))
        except ValueError as exc:
            return _fail(str(exc), 2)
    ctl = _controller(args)
    with ctl.store.locked(wait_s=LOCK_WAIT_S):
        ctl.reload()
        res = ctl.step(window=window, wait_applied_s=args.wait_applied)
    _print_result(res, args.json)
    return 0


@_guard
def cmd_manual(args) -> int:
    from ccab.rollout.controller import ControllerError

    if not args.reason.strip():
        return _fail(f"--reason is empty: say why you {args.action} (it goes to the audit log)", 2)
    # an operator in an incident never waits for the warehouse: a halt/rollback is published first,
    # and the alerts' bookkeeping after it waits at most MANUAL_BOOKKEEPING_WAIT_S for the service
    ctl = _controller(args, bookkeeping_wait_s=MANUAL_BOOKKEEPING_WAIT_S if args.action in ("halt", "rollback") else None)
    fn = getattr(ctl, args.action)
    kwargs = {"reason": args.reason, "arm": args.arm}
    if args.action in ("halt", "rollback"):
        kwargs["alert_ids"] = args.alert
        kwargs["force"] = args.force
    arms = list(ctl.plan.treatment_arms)
    if args.arm is not None and args.arm not in arms:
        return _fail(f"--arm {args.arm!r} is not a treatment arm of {ctl.plan.rollout_id} "
                     f"(treatment arms: {', '.join(arms)})", 2)
    if args.action not in ("halt", "rollback"):
        with ctl.store.locked(wait_s=LOCK_WAIT_S):
            ctl.reload()
            res = fn(**kwargs)
        _print_result(res)
        return 0
    from ccab.rollout.state import LockBusy

    rid, what = args.rollout_id, f"{args.action} of {args.rollout_id}" + (f" (arm {args.arm})" if args.arm else "")
    try:
        with ctl.store.locked(wait_s=args.lock_wait):
            ctl.reload()
            if args.action == "halt" and args.arm is None and ctl.st.status == "paused":
                return _fail(f"rollout {ctl.plan.rollout_id} is already paused: nothing to do (resume it with "
                             f"ccab rollout resume {ctl.plan.rollout_id} --reason ...)", 3)
            res = fn(**kwargs)
    except LockBusy:
        # the controller service is in a tick on this rollout (maybe waiting for Kafka): record the
        # operator's action for it to apply first at its next tick; never "another controller holds"
        if ctl.state is None or (ctl.state.status in ("rolled_back", "completed") and not args.force):
            raise
        if args.arm is not None and args.arm not in ctl.state.arms:
            raise ControllerError(f"no treatment arm {args.arm!r} (arms: {', '.join(ctl.state.arms)})") from None
        req = ctl.store.add_request(args.action, **kwargs)
        print(f"{what} recorded as request {req['id']}: the controller service holds the rollout now (a tick in "
              f"progress, perhaps waiting for Kafka); it applies the request first at its next tick and publishes "
              f"it to the agents (when Kafka is down: when Kafka is back). Without a running service, "
              f"`ccab rollout step {rid}` applies it. Follow it: ccab rollout status {rid} --audit 5")
        return 0
    _print_result(res)
    if res.unpublished:
        print(f"{what} recorded in the rollout's state, not yet published: Kafka is down ({res.unpublished}). "
              f"The controller service publishes it when Kafka is back; without a running service run "
              f"`ccab rollout step {rid}` then. The agents keep what they applied until then.")
    return 0


def _moved_since(st) -> dict[str, list[str]]:
    """For a finished rollout: the hosts another rollout assigned after this one last did, by that
    rollout (its state's hosts at a later update): this rollout's arms no longer hold there."""
    from ccab.rollout.state import TERMINAL, StateError, Store, rollouts_dir

    if st.status not in TERMINAL or not st.hosts:
        return {}
    out: dict[str, list[str]] = {}
    base = rollouts_dir()
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        if d.name == st.rollout_id or not (d / "state.json").exists():
            continue
        try:
            other = Store(d).load()
        except StateError:
            continue
        if (other.updated_ms or 0) <= (st.updated_ms or 0):
            continue
        hosts = sorted(h for h in other.hosts if h in st.hosts)
        if hosts:
            out[other.rollout_id] = hosts
    return out


def _next_look(ctl) -> str:
    """When the stage's next automatic look is due, in words."""
    from datetime import datetime, timezone

    st = ctl.st
    if st.status != "running":
        return f"none (the rollout is {st.status})"
    if not st.stage_applied_ms:
        return "after the stage's hosts have applied their assignments (min_applied), then min_duration_minutes of data"
    try:
        due = ctl.look_due_at()
    except Exception as exc:  # noqa: BLE001 - a status line must not fail the status
        return f"unknown ({type(exc).__name__}: {exc})"
    mins = (due - ctl.clock()) / 60_000 if callable(getattr(ctl, "clock", None)) else None
    when = datetime.fromtimestamp(due / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if mins is None:
        return when
    return f"{when} (" + (f"in {mins:.0f} min" if mins > 0 else "due now: the next step or controller loop runs it") + ")"


@_guard
def cmd_status(args) -> int:
    if not args.watch:
        return _status_once(args)
    import time

    if args.watch < 1:
        return _fail("--watch: at least 1 second", 2)
    try:
        while True:
            print(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC (every {args.watch:g} s; Ctrl-C stops)")
            code = _status_once(args)
            if code:
                return code
            sys.stdout.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return 0


def _status_once(args) -> int:
    from ccab.rollout.controller import Controller, load_state_plan
    from ccab.rollout.state import Store

    store = Store.for_rollout(args.rollout_id)
    if not store.exists():
        raise LookupError(f"no rollout {args.rollout_id!r} in {store.dir.parent}")
    plan = load_state_plan(store)
    ctl = Controller(plan, store, _bus(args))
    statuses = [] if args.offline else None
    kafka_down = False
    if not args.offline:
        from ccab.kafka.reach import KafkaUnreachable, check_reachable

        cfg = settings()
        try:  # one line instead of librdkafka's stream of FAIL lines; the saved state is still shown
            check_reachable(cfg.bootstrap_servers, args.kafka_timeout, local=cfg.embedded_kafka)
        except KafkaUnreachable as exc:
            print(f"ccab rollout status: {exc}; showing the saved state only (agents' answers unknown)",
                  file=sys.stderr)
            statuses = []
            kafka_down = True
    summary = ctl.summary(statuses)
    taken, stale = {}, ""
    if statuses != []:  # Kafka answered: compare the state with the assignments topic
        from ccab.rollout.publish import KafkaUnavailable

        try:
            records = ctl.bus.assignments()
            taken = {h: o for h, o in ctl.topic_owners(records, statuses).items() if h in ctl.st.hosts}
            stale = ctl.stale_state(records)
        except KafkaUnavailable:
            pass
    summary["taken_by_other_rollouts"] = {h: o[0] for h, o in sorted(taken.items())}
    summary["stale_state"] = stale
    if kafka_down:  # no answers read: unknown, not 0 applied
        summary["applied"] = None
    summary["next_look"] = _next_look(ctl)
    audit = list(store.read_audit())[-args.audit:] if args.audit else []
    if args.json:
        print(json.dumps({**summary, "audit": audit}, indent=1, default=str))
        return 0
    print(f"rollout {summary['rollout_id']}: {summary['status']}, stage {summary['stage']} ({summary['stage_name']}), "
          f"looks done {summary['looks_done']}" + (f", promoted {summary['promoted']}" if summary["promoted"] else ""))
    print("arms: " + ", ".join(f"{a}={s}" for a, s in summary["arms"].items()))
    moved = _moved_since(ctl.st)
    summary["hosts_moved_by_other_rollouts"] = moved
    if moved:
        n = sum(len(h) for h in moved.values())
        print("hosts per arm, as this rollout left them: "
              + ", ".join(f"{a}={c}" for a, c in sorted(summary["hosts_per_arm"].items()))
              + f" — {n} of them since moved by " + ", ".join(f"{r} ({len(h)})" for r, h in sorted(moved.items())))
    else:
        print("hosts per arm: " + ", ".join(f"{a}={n}" for a, n in sorted(summary["hosts_per_arm"].items())))
    if not args.offline:
        print(f"applied: {summary['applied']}/{summary['enrolled']}" if summary["applied"] is not None else
              f"applied: unknown (Kafka unreachable: the agents' answers could not be read; {summary['enrolled']} enrolled)")
    print(f"next look: {summary['next_look']}")
    if taken:
        by: dict[str, list[str]] = {}
        for h, o in sorted(taken.items()):
            by.setdefault(o[0], []).append(h)
        for owner, hs in by.items():
            print(f"{len(hs)} host(s) now run rollout {owner}'s assignment (newest signed record on the topic), not "
                  f"this state's: {', '.join(hs[:8])}{', ...' if len(hs) > 8 else ''}")
    if stale:
        print(f"STALE STATE: {store.state_file} is older than the assignments topic shows for this rollout ({stale}); "
              f"step/promote/resume are refused, halt/rollback take the topic's records first")
    for g in summary.get("refusals") or []:
        print(f"{len(g['hosts'])} agent(s) refused: {g['reason']} — {g['cause']} "
              f"(hosts {', '.join(g['hosts'][:6])}{', ...' if len(g['hosts']) > 6 else ''}; agent said: {g['example']})")
    for arm, pages in (ctl.st.pages or {}).items():
        print(f"open pages of {arm}: {len(pages)} (resolved when its hosts are back on control)")
    if summary["pending_intent"]:
        print(f"pending publish {summary['pending_intent']['id']} (reconciled on the next step)")
    for e in audit:
        print(f"  [{e['seq']}] {e['event']} ({e['actor']}): {e.get('reason', '')}")
    return 0


@_guard
def cmd_list(args) -> int:
    """Every rollout under $CCAB_DATA_DIR/rollouts, newest update first; an unreadable state is
    listed with its error, not skipped."""
    from datetime import datetime, timezone

    from ccab.cli.common import printable
    from ccab.rollout.state import StateError, Store, rollouts_dir

    rows = []
    base = rollouts_dir()
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        store = Store(d)
        if not store.exists():
            continue
        try:
            st = store.load()
        except StateError as exc:
            rows.append({"rollout_id": d.name, "status": "unreadable", "error": str(exc)})
            continue
        rows.append({"rollout_id": st.rollout_id, "status": st.status, "stage": st.stage, "arms": st.arms,
                     "hosts": len(st.hosts), "started_ms": st.started_ms, "updated_ms": st.updated_ms,
                     "plan": st.plan_path})
    rows.sort(key=lambda r: -(r.get("updated_ms") or 0))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print(f"no rollouts in {base} (ccab rollout start PLAN)")
        return 0

    def when(ms):
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M") if ms else "-"

    for r in rows:
        if r["status"] == "unreadable":
            print(printable(f"{r['rollout_id']:<28} unreadable: {r['error']}"))
            continue
        arms = ", ".join(f"{a} {s}" for a, s in sorted(r["arms"].items()))
        print(printable(f"{r['rollout_id']:<28} {r['status']:<12} stage {r['stage']}  {r['hosts']:>4} hosts  "
                        f"started {when(r['started_ms'])}  updated {when(r['updated_ms'])} UTC  arms: {arms}"))
    return 0


def cmd_keygen(args) -> int:
    from ccab.rollout.signing import keygen

    existing = [f for f in (args.out / f"{args.name}_ed25519_seed.hex", args.out / f"{args.name}_ed25519_public.b64")
                if f.exists()]
    if existing and not args.force:
        return _fail(f"{existing[0]} exists: a new pair would replace the key the agents trust; "
                     f"give another --out/--name, or --force to replace it", 2)
    priv, pub = keygen(args.out, args.name)
    print(f"private seed: {priv}\npublic key:   {pub}")
    return 0


@_guard
def cmd_controller_run(args) -> int:
    import signal

    from ccab.rollout.controller import load_state_plan
    from ccab.rollout.service import Service
    from ccab.rollout.state import rollouts_dir

    if _key(args) is None:
        return _fail("no signing key: --key FILE or CCAB_ROLLOUT_KEY", 2)
    if args.page_min_firing is None and args.alertmanager_config is not None:
        from ccab.rollout.service import page_min_firing_s

        try:
            args.page_min_firing = page_min_firing_s(args.alertmanager_config.read_text())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return _fail(f"--alertmanager-config {args.alertmanager_config}: {exc}", 2)
    if args.page_min_firing is not None and args.page_min_firing < 0:
        return _fail(f"--page-min-firing: must be >= 0, got {args.page_min_firing:g}", 2)

    def make(store):
        plan = load_state_plan(store)
        ctl = _controller(args, plan)
        ctl.store = store  # the service's store carries the fencing token
        return ctl

    svc = Service(rollouts_dir(), make, args.interval, say=lambda m: print(m, flush=True))
    httpd = None
    if args.metrics_addr:
        host, _, port = args.metrics_addr.rpartition(":")
        try:
            httpd = svc.serve(host or "127.0.0.1", int(port))
        except (OSError, ValueError) as exc:
            return _fail(f"cannot serve metrics on {args.metrics_addr}: {exc}; give another --metrics-addr", 1)
        print(f"metrics on http://{args.metrics_addr}/metrics, health on /healthz", flush=True)
    signal.signal(signal.SIGTERM, lambda *_a: svc.stopping.set())
    failed: list[str] = []
    try:
        failed = svc.run(once=args.once)
    except KeyboardInterrupt:
        pass
    finally:
        if httpd is not None:
            httpd.shutdown()
        svc.leader.release()
    if failed:  # --once: the loop did not do its work (another leader, Kafka down, ...)
        return fail("controller", "the loop failed: " + "; ".join(failed), 1)
    return 0
