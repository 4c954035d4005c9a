"""On-call hears of an automatic rollback (issue 28): the page of a breaker rollback reaches a
webhook receiver behind the REAL Alertmanager (Debian's binary) firing, then resolved — even when
the hosts are back on control long before the page route's group_wait. Alertmanager never notifies
an alert that resolved before its group's first notification, so the controller keeps a page
firing at least the route's group_wait + a margin (``service.page_min_firing_s``); it used to
resolve it as soon as the hosts applied control (the live canary's page lived 4 s, group_wait 30 s).

The test reads what the receiver got, not what Alertmanager lists."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from alertmanager_fixture import wait_until
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import PAGE_MIN_FIRING_S, Controller, breaker_payload
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.service import AlertmanagerPager, Service, page_group_wait_s, page_min_firing_s
from ccab.rollout.signing import load_private_key
from ccab.rollout.state import Store, now_ms
from factories import base_plan
from paths import REPO, VECTORS
from test_controller_safety import MemoryBus

TRIP = {"pop": "p1", "arm": "b1", "control_arm": "control", "metric": "retrans_pct", "ratio": 3.0, "minutes": 5,
        "max_ratio": 8.55, "treatment_pct": 4.2, "control_pct": 0.49, "first_minute": "2026-01-01 12:03:00",
        "last_minute": "2026-01-01 12:07:00", "alert_id": "d" * 20}

# the shipped routing (deploy/prometheus/alertmanager.yml) with waits a test can sit through
CONFIG = """\
route:
  receiver: sink
  group_by: [component, rollout, rollout_id, pop, arm, treatment_arm]
  group_wait: 1m
  group_interval: 10m
  repeat_interval: 24h
  routes:
    - matchers: ['severity="page"']
      receiver: pager
      group_wait: 4s
      group_interval: 2s
      repeat_interval: 4h
    - matchers: ['severity="ticket"']
      receiver: sink
receivers:
  - name: sink
  - name: pager
    webhook_configs:
      - url: "http://127.0.0.1:{port}/page"
        send_resolved: true
"""


class Receiver:
    """A pager's webhook: every notification Alertmanager delivers, in order."""

    def __init__(self):
        self.got: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.got.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def states(self, rollout: str) -> list[str]:
        return [n["status"] for n in self.got if any(a["labels"].get("rollout") == rollout for a in n["alerts"])]


def test_the_page_of_a_quick_rollback_reaches_the_receiver_firing_then_resolved(tmp_path, alertmanager_factory):
    receiver = Receiver()
    config = CONFIG.format(port=receiver.port)
    am = alertmanager_factory(config)
    min_firing_s = page_min_firing_s(config, margin_s=2)  # group_wait 4 s + 2 s
    assert min_firing_s == 6
    rid, root, bus = "r-page", tmp_path / "rollouts", MemoryBus()
    plan = plan_from_dict(base_plan(rollout_id=rid, stages=[{"name": "s1", "hosts": 2}],
                                    breakers=[{"metric": "retrans_pct", "ratio": 3, "minutes": 5}]))
    armed = [False]

    def payloads(ids):
        # as ccab.pipeline.alert_payloads gives them: the stored alert, startsAt = when it was first
        # seen (now). An older startsAt would make Alertmanager notify at once, without group_wait
        page = breaker_payload(rid, TRIP, "rolled_back")
        page["startsAt"] = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        return [page]

    def make(store, clock=now_ms):  # real time: Alertmanager's group_wait runs on the wall clock
        return Controller(plan, store, bus, load_private_key(VECTORS / "test_ed25519_seed.hex"), clock=clock,
                          pager=AlertmanagerPager(am.url), page_min_firing_s=min_firing_s,
                          analysis=Analysis(alert_payloads=payloads,
                                            breakers=lambda s, e: [dict(TRIP)] if armed[0] else []))
    make(Store(root / rid), clock=lambda: now_ms() - 10 * 60_000).start()  # started 10 min ago
    bus.apply_all()
    svc = Service(root, make, interval_s=0.5, say=lambda _m: None)
    armed[0] = True
    svc.loop_once()  # the breaker trips: b1 rolled back, paged
    st = Store(root / rid).load()
    assert st.arms["b1"] == "rolled_back" and st.pages["b1"]
    fired_ms = st.pages_fired_ms["b1"]
    bus.apply_all()  # the agents are back on control at once: well within group_wait

    def loop_until_resolved():
        svc.loop_once()
        return "resolved" in receiver.states(rid)

    wait_until(loop_until_resolved, what="the receiver got the page resolved", timeout_s=60, interval_s=0.5)
    assert receiver.states(rid)[0] == "firing", receiver.got  # the receiver heard of it while it fired
    firing = next(n for n in receiver.got if n["status"] == "firing")
    (alert,) = firing["alerts"]
    assert (alert["labels"]["rollout"], alert["labels"]["arm"], alert["labels"]["severity"]) == (rid, "b1", "page")
    resolved = [e for e in Store(root / rid).read_audit() if e["event"] == "resolved"]
    assert resolved and resolved[0]["ts_ms"] >= fired_ms + min_firing_s * 1000
    receiver.httpd.shutdown()


def test_the_default_minimum_firing_time_covers_the_shipped_page_route():
    shipped = (REPO / "deploy" / "prometheus" / "alertmanager.yml").read_text()
    assert page_group_wait_s(shipped) == 30
    assert PAGE_MIN_FIRING_S == page_min_firing_s(shipped) > page_group_wait_s(shipped)
    assert page_group_wait_s(shipped, {"severity": "ticket"}) == 60  # inherited from the root route
