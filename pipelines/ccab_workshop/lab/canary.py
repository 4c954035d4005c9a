"""The live canary (issue 16, ``scripts/live-canary.sh``): a rollout driven by the controller
service on real sockets, end to end.

Per case: eight edge hosts in network namespaces behind the lab's router (tbf bottleneck), each
with nginx, a real ``ccab-collector`` (nginx log + tcp_info → Kafka) and a real ``ccab-agent``
(signed assignments from Kafka → the namespace's ``net.ipv4.tcp_congestion_control``); a client
namespace downloading from every host (consecutive 20 s streams, so new connections pick up the
current algorithm); the production loader (Kafka → embedded warehouse); the controller service
(:class:`ccab.rollout.service.Service`, wired exactly as ``ccab controller run``) with a real
Alertmanager (Debian's ``prometheus-alertmanager``) as its pager.

The plan: control = cubic, treatment = bbr, four hosts each (a host-permutation test needs 4 + 4
hosts to reach α = 0.05), one stage whose look is due ``--look-minutes`` after its hosts applied,
a page guardrail on the retransmitted share (+25 %), circuit breaker retransmits > 3× control for
``--breaker-minutes`` minutes. Every host's path loses ``--base-loss-pct`` of its packets (a real
path is never loss-free, and a retransmit ratio of 0 / 0 cannot be judged). ``faulty``: after a
baseline, nftables on the router drops a further share of the treatment hosts' packets — their
retransmits explode — and the controller must roll the treatment back by itself: the script reads
the sysctl in the namespaces until every treatment host runs cubic again and prints the minutes
from fault onset, and the page's life in Alertmanager. ``clean``: the same plan without the fault:
no breaker trips, no page; the stage's look passes and the controller promotes bbr — the script
reads the sysctl until every host runs bbr.

The embedded warehouse (chdb) can be held by one process only, so this one process runs the loader
and the controller service loop one after the other (every ``--interval`` seconds) instead of two
processes; with a ClickHouse server (``CCAB_CLICKHOUSE_URL``) they would be two services.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml
from ccab.alerting.alertmanager import list_alerts
from ccab.base.config import settings
from ccab.base.contracts import SCHEMAS
from ccab.base.schema import migrate
from ccab.base.warehouse import connect
from ccab.ingest.loader import Loader
from ccab.kafka.topics import TopicSpec, ensure_topics
from ccab_workshop.lab import segment_canary
from ccab_workshop.lab.edge import BPF_CC, Collector, Nginx, free_port, make_www, release_bpf
from ccab_workshop.lab.netns import LabError, Topology, allow_cc, in_ns
from ccab_workshop.lab.runner import LockedWarehouse, Session, _kafka, preflight
from ccab.pipeline import controller_analysis
from ccab.rollout.controller import Controller, KafkaBus, load_state_plan
from ccab.rollout.service import AlertmanagerPager, Service
from ccab.rollout.signing import keygen, load_private_key
from ccab.rollout.state import Store, rollouts_dir

HOSTS = tuple(f"h{i}" for i in range(1, 9))
AM_CONFIG = """route:
  receiver: pager
  group_by: [rollout, pop, arm]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: pager
