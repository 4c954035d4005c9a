"""The live canary's segment case (issue 32, ``scripts/live-canary.sh --case segment``): a rollout
that targets a client segment, on real sockets.

Eight edge hosts in network namespaces behind the lab's router, each with nginx started inside a
cgroup of its own, ``ccab-collector`` (tcp_info, close-time ``tcp_conn/1`` records with
``policy_generation`` from the socket policy's pinned map) and ``ccab-agent`` with
``--sockpolicy-cgroup`` (the BPF sock_ops program attached to that host's nginx cgroup, pinned on
a bpffs private to the run). One client namespace whose interface holds an address in a "mobile"
prefix and one in a "fixed" prefix; the networks dictionary says which is which.

The plan: control = cubic, treatment = bbr, four hosts each, one stage with
``segment: access:mobile``. ``ccab rollout start`` resolves the segment to its prefixes from the
networks table and publishes signed ``assignment/2`` records to the treated hosts (host default
cubic, the mobile prefix → bbr) and ``assignment/1`` (cubic) to the control hosts. With
``--segment-networks N`` the dictionary holds N more mobile (and fixed) networks, so the segment is
N+1 prefixes: past ~700 the controller publishes them as a signed ``prefix_set/1`` on the run's
prefix-set topic and sends ``assignment/3`` records naming it; the agents fetch and verify it. Then the client
downloads from every host from both addresses (each download a new connection, rate-limited to
last about 3 s so the collector's poller sees its algorithm). Printed per treated host, from the
warehouse's ``tcp_conns`` (connections that closed after the policy applied):

    segment: mobile on treatment A/B, fixed on control C/D

A = mobile connections that ran bbr with a ``policy_generation``, B = mobile connections; C = fixed
connections that ran cubic with none, D = fixed connections (goal A = B and C = D). Then the judge
the controller uses (the segment's guardrails, the rest as guardrails, the ``segment_applied``
gate) over the window, and its verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from datetime import datetime, timezone

import yaml
from ccab.base.config import settings
from ccab.base.contracts import SCHEMAS
from ccab.base.schema import migrate
from ccab.base.warehouse import connect
from ccab.cohorts import networks as nw
from ccab.ingest.loader import Loader
from ccab.kafka.topics import TopicSpec, ensure_topics
from ccab_workshop.lab.edge import Collector, Nginx, make_www, nginx_config
from ccab_workshop.lab.netns import LabError, Topology, in_ns, sh
from ccab_workshop.lab.runner import LockedWarehouse, Session, _kafka
from ccab.pipeline import controller_judge, open_warehouse
from ccab.rollout.plan import load_plan
from ccab.rollout.signing import keygen
from ccab.rollout.state import Store

HOSTS = tuple(f"h{i}" for i in range(1, 9))  # 4 + 4: a host-permutation test can reach α = 0.05
STREAM_BYTES = 3 << 20  # each download: 3 MiB at 1 MiB/s, a new connection every time


def _say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


def _cgroup_root() -> Path:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        f = line.split()
        if len(f) > 2 and f[2] == "cgroup2":
            return Path(f[1])
    raise LabError("no cgroup v2 hierarchy mounted (the socket policy attaches to a cgroup v2)")


class CgroupNginx(Nginx):
    """nginx started inside its own cgroup (its master and workers: the listening socket and
    every accepted connection belong to it), so a sock_ops program decides only its connections."""

    def __init__(self, *a, cgroup: Path, **k):
        super().__init__(*a, **k)
        self.cgroup = cgroup

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self._config())
        sh("sh", "-c", f'echo $$ > {self.cgroup}/cgroup.procs && exec ip netns exec "$0" nginx -p "$1" -c "$2"',
           self.ns, str(self.root), str(self.conf))
        for _ in range(50):
            if self.pid_file.exists() and self.pid_file.read_text().strip():
                self.registry.add_pid(int(self.pid_file.read_text()), ["nginx"])
                return
            time.sleep(0.05)
        raise LabError(f"nginx in {self.ns} did not write its pid file; see {self.root}/error.log")

    def _config(self) -> str:
        return nginx_config(self.root, self.access_log, f"{self.ip}:80 backlog=1024", self.www)


def _rmdir_later(cg: Path) -> None:
    """Remove a host's cgroup once nginx's processes have left it (a graceful stop takes a moment)."""
    for _ in range(100):
        try:
            cg.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    _say(f"segment: cgroup {cg} still busy: left behind")


def _plan(rid: str, hosts: dict[str, str], look_minutes: int) -> dict:
    return {
        "rollout_id": rid, "pops": ["lab"], "inventory": {"hosts": {"lab": list(hosts.values())}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr", "cc": "bbr"}],
        "control_arm": "control", "design": {"seed": 32},
        "stages": [{"name": "mobile", "hosts": len(hosts) // 2, "min_duration_minutes": look_minutes,
                    "looks": 1, "min_applied": 1.0, "segment": "access:mobile"}],
        "limits": {"max_hosts_per_pop_per_step": len(hosts) // 2, "min_control_hosts": len(hosts) // 2},
        "guardrails": [{"metric": "retrans_pct", "statistic": "ratio", "margin": 0.25, "severity": "page"}],
        "breakers": [],
    }


def _filler(n: int) -> list:
    """n more mobile networks and n fixed ones (/24s outside the lab's 10.x), so that access:mobile
    is a real segment's size: over ~700 prefixes it no longer fits one assignment record and goes
    out as a signed prefix set (assignment/3)."""
    out = []
    for i in range(n):
        out.append(nw.Network(f"{11 + i // 65536}.{(i // 256) % 256}.{i % 256}.0/24", 64603, "Filler mobile", "JP",
                              "mobile"))
        out.append(nw.Network(f"{51 + i // 65536}.{(i // 256) % 256}.{i % 256}.0/24", 64604, "Filler fixed", "JP",
                              "fixed"))
    return out


def _download_loop(ns: str, src: str, url: str, until: float, log) -> None:
    while time.time() < until:
        subprocess.run(["ip", "netns", "exec", ns, "curl", "-s", "-o", "/dev/null", "--interface", src,
                        "-r", f"0-{STREAM_BYTES - 1}", "--limit-rate", "1M", "--max-time", "20", url],
                       stdout=subprocess.DEVNULL, stderr=log)


def run(args, work: Path) -> dict:
    rid = f"live-canary-segment-{time.strftime('%H%M%S', time.gmtime())}"
    work = work / rid
    work.mkdir(parents=True)
    out: dict = {"case": "segment", "rollout_id": rid}
    with Session(_say) as session:
        bootstrap = _kafka(_say)
        t_tcp, t_http, t_conn = f"ccab.live.{rid}.tcp", f"ccab.live.{rid}.http", f"ccab.live.{rid}.conn"
        t_asg, t_st = f"ccab.live.{rid}.assignments", f"ccab.live.{rid}.status"
        t_sets = f"ccab.live.{rid}.prefix_sets"
        ensure_topics(bootstrap, {t_tcp: TopicSpec(1), t_http: TopicSpec(1), t_conn: TopicSpec(1), t_st: TopicSpec(1),
                                  t_asg: TopicSpec(1, {"cleanup.policy": "compact"}),
                                  t_sets: TopicSpec(1, {"cleanup.policy": "compact", "max.message.bytes": "1048576"})})
        keygen(work / "keys", "rollout")
        key_file = work / "keys" / "rollout_ed25519_seed.hex"
        pub_file = work / "keys" / "rollout_ed25519_public.b64"

        topo = Topology(token=f"lc{os.getpid() % 10000}s", net=200 + (os.getpid() % 40),
                        host_labels=list(HOSTS), registry=session.registry)
        session.stack.callback(topo.down)
        topo.up()
        short = topo.token.replace("-", "")[-8:]
        for i, label in enumerate(HOSTS, start=1):
            in_ns(topo.hosts[label], "tc", "qdisc", "replace", "dev", f"e{short}{i}", "root", "tbf",
                  "rate", f"{args.rate_mbit}mbit", "burst", "64k", "limit", str(args.buffer_kb * 1024))
        # the client's two networks: a "mobile" and a "fixed" prefix on its link to the router
        mobile_net, fixed_net = f"10.{topo.net}.251.0/24", f"10.{topo.net}.252.0/24"
        src = {"mobile": f"10.{topo.net}.251.2", "fixed": f"10.{topo.net}.252.2"}
        for net, ip in ((mobile_net, src["mobile"]), (fixed_net, src["fixed"])):
            in_ns(topo.client, "ip", "addr", "add", f"{ip}/24", "dev", topo.client_dev)
            in_ns(topo.router, "ip", "route", "add", net, "dev", topo.bottleneck_dev)
        make_www(work / "www", [])

        # a bpffs of this run's own for the agents' pins (gone, and the programs detached, at the end)
        bpffs = work / "bpffs"
        bpffs.mkdir()
        sh("mount", "-t", "bpf", "bpf", str(bpffs))
        session.stack.callback(sh, "umount", "-l", str(bpffs), check=False)
        cg_root = _cgroup_root()
        names = {label: f"{rid}-{label}" for label in HOSTS}
        agents, cgroups = [], []
        for label in HOSTS:
            ns, host = topo.hosts[label], names[label]
            hdir = work / label
            hdir.mkdir()
            cg = cg_root / f"ccab-lab-{topo.token}-{label}"
            cg.mkdir()
            cgroups.append(cg)
            session.stack.callback(_rmdir_later, cg)
            in_ns(ns, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=cubic")
            state_file = hdir / "agent-state.json"
            pin = bpffs / label
            log = open(hdir / "agent.log", "ab")
            p = subprocess.Popen([str(settings().agent_bin), "--brokers", bootstrap, "--assignments-topic", t_asg,
                                  "--status-topic", t_st, "--host", host, "--pop", "lab", "--netns", ns,
                                  "--public-key", str(pub_file), "--state-file", str(state_file),
                                  "--heartbeat-interval", "5s", "--metrics-addr", "",
                                  "--sockpolicy-cgroup", str(cg), "--sockpolicy-pin-dir", str(pin),
                                  "--prefix-sets-topic", t_sets],
                                 stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            session.registry.add_pid(p.pid, ["ccab-agent"])
            agents.append(p)
            ng = CgroupNginx(ns, topo.host_ip[label], hdir / "nginx", work / "www", session.registry, cgroup=cg)
            ng.start()
            session.stack.callback(ng.stop)
            col = Collector(ns, host, hdir / "collector", ng.access_log, state_file, bootstrap, t_tcp, t_http,
                            500, session.registry, topic_conn=t_conn)
            col.cmd += ["--close-capture-sockpolicy-pin-dir", str(pin)]
            col.start()
            session.stack.callback(col.stop)

        # who the clients are: the networks dictionary (the controller resolves the segment from it)
        wh = connect()
        migrate(wh, log=lambda _m: None)
        nw.load(wh, [nw.Network(mobile_net, 64601, "Lab mobile", "JP", "mobile"),
                     nw.Network(fixed_net, 64602, "Lab fixed", "JP", "fixed")] + _filler(args.segment_networks),
                "live-canary", "ccab")
        wh.close()

        env = dict(os.environ, CCAB_ROLLOUT_KEY=str(key_file))
        plan_file = work / "plan.yaml"
        plan_file.write_text(yaml.safe_dump(_plan(rid, names, args.look_minutes)))
        res = subprocess.run([sys.executable, "-m", "ccab.cli", "rollout", "start", str(plan_file),
                              "--assignments-topic", t_asg, "--status-topic", t_st, "--prefix-sets-topic", t_sets,
                              "--wait-applied", "180",
                              "--reason", "live canary: segment"], env=env, capture_output=True, text=True,
                             timeout=300)
        if res.returncode != 0:
            raise LabError(f"ccab rollout start failed: {res.stderr.strip()[-800:]}")
        _say("segment: rollout started:\n" + res.stdout.strip())
        state = Store.for_rollout(rid).load()
        treated = sorted(h for h, v in state.hosts.items() if v.arm == "bbr")
        rec = {h: v.record for h, v in state.hosts.items()}
        for h in treated:
            _say(f"segment: {h}: {rec[h]['schema']} cc {rec[h]['cc']}, policy {json.dumps(rec[h].get('policy'))}")
        applied_ms = int(time.time() * 1000)  # the rollout start waited until every host applied
        out["treatment_hosts"] = treated

        wh = connect()
        session.stack.callback(wh.close)
        lock = threading.Lock()
        loader = Loader(LockedWarehouse(wh, lock), bootstrap, {t_tcp: SCHEMAS["tcp_sample/1"], t_http: SCHEMAS["http_request/1"],
                                        t_conn: SCHEMAS["tcp_conn/1"]}, group=f"live-{rid}", batch_wait_s=0.5)
        loading = threading.Thread(target=loader.run, daemon=True, name="loader")
        loading.start()
        session.stack.callback(loading.join, 30)
        session.stack.callback(loader.stop)

        until = time.time() + args.traffic_minutes * 60
        clog = open(work / "client.log", "ab")
        threads = [threading.Thread(target=_download_loop, daemon=True,
                                    args=(topo.client, src[kind], f"http://{topo.host_ip[label]}/stream",
                                          until, clog))
                   for label in HOSTS for kind in ("mobile", "fixed")]
        for t in threads:
            t.start()
        _say(f"segment: {len(threads)} download loops (each host, from {src['mobile']} (mobile) and "
             f"{src['fixed']} (fixed)) for {args.traffic_minutes} min")
        for t in threads:
            t.join()
        time.sleep(3)  # the last connections' close records
        deadline = time.time() + 60
        count = "SELECT count() FROM tcp_conns WHERE rollout_id = {r:String}"
        while time.time() < deadline:  # the loader catches up with the close records
            with lock:
                n = wh.query(count, params={"r": rid}).scalar()
            time.sleep(5)
            with lock:
                if wh.query(count, params={"r": rid}).scalar() == n:
                    break
        loader.stop()
        loading.join(30)

        rows = wh.query(f"""
            SELECT host, {nw.access_sql()} AS access,
                   countIf(cc = 'bbr' AND policy_generation IS NOT NULL) AS treated,
                   countIf(cc = 'cubic' AND policy_generation IS NULL) AS control,
                   count() AS n
            FROM tcp_conns
            WHERE rollout_id = {{r:String}} AND ts_ms > {{t:Int64}}
            GROUP BY host, access ORDER BY host, access""", params={"r": rid, "t": applied_ms}).rows
        by = {(h, a): (int(t), int(c), int(n)) for h, a, t, c, n in rows}
        out["per_host"] = {}
        for h in treated:
            a, _, b = by.get((h, "mobile"), (0, 0, 0))
            _, c, d = by.get((h, "fixed"), (0, 0, 0))
            line = f"segment: mobile on treatment {a}/{b}, fixed on control {c}/{d}"
            out["per_host"][h] = line
            print(f"{h}: {line}", flush=True)
        for h in sorted(set(names.values()) - set(treated)):
            _, c, d = by.get((h, "mobile"), (0, 0, 0))
            _, c2, d2 = by.get((h, "fixed"), (0, 0, 0))
            _say(f"{h} (control): mobile on control {c}/{d}, fixed on control {c2}/{d2}")
        wh.close()

        # the judge the controller runs at its look, over the window since the policy applied
        plan = load_plan(Store.for_rollout(rid).plan_file)
        w0 = datetime.fromtimestamp(applied_ms / 1000, tz=timezone.utc)
        verdicts = controller_judge(plan)(w0, datetime.now(timezone.utc), 1, 1)
        out["verdicts"] = []
        for v in verdicts:
            _say(f"segment: judge {v.treatment_arm} vs {v.control_arm} on access:mobile: {v.decision.upper()}")
            for r in v.reasons:
                _say(f"     - {r[:400]}")
            out["verdicts"].append({"arm": v.treatment_arm, "decision": v.decision, "reasons": list(v.reasons)})
        with open_warehouse() as wh2:
            gates = wh2.query("""SELECT gate, arm, host, status, value, detail FROM judge_gates
                                 WHERE rollout_id = {r:String} AND gate IN ('segment_applied', 'cc_compliance')
                                 ORDER BY gate, host""", params={"r": rid}).rows
        for g in gates:
            _say(f"segment: gate {g[0]} {g[2]} ({g[1]}): {g[3]} {g[4]:.3f}: {g[5]}")
        out["gates"] = [list(g) for g in gates]
        with open_warehouse() as wh3:
            guard = wh3.query("""SELECT treatment_arm, metric, statistic, segment, estimate, p_value, outcome
                                 FROM judge_results WHERE rollout_id = {r:String} AND role = 'guardrail'
                                 ORDER BY segment""", params={"r": rid}).rows
        for r in guard:
            _say(f"segment: guardrail {r[1]} {r[2]} on {r[3]}: estimate {r[4]:+.3f}, p {r[5]:.3g}, {r[6]}")
        for p in agents:
            p.terminate()
        for p in agents:
            p.wait(10)
    return out


def main(args, work: Path) -> int:
    """``--case segment``: run it, print the per-host lines and the verdict; 0 when A = B and C = D
    on every treated host (with connections of both kinds)."""
    r = run(args, work)
    (work / "results-segment.json").write_text(json.dumps(r, indent=1, default=str))
    ok = bool(r.get("per_host")) and all(_balanced(line) for line in r["per_host"].values())
    for h, line in sorted(r.get("per_host", {}).items()):
        _say(f"== {h}: {line}")
    for v in r.get("verdicts", []):
        _say(f"== judge ({v['arm']} on access:mobile): {v['decision'].upper()}")
    _say(f"results: {work / 'results-segment.json'}; {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


def _balanced(line: str) -> bool:
    """'segment: mobile on treatment A/B, fixed on control C/D' with A = B > 0 and C = D > 0."""
    nums = [p for p in line.replace(",", " ").split() if "/" in p]
    (a, b), (c, d) = (tuple(map(int, x.split("/"))) for x in nums)
    return a == b > 0 and c == d > 0
