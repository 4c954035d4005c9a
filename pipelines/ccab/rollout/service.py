"""``ccab controller run``: the long-running controller that drives every active rollout.

Every ``interval_s`` (at a fixed rate: a long loop does not delay the ones after it) the service
(1) takes or keeps the leader lock (:mod:`ccab.rollout.leader`); a standby only heartbeats;
(2) as leader, first evaluates the circuit breakers that are due of every running rollout
(:meth:`Controller.tick_breakers`: one rollout's long look never delays another's breaker), then
for each rollout under ``$CCAB_DATA_DIR/rollouts/`` that
is not completed or rolled back (or is, but still owes its agents a change: a rollback recorded
while Kafka was down, an open page), takes that rollout's ``lock`` (the one ``ccab rollout ...``
commands take: a person's command and the service never interleave; a rollout whose lock is
held is skipped this tick; a person's halt/rollback that finds the lock busy is recorded as a
request the tick applies first) and runs :meth:`Controller.tick`; (3) updates the metrics and the
heartbeat served on ``/metrics`` and ``/healthz``.

Killing it at any moment is safe: every state change is write-ahead (state.py), the next leader
reconciles an interrupted publish byte for byte, and the lock dies with the process.

The controller factory is injected (``make_controller(store) -> Controller``): the CLI wires the
real judge, breakers, Kafka bus and Alertmanager pager (ccab.pipeline), tests wire fakes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

from ccab.alerting.alertmanager import post_alerts, resolve
from ccab.rollout.controller import Controller
from ccab.rollout.leader import LeaderLock
from ccab.rollout.state import TERMINAL, LockBusy, StateError, Store, leader_token

STATUSES = ("running", "paused", "halted", "rolled_back", "completed")
ARM_STATES = ("active", "halted", "rolled_back", "promoted")
KEEP_TERMINAL_S = 24 * 3600


#: what a page must outlive beyond its route's group_wait (Alertmanager's flush after group_wait
#: is not instant on a loaded machine, and the controller posts at its own interval)
PAGE_MARGIN_S = 30.0


def _duration_s(text: str) -> float:
    """An Alertmanager/Prometheus duration (``30s``, ``1m30s``, ``1h``, ``500ms``) in seconds."""
    import re

    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|[smhdwy])", str(text).strip())
    if not parts or "".join(n + u for n, u in parts) != str(text).strip():
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * units[u] for n, u in parts)


def page_group_wait_s(config_text: str, labels: dict[str, str] | None = None) -> float:
    """The ``group_wait`` of the Alertmanager route a page (``labels``, default severity=page)
    takes in ``config_text`` (alertmanager.yml): the first child route whose equality matchers all
    hold, inheriting from its parent (Alertmanager's default 30 s when none says)."""
    import re

    import yaml

    labels = labels or {"severity": "page"}

    def matches(route: dict) -> bool:
        ms = list(route.get("matchers") or [])
        ms += [f'{k}="{v}"' for k, v in (route.get("match") or {}).items()]
        for m in ms:
            g = re.fullmatch(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!=|!~|=)\s*"?(.*?)"?\s*', str(m))
            if not g:
                return False
            name, op, value = g.groups()
            have = labels.get(name, "")
            ok = {"=": have == value, "!=": have != value, "=~": re.fullmatch(value, have) is not None,
                  "!~": re.fullmatch(value, have) is None}[op]
            if not ok:
                return False
        return True

    route = (yaml.safe_load(config_text) or {}).get("route") or {}
    wait = _duration_s(route.get("group_wait", "30s"))
    while True:
        child = next((r for r in route.get("routes") or [] if matches(r)), None)
        if child is None:
            return wait
        wait = _duration_s(child["group_wait"]) if "group_wait" in child else wait
        route = child


def page_min_firing_s(config_text: str, margin_s: float = PAGE_MARGIN_S) -> float:
    """How long the controller keeps a page firing at least: the page route's group_wait + margin."""
    return page_group_wait_s(config_text) + margin_s


class AlertmanagerPager:
    """The controller's pages through Alertmanager API v2: ``fire`` posts, ``resolve`` posts the
    same labels with ``endsAt`` = now. Silences are Alertmanager's: a silenced page is stored
    and resolved like any other, only its notification is suppressed."""

    def __init__(self, url: str):
        self.url = url

    def fire(self, alerts: list[dict]) -> None:
        post_alerts(self.url, alerts)

    def resolve(self, alerts: list[dict]) -> None:
        resolve(self.url, alerts)


@dataclass
class RolloutMetrics:
    status: str
    stage: int
    arms: dict[str, str]
    last_look_age_s: float
    look_due_s: float
    look_failures: int
    breakers: dict[tuple[str, str], int] = field(default_factory=dict)
    breakers_checked_s: float | None = None  # the last successful evaluation of the circuit breakers
    refusals: dict[tuple[str, str], int] = field(default_factory=dict)


class Service:
    def __init__(self, root: Path, make_controller: Callable[[Store], Controller], interval_s: float = 15.0,
                 say: Callable[[str], None] = print, clock: Callable[[], float] = time.time):
        self.root = Path(root)
        self.make_controller = make_controller
        self.interval_s = interval_s
        self.say, self.clock = say, clock
        self.leader = LeaderLock(self.root)
        self.heartbeat_s: float = 0.0
        self.rollouts: dict[str, RolloutMetrics] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    # ---------------------------------------------------------------------------------- loop
    def run(self, once: bool = False) -> list[str]:
        """Loop until stopped; with ``once``, one loop, returning what failed in it (empty: ok)."""
        while not self.stopping.is_set():
            began = time.monotonic()
            failed = self.loop_once()
            if once:
                return failed
            # fixed rate: a long loop (a look under load) does not push every later loop back
            self.stopping.wait(max(0.0, began + self.interval_s - time.monotonic()))
        return []

    def loop_once(self) -> list[str]:
        """One loop over the rollouts; returns what failed in it, one line each: not the leader
        (another replica drives the rollouts), a rollout's tick that raised (Kafka down, ...)."""
        failed: list[str] = []
        was = self.leader.is_leader
        token = self.leader.try_acquire()
        if token is not None and not was:
            self.say(f"leader (fencing token {token})")
        if self.leader.is_leader and not self.leader.still_leader():
            self.say("lost the leadership (a newer fencing token exists): standing by")
            self.leader.release()
        metrics: dict[str, RolloutMetrics] = {}
        if not self.leader.is_leader:
            failed.append(f"not the leader: another controller holds {self.root / 'leader.lock'} "
                          f"(fencing token {leader_token(self.root)}); this replica only stands by")
        else:
            dirs = [d for d in sorted(self.root.iterdir()) if (d / "state.json").exists()] if self.root.is_dir() else []
            # first every rollout's breakers that are due, then the rest (a look can take long)
            tried: set[Path] = set()
            for d in dirs:
                try:
                    if self.breakers(d):
                        tried.add(d)
                except StateError as exc:
                    if "fenced out" in str(exc):
                        break  # the loop below reports it and stands by
                except Exception:  # noqa: BLE001 - the full tick below reports it (and does not retry
                    tried.add(d)  # the breakers in this loop: they were just tried)
            for d in dirs:
                try:
                    m = self.one(d, breakers=d not in tried)
                except StateError as exc:
                    self.say(f"{d.name}: {exc}")
                    failed.append(f"{d.name}: {exc}")
                    if "fenced out" in str(exc):
                        self.leader.release()
                        break
                    continue
                except Exception as exc:  # noqa: BLE001 - one rollout's failure never stops the others
                    self.say(f"{d.name}: tick failed: {type(exc).__name__}: {exc}")
                    failed.append(f"{d.name}: tick failed: {type(exc).__name__}: {exc}")
                    continue
                if m is not None:
                    metrics[d.name] = m
        with self.lock:
            self.rollouts = metrics
            self.heartbeat_s = self.clock()
        return failed

    def breakers(self, d: Path) -> bool:
        """The circuit breakers of the rollout in ``d`` if they are due (under its lock; a person's
        command holding it: the full tick tries); whether they were tried."""
        store = Store(d, fence=self.leader.token)
        st = store.load()
        if st.status != "running" or (st.breaker_checked_ms is not None
                                      and self.clock() * 1000 - st.breaker_checked_ms < 60_000):
            return False
        ctl = self.make_controller(store)
        try:
            with store.locked():
                ctl.reload()
                for msg in ctl.tick_breakers().messages:
                    self.say(f"{d.name}: {msg}")
        except LockBusy:
            return False
        return True

    def one(self, d: Path, breakers: bool = True) -> RolloutMetrics | None:
        store = Store(d, fence=self.leader.token)
        st = store.load()
        if st.status in TERMINAL and self.clock() * 1000 - st.updated_ms > KEEP_TERMINAL_S * 1000:
            return None
        ctl = self.make_controller(store)
        statuses = None
        # a terminal rollout is ticked while it still owes the agents a change (a rollback recorded
        # while Kafka was down), an open page or an operator's request
        if st.status not in TERMINAL or ctl.owes_publish():
            try:
                with store.locked():
                    ctl.reload()
                    res = ctl.tick(breakers=breakers)
                    for msg in res.messages:
                        self.say(f"{d.name}: {msg}")
                    if res.published:
                        self.say(f"{d.name}: published {len(res.published)} assignment(s)")
            except LockBusy:
                self.say(f"{d.name}: locked by a person's command; next tick")
                ctl.reload()
        try:
            statuses = ctl.bus.agent_status() if ctl.bus is not None else []
        except Exception:  # noqa: BLE001 - metrics without agent answers
            statuses = []
        return self.measure(ctl, statuses)

    def measure(self, ctl: Controller, statuses: list[dict]) -> RolloutMetrics:
        st, plan = ctl.st, ctl.plan
        stage = plan.stages[min(st.stage, len(plan.stages) - 1)]
        now_ms = self.clock() * 1000
        since = st.last_look_ms if st.looks_done and st.last_look_ms else (st.stage_started_ms or now_ms)
        base = st.stage_applied_ms or st.stage_started_ms or now_ms
        due = ctl.look_due_at() if st.stage_applied_ms else base + stage.min_duration_minutes * 60_000
        failures = sum(1 for e in ctl.store.read_audit() if e.get("event") == "look_failed")
        m = RolloutMetrics(st.status, st.stage, dict(st.arms), max(0.0, (now_ms - since) / 1000), due / 1000, failures,
                           breakers_checked_s=st.breaker_checked_ms / 1000 if st.breaker_checked_ms else None)
        for e in ctl.store.read_audit():
            if e.get("event") in ("rollback_arm", "halt_arm") and e.get("trips"):
                for t in e["trips"]:
                    m.breakers[(t["pop"], t["arm"])] = 1
        for g in ctl.refusals(statuses):
            for pop, n in g["pops"].items():
                m.refusals[(pop, g["reason"].replace(" ", "_"))] = n
        return m

    # ---------------------------------------------------------------------------------- HTTP
    def metrics_text(self) -> str:
        with self.lock:
            hb, rollouts, leader = self.heartbeat_s, dict(self.rollouts), self.leader.is_leader
        out = ["# HELP ccab_controller_heartbeat_timestamp_seconds Unix time of the last completed loop.",
               "# TYPE ccab_controller_heartbeat_timestamp_seconds gauge",
               f"ccab_controller_heartbeat_timestamp_seconds {hb:.3f}",
               "# HELP ccab_controller_is_leader 1 while this replica drives the rollouts.",
               "# TYPE ccab_controller_is_leader gauge",
               f"ccab_controller_is_leader {1 if leader else 0}"]

        def family(name: str, kind: str, help_: str, rows: list[tuple[dict, float]]) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            for labels, v in rows:
                lab = ",".join(f'{k}="{_esc(str(val))}"' for k, val in labels.items())
                out.append(f"{name}{{{lab}}} {v:.15g}")

        family("ccab_controller_look_failures_total", "counter", "Looks that failed (the judge raised).",
               [({"rollout": r}, m.look_failures) for r, m in rollouts.items()])
        if not leader:
            return "\n".join(out) + "\n"
        family("ccab_controller_last_look_age_seconds", "gauge", "Seconds since the last look of the stage.",
               [({"rollout": r}, m.last_look_age_s) for r, m in rollouts.items()])
        family("ccab_rollout_status", "gauge", "1 for the rollout's current status.",
               [({"rollout": r, "status": s}, 1 if m.status == s else 0) for r, m in rollouts.items() for s in STATUSES])
        family("ccab_rollout_stage", "gauge", "Index of the current stage.",
               [({"rollout": r}, m.stage) for r, m in rollouts.items()])
        family("ccab_rollout_look_due_timestamp_seconds", "gauge", "Unix time of the next planned look.",
               [({"rollout": r}, m.look_due_s) for r, m in rollouts.items()])
        family("ccab_rollout_arm_state", "gauge", "1 for each treatment arm's current state.",
               [({"rollout": r, "arm": a, "state": s}, 1 if st == s else 0)
                for r, m in rollouts.items() for a, st in m.arms.items() for s in ARM_STATES])
        family("ccab_rollout_breakers_checked_timestamp_seconds", "gauge",
               "Unix time of the last successful evaluation of the rollout's circuit breakers (once a minute while running).",
               [({"rollout": r}, m.breakers_checked_s) for r, m in rollouts.items()
                if m.breakers_checked_s is not None and m.status == "running"])
        family("ccab_rollout_breaker_tripped", "gauge", "1 if a circuit breaker of the arm tripped in the PoP.",
               [({"rollout": r, "pop": p, "arm": a}, v) for r, m in rollouts.items() for (p, a), v in m.breakers.items()])
        family("ccab_rollout_agent_refusals", "gauge", "Hosts whose agent refused their current assignment.",
               [({"rollout": r, "pop": p, "reason": why}, n) for r, m in rollouts.items()
                for (p, why), n in m.refusals.items()])
        return "\n".join(out) + "\n"

    def healthy(self) -> tuple[bool, str]:
        with self.lock:
            hb = self.heartbeat_s
        age = self.clock() - hb
        ok = hb > 0 and age <= 3 * self.interval_s + 60
        role = "leader" if self.leader.is_leader else "standby"
        return ok, f"{'ok' if ok else 'stale'}: {role}, last loop {age:.0f} s ago\n"

    def serve(self, host: str, port: int) -> ThreadingHTTPServer:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path.split("?")[0] == "/metrics":
                    body, code, ctype = service.metrics_text().encode(), 200, "text/plain; version=0.0.4"
                elif self.path.split("?")[0] == "/healthz":
                    ok, text = service.healthy()
                    body, code, ctype = text.encode(), 200 if ok else 503, "text/plain"
                else:
                    body, code, ctype = b"/metrics or /healthz\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_a):
                pass

        httpd = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True, name="metrics").start()
        return httpd


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