"""


class _ObservedPager(AlertmanagerPager):
    """The controller's pager, and Alertmanager's own list right after each post (API v2): the
    page's life as on-call's tool has it, even when it fires and resolves within one controller
    loop (the watcher thread polls every second, but the loop holds the interpreter while it runs)."""

    def __init__(self, url: str, rid: str, page: dict, lock: threading.Lock):
        super().__init__(url)
        self.rid, self.page, self.lock = rid, page, lock

    def fire(self, alerts: list[dict]) -> None:
        super().fire(alerts)
        with self.lock:
            _watch_page(self.url, self.rid, self.page)

    def resolve(self, alerts: list[dict]) -> None:
        super().resolve(alerts)
        with self.lock:
            _watch_page(self.url, self.rid, self.page)


def _say(msg: str) -> None:
    print(time.strftime("%H:%M:%S ") + msg, flush=True)


def _alertmanager(workdir: Path, session: Session) -> tuple[str, subprocess.Popen]:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if not binary:
        raise LabError("prometheus-alertmanager is not installed (make setup installs it)")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(AM_CONFIG)
    port = free_port()
    proc = subprocess.Popen([binary, f"--config.file={workdir / 'alertmanager.yml'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                             f"--storage.path={workdir / 'data'}"],
                            stdout=subprocess.DEVNULL, stderr=open(workdir / "alertmanager.log", "ab"),
                            start_new_session=True)
    session.registry.add_pid(proc.pid, ["alertmanager"])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            list_alerts(url, timeout=2)
            return url, proc
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.3)
    raise LabError(f"Alertmanager did not answer on {url}; see {workdir / 'alertmanager.log'}")


def _client_plan(topo: Topology, duration_s: float, t0: float) -> dict:
    flows = []
    for label in HOSTS:
        for k in range(3):  # three parallel download slots per host, each a chain of 20 s streams
            t = 2.0 * k
            while t < duration_s:
                flows.append({"id": f"{label}-{k}-{int(t)}", "kind": "stream", "start_s": t,
                              "duration_s": min(20.0, duration_s - t), "size_bytes": 0, "rate_per_s": [],
                              "host": label, "url": f"http://{topo.host_ip[label]}/stream"})
                t += 20.0
    return {"t0": t0, "seed": 1, "flows": flows}


def _plan(rid: str, hosts: dict[str, str], breaker_minutes: int, look_minutes: int, treatment: str = "bbr") -> dict:
    return {
        "rollout_id": rid, "pops": ["lab"], "inventory": {"hosts": {"lab": list(hosts.values())}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": treatment, "cc": treatment}],
        "control_arm": "control", "design": {"seed": 16},
        "stages": [{"name": "canary", "hosts": len(hosts) // 2, "min_duration_minutes": look_minutes, "looks": 1,
                    "min_applied": 1.0}],
        "limits": {"max_hosts_per_pop_per_step": len(hosts) // 2, "min_control_hosts": len(hosts) // 2},
        "guardrails": [{"metric": "retrans_pct", "statistic": "ratio", "margin": 0.25, "severity": "page"}],
        "breakers": [{"metric": "retrans_pct", "ratio": 3, "minutes": breaker_minutes}],
        "policy": {"rollback": "rollback_arm", "halt": "halt_arm"},
    }


def run_case(case: str, args, work: Path) -> dict:
    fault = case == "faulty"
    rid = f"live-canary-{case}-{time.strftime('%H%M%S', time.gmtime())}"
    work = work / rid
    work.mkdir(parents=True)
    out: dict = {"case": case, "rollout_id": rid}
    with Session(_say) as session:
        bootstrap = _kafka(_say, session)
        t_tcp, t_http = f"ccab.live.{rid}.tcp", f"ccab.live.{rid}.http"
        t_asg, t_st = f"ccab.live.{rid}.assignments", f"ccab.live.{rid}.status"
        ensure_topics(bootstrap, {t_tcp: TopicSpec(1), t_http: TopicSpec(1), t_st: TopicSpec(1),
                                  t_asg: TopicSpec(1, {"cleanup.policy": "compact"})})
        priv, pub = keygen(work / "keys", "rollout")
        key_file = work / "keys" / "rollout_ed25519_seed.hex"
        pub_file = work / "keys" / "rollout_ed25519_public.b64"
        am_url, _am = _alertmanager(work / "alertmanager", session)
        _say(f"{case}: Alertmanager on {am_url}")

        topo = Topology(token=f"lc{os.getpid() % 10000}{case[0]}", net=200 + (os.getpid() % 40),
                        host_labels=list(HOSTS), registry=session.registry)
        session.stack.callback(topo.down)
        topo.up()
        # each host shaped on its own egress (its uplink): the arms never share a queue, so neither
        # loses packets to the other's congestion control; the bottleneck link itself is not limited
        short = topo.token.replace("-", "")[-8:]
        for i, label in enumerate(HOSTS, start=1):
            in_ns(topo.hosts[label], "tc", "qdisc", "replace", "dev", f"e{short}{i}", "root", "tbf",
                  "rate", f"{args.rate_mbit}mbit", "burst", "64k", "limit", str(args.buffer_kb * 1024))
        make_www(work / "www", [])
        names = {label: f"{rid}-{label}" for label in HOSTS}
        agents = []
        for label in HOSTS:
            ns, host = topo.hosts[label], names[label]
            hdir = work / label
            hdir.mkdir()
            in_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=cubic")
            state_file = hdir / "agent-state.json"
            log = open(hdir / "agent.log", "ab")
            p = subprocess.Popen([str(settings().agent_bin), "--brokers", bootstrap, "--assignments-topic", t_asg,
                                  "--status-topic", t_st, "--host", host, "--pop", "lab", "--netns", ns,
                                  "--public-key", str(pub_file), "--state-file", str(state_file),
                                  "--heartbeat-interval", "5s", "--metrics-addr", ""],
                                 stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            session.registry.add_pid(p.pid, ["ccab-agent"])
            agents.append(p)
            if args.treatment_cc in BPF_CC:  # a host going away drops its use of ccab's BPF algorithm
                session.stack.callback(release_bpf, host, args.treatment_cc)
            ng = Nginx(ns, topo.host_ip[label], hdir / "nginx", work / "www", session.registry)
            ng.start()
            session.stack.callback(ng.stop)
            col = Collector(ns, host, hdir / "collector", ng.access_log, state_file, bootstrap, t_tcp, t_http,
                            1000, session.registry)
            col.start()
            session.stack.callback(col.stop)

        env = dict(os.environ, CCAB_ROLLOUT_KEY=str(key_file))
        plan_file = work / "plan.yaml"
        plan_file.write_text(yaml.safe_dump(_plan(rid, names, args.breaker_minutes, args.look_minutes, args.treatment_cc)))
        # the operator starts the rollout with the CLI; from then on only the service acts
        res = subprocess.run([sys.executable, "-m", "ccab.cli", "rollout", "start", str(plan_file),
                              "--assignments-topic", t_asg, "--status-topic", t_st, "--wait-applied", "60",
                              "--reason", "live canary"], env=env, capture_output=True, text=True, timeout=300)
        if res.returncode != 0:
            raise LabError(f"ccab rollout start failed: {res.stderr.strip()[-800:]}")
        _say(f"{case}: rollout started:\n" + res.stdout.strip())
        state = Store.for_rollout(rid).load()
        treated = {h for h, v in state.hosts.items() if v.arm == args.treatment_cc}
        ns_of = {names[label]: topo.hosts[label] for label in HOSTS}
        out["treatment_hosts"] = sorted(treated)

        key = load_private_key(key_file)
        page: dict = {}
        page_lock = threading.Lock()

        def make(store: Store) -> Controller:
            p = load_state_plan(store)
            return Controller(p, store, KafkaBus(bootstrap, t_asg, t_st), key, analysis=controller_analysis(p),
                              pager=_ObservedPager(am_url, rid, page, page_lock), say=lambda m: None)

        svc = Service(rollouts_dir(), make, args.interval, say=lambda m: _say(f"{case}: controller: {m}"))
        session.stack.callback(svc.leader.release)  # the next case's service takes the lead
        wh = connect()
        session.stack.callback(wh.close)
        migrate(wh, log=lambda _m: None)
        lock = threading.Lock()
        loader = Loader(LockedWarehouse(wh, lock), bootstrap, {t_tcp: SCHEMAS["tcp_sample/1"],
                                                       t_http: SCHEMAS["http_request/1"]},
                        group=f"live-{rid}", batch_wait_s=0.5)
        loading = threading.Thread(target=loader.run, daemon=True, name="loader")
        loading.start()
        session.stack.callback(loading.join, 30)
        session.stack.callback(loader.stop)

        total_s = (args.baseline_minutes + args.fault_minutes) * 60
        if not fault:  # long enough for the stage's look, the promotion and the agents
            total_s = max(total_s, (args.look_minutes + 5) * 60)
        if args.base_loss_pct > 0:  # every host's path: the same small random loss on both arms
            ips = ", ".join(topo.host_ip[label] for label in HOSTS)
            in_ns(topo.router, "nft", "-f", "-", input=(
                f"table inet ccabbase {{\n chain lossy {{\n  type filter hook forward priority 0; policy accept;\n"
                f"  ip saddr {{ {ips} }} numgen random mod 100000 < {int(round(args.base_loss_pct * 1000))} "
                f"counter drop\n }}\n}}\n"))
            _say(f"{case}: {args.base_loss_pct}% of every host's packets dropped on the router (base loss)")
        t0 = time.time() + 2
        (work / "client.json").write_text(json.dumps(_client_plan(topo, total_s, t0)))
        client = subprocess.Popen(["ip", "netns", "exec", topo.client, sys.executable, "-m", "ccab_workshop.lab.client",
                                   str(work / "client.json"), str(work / "client.jsonl")],
                                  env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
                                  stdout=subprocess.DEVNULL, stderr=open(work / "client.log", "ab"))
        session.registry.add_pid(client.pid, ["python"])
        fault_at = None
        back_at = None
        promoted_at = None
        watching = threading.Event()

        def watch() -> None:  # what on-call sees, polled every second
            while not watching.is_set():
                with page_lock:
                    _watch_page(am_url, rid, page)
                watching.wait(1.0)
        watcher = threading.Thread(target=watch, daemon=True, name="am-watch")
        watcher.start()
        session.stack.callback(watcher.join, 5)
        session.stack.callback(watching.set)
        deadline = t0 + total_s
        _say(f"{case}: traffic from every host; treatment ({args.treatment_cc}) on {', '.join(sorted(treated))}; "
             + (f"fault after {args.baseline_minutes} min" if fault else
                f"no fault; the stage's look is due {args.look_minutes} min after its hosts applied"))
        next_tick = 0.0
        while time.time() < deadline:
            time.sleep(1.0)
            if fault and fault_at is None and time.time() >= t0 + args.baseline_minutes * 60:
                ips = ", ".join(topo.host_ip[label] for label in HOSTS if names[label] in treated)
                n = int(round(args.loss_pct * 100))
                rules = (f"table inet ccabcanary {{\n chain lossy {{\n  type filter hook forward priority 0; "
                         f"policy accept;\n  ip saddr {{ {ips} }} numgen random mod 10000 < {n} counter drop\n }}\n}}\n")
                in_ns(topo.router, "nft", "-f", "-", input=rules)
                fault_at = time.time()
                _say(f"{case}: FAULT: {args.loss_pct}% of the treatment hosts' packets dropped on the router")
            if time.time() >= next_tick:
                next_tick = time.time() + args.interval
                with lock:
                    svc.loop_once()
                ccs = {h: in_ns(ns_of[h], "sysctl", "-n", "net.ipv4.tcp_congestion_control").strip() for h in treated}
                st = Store.for_rollout(rid).load()
                with lock:
                    rows = wh.query("""SELECT arm, round(100 * sum(bytes_retrans) / greatest(sum(bytes_sent), 1), 3),
                                              count() FROM tcp_samples
                                       WHERE rollout_id = {r:String} AND ts_ms >= {a:Int64}
                                       GROUP BY arm ORDER BY arm""",
                                    params={"r": rid, "a": int((time.time() - 120) * 1000)}).rows
                _say(f"{case}: last 2 min in the warehouse: " + ", ".join(
                    f"{arm or '-'} retrans {pct}% ({n} samples)" for arm, pct, n in rows))
                if fault_at and back_at is None and all(c == "cubic" for c in ccs.values()):
                    back_at = time.time()
                    _say(f"{case}: every treatment host runs cubic again (sysctl): {ccs}")
                if not fault and st.promoted and promoted_at is None:
                    every = {h: in_ns(ns, "sysctl", "-n", "net.ipv4.tcp_congestion_control").strip()
                             for h, ns in ns_of.items()}
                    if all(c == args.treatment_cc for c in every.values()):
                        promoted_at = time.time()
                        _say(f"{case}: {st.promoted} promoted: every host runs {args.treatment_cc} (sysctl): {every}")
                _say(f"{case}: arms {st.arms}; treatment sysctl {ccs}; open pages {sum(map(len, st.pages.values()))}")
                if back_at and page.get("resolved_at"):
                    break
                if promoted_at:
                    break
                if back_at and not st.pages and any(e.get("event") == "resolved"
                                                    for e in Store.for_rollout(rid).read_audit()):
                    break
        client.terminate()
        watching.set()
        audit = list(Store.for_rollout(rid).read_audit())
        for e in audit:
            if e.get("event") == "paged":
                page.setdefault("paged_at", e["ts_ms"] / 1000)
            if e.get("event") == "resolved":
                page.setdefault("resolved_sent_at", e["ts_ms"] / 1000)
        out.update(fault_at=fault_at, back_at=back_at, promoted_at=promoted_at, t0=t0, page=page,
                   arms=Store.for_rollout(rid).load().arms,
                   audit=[{k: e.get(k) for k in ("seq", "ts_ms", "event", "reason")}
                          for e in Store.for_rollout(rid).read_audit()][-14:])
        out["looks"] = [{"window": e.get("window"), "verdicts": [
            {"decision": v.get("decision"), "reasons": v.get("reasons", [])} for v in e.get("verdicts", [])]}
            for e in audit if e.get("event") == "look"]
        if fault_at and back_at:
            out["minutes_fault_to_control"] = round((back_at - fault_at) / 60, 2)
        for p in agents:
            p.terminate()
    return out


def _watch_page(url: str, rid: str, page: dict) -> None:
    """What on-call sees: the rollout's alerts in Alertmanager (API v2), every state change with its
    time (``page["states"]``), and when they leave the active alerts (resolved: ``endsAt`` passed)."""
    try:
        alerts = list_alerts(url, {"rollout": rid}, timeout=5)
    except Exception:  # noqa: BLE001
        return
    now = time.time()
    if alerts and "fired_at" not in page:
        a = alerts[0]
        page.update(fired_at=now, labels=a["labels"], summary=a["annotations"].get("summary"),
                    runbook=a["annotations"].get("runbook"), state=a["status"]["state"], startsAt=a["startsAt"],
                    updatedAt=a.get("updatedAt"), states=[])
        _say(f"page in Alertmanager: {a['labels'].get('alertname')} {page['summary']!r} (next: {page['runbook']})")
    if alerts:
        a = alerts[0]
        state = a["status"]["state"]
        if not page["states"] or page["states"][-1][1] != state:
            page["states"].append([now, state])
            _say(f"page in Alertmanager: state {state} (startsAt {a['startsAt']}, endsAt {a.get('endsAt')})")
        page["last_endsAt"] = a.get("endsAt")
    if not alerts and "fired_at" in page and "resolved_at" not in page:
        page["resolved_at"] = now
        _say("page resolved in Alertmanager (endsAt passed: no longer among the active alerts)")


def page_life(p: dict) -> list[str]:
    """The page's life as printed: created (posted, listed), firing (its states), resolved."""
    hms = lambda t: time.strftime("%H:%M:%S", time.gmtime(t))  # noqa: E731
    out = [f"created: posted by the controller {hms(p['paged_at'])} (Alertmanager API v2)"
           + (f"; listed by Alertmanager {hms(p['fired_at'])}, startsAt {p.get('startsAt')}, "
              f"updatedAt {p.get('updatedAt')}" if p.get("fired_at") else "; never listed")]
    states = p.get("states") or []
    for i, (t, state) in enumerate(states):
        until = states[i + 1][0] if i + 1 < len(states) else p.get("resolved_at")
        out.append(f"{'firing' if state == 'active' else state}: state {state} from {hms(t)}"
                   + (f" to {hms(until)}" if until else ""))
    if p.get("resolved_sent_at"):
        out.append(f"resolved: endsAt sent {hms(p['resolved_sent_at'])} once every treatment host had applied "
                   f"control" + (f"; gone from the active alerts {hms(p['resolved_at'])} (open "
                                 f"{(p['resolved_at'] - p['fired_at']) / 60:.1f} min in Alertmanager)"
                                 if p.get("resolved_at") and p.get("fired_at") else "; still listed"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccab_workshop.lab.canary", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=("faulty", "clean", "both", "segment"), default="both",
                    help="segment: a plan targeting access:mobile, the socket policy on real sockets "
                         "(ccab_workshop.lab.segment_canary; not part of both)")
    ap.add_argument("--segment-networks", type=int, default=0, metavar="N",
                    help="segment: N more mobile and N fixed networks in the dictionary, so access:mobile has N+1 "
                         "prefixes (over ~700: a signed prefix set and assignment/3; default: 0)")
    ap.add_argument("--traffic-minutes", type=float, default=4.0,
                    help="segment: minutes of downloads after the policy applied (default: 4)")
    ap.add_argument("--breaker-minutes", type=int, default=5, help="the plan's breaker window (default: 5)")
    ap.add_argument("--baseline-minutes", type=float, default=2.0, help="traffic before the fault (default: 2)")
    ap.add_argument("--fault-minutes", type=float, default=9.0,
                    help="longest wait after the fault for the rollback (default: 9)")
    ap.add_argument("--loss-pct", type=float, default=10.0, help="treatment packets dropped (default: 10)")
    ap.add_argument("--base-loss-pct", type=float, default=0.2,
                    help="every host's packets dropped, both arms and cases (default: 0.2)")
    ap.add_argument("--look-minutes", type=int, default=10,
                    help="the stage's min_duration_minutes: its look is due this long after its hosts applied "
                         "(default: 10)")
    ap.add_argument("--buffer-kb", type=int, default=4096, help="uplink queue limit, KiB (default: 4096)")
    ap.add_argument("--rate-mbit", type=float, default=30.0, help="each host's uplink rate (default: 30)")
    ap.add_argument("--interval", type=float, default=15.0, help="controller loop interval, s (default: 15)")
    ap.add_argument("--out", type=Path, default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--treatment-cc", default="bbr", choices=("bbr", "bbr2", "bbr3", "vivace"),
                    help="the treatment arm's algorithm (default: bbr); bbr2/bbr3/vivace on a kernel without "
                         "them are ccab's BPF ones, loaded by the agents (rollout/bpf/cc)")
    args = ap.parse_args(argv)
    preflight()
    allow_cc(["cubic", "bbr"])
    work = (args.out or Path(tempfile.mkdtemp(prefix="ccab-live-canary-"))).absolute()
    work.mkdir(parents=True, exist_ok=True)
    if args.case == "segment":
        return segment_canary.main(args, work)
    results = []
    for case in (("faulty", "clean") if args.case == "both" else (args.case,)):
        r = run_case(case, args, work)
        results.append(r)
        _say(f"== {case}: arms {r['arms']}")
        if case == "faulty":
            if r.get("minutes_fault_to_control") is not None:
                _say(f"== faulty: {r['minutes_fault_to_control']:.2f} min from fault onset to the last treatment "
                     f"host back on control (breaker {args.breaker_minutes} min; goal <= {args.breaker_minutes + 2})")
            else:
                _say("== faulty: the treatment was NOT rolled back in time")
        if case == "clean":
            if r.get("promoted_at"):
                _say(f"== clean: PROMOTED: {args.treatment_cc} on every host (sysctl) {(r['promoted_at'] - r['t0']) / 60:.2f} min "
                     f"after traffic started (the stage's look is due {args.look_minutes} min after its hosts "
                     f"applied)")
            else:
                _say("== clean: NOT promoted")
        p = r.get("page") or {}
        if p.get("paged_at"):
            for line in page_life(p):
                _say(f"== {case}: page {line}")
            if p.get("labels"):
                _say(f"   labels {p['labels']}")
                _say(f"   summary: {p.get('summary')}\n   runbook: {p.get('runbook')}")
        else:
            _say(f"== {case}: no page")
        for lk in r.get("looks", []):
            for v in lk["verdicts"]:
                _say(f"== {case}: look on {'..'.join(lk['window'] or [])}: judge {v['decision'].upper()}")
                for reason in v["reasons"]:
                    _say(f"     - {reason[:400]}")
        for e in r["audit"]:
            at = time.strftime("%H:%M:%S", time.gmtime(e["ts_ms"] / 1000)) if e.get("ts_ms") else "?"
            _say(f"   [{e['seq']}] {at} {e['event']}: {(e['reason'] or '')[:400]}")
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    ok = all((r["case"] == "faulty" and r.get("minutes_fault_to_control") is not None
              and r["page"].get("resolved_sent_at"))
             or (r["case"] == "clean" and r["arms"].get(args.treatment_cc) == "promoted" and r.get("promoted_at")
                 and not r["page"]) for r in results)
    _say(f"results: {work / 'results.json'}; {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
