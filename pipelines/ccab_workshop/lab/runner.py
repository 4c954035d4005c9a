"""One ``ccab lab run``: every case of an experiment (× repeats) on fresh namespaces, the records
through Kafka and the loader into the warehouse, then the analysis (SQL) into the run directory.

Run directory::

    run.json        experiment YAML, seed, kernel (uname -r), algorithms available/unavailable,
                    delay emulation, agent setter, per case: hosts, bottleneck, windows, counters
    results.json    per case: per-flow series and windows, Jain, collapses, classes; summaries
    cases/<case>.r<k>/   plan.json, client.jsonl, per host nginx/ and collector/ dirs
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import threading
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from ccab.base.chtime import HOUR
from ccab.base.config import settings
from ccab.base.contracts import SCHEMAS
from ccab.base.schema import migrate
from ccab.base.warehouse import connect
from ccab.cohorts.job import run_window
from ccab.ingest.loader import Loader
from ccab_workshop.kafka import broker
from ccab.kafka.topics import TopicSpec, ensure_topics
from ccab_workshop.lab import analysis, spec
from ccab_workshop.lab.edge import Collector, Nginx, apply_cc, bpf_loadable, make_www, metric_sum, release_bpf
from ccab_workshop.lab.netns import (LabError, Link, Registry, Topology, _kill_pid, allow_cc, available_cc, delete_ns,
                            link_binary, link_counters, probe_nft, probe_qdisc, sh, sweep_leftovers)
from ccab_workshop.lab.spec import Case, Experiment

MTU = 1514


def preflight() -> dict:
    """What this machine offers; LabError naming what is missing."""
    if os.geteuid() != 0:
        raise LabError("ccab lab run needs root (network namespaces, tc, nftables, nginx); run it with sudo")
    missing = [t for t in ("ip", "tc", "nginx") if not shutil.which(t)]
    if missing:
        raise LabError(f"missing tools: {', '.join(missing)} (make setup installs nginx-light, iproute2, nftables)")
    return {
        "kernel": platform.release(),
        "cc_available": available_cc(),
        "cc_bpf": bpf_loadable(available_cc()),
        "netem": probe_qdisc("netem", "delay", "1ms"),
        "fq": probe_qdisc("fq"),
        "nftables": probe_nft(),
        "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
    }


class Session:
    """Cleanup that also runs on SIGTERM/SIGHUP/Ctrl-C and at interpreter exit."""

    def __init__(self, log):
        self.log = log
        self.registry = Registry()
        self.stack = ExitStack()
        self._old = {}

    def __enter__(self):
        sweep_leftovers(self.log)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._raise)
        atexit.register(self.close)
        return self

    def _raise(self, signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def close(self):
        try:
            self.stack.close()
        finally:

            for pid, expect in list(self.registry.pids):
                _kill_pid(int(pid), tuple(expect))
            for ns in list(self.registry.namespaces):
                delete_ns(ns)
            self.registry.remove()

    def __exit__(self, *exc):
        self.close()
        for sig, old in self._old.items():
            signal.signal(sig, old)
        atexit.unregister(self.close)
        return False


class LockedWarehouse:
    """A warehouse whose every call takes ``lock`` (the live canary's loader thread and its main
    thread share one warehouse connection under one lock)."""

    def __init__(self, wh, lock: threading.Lock):
        self._wh, self._lock = wh, lock

    def __getattr__(self, name):
        attr = getattr(self._wh, name)
        if not callable(attr):
            return attr

        def call(*a, **k):
            with self._lock:
                return attr(*a, **k)
        return call


def _kafka(log, session: "Session | None" = None) -> str:
    """The bootstrap servers: the data dir's running broker (reused, left running) or a broker
    started here — on CCAB_KAFKA_PORT, or on a free port when another data dir's broker holds it —
    and stopped when ``session`` closes: what a run starts for itself it stops."""
    cfg = settings()
    if not cfg.embedded_kafka or broker.is_running():
        return broker.up(timeout_s=120, progress=lambda m: None) if cfg.embedded_kafka else cfg.bootstrap_servers
    port = cfg.kafka_port
    if not (broker._port_is_free(port) and broker._port_is_free(port + 1)):  # another data dir's broker
        port = broker.find_free_port_pair()
    log(f"lab: starting a Kafka broker for this run on 127.0.0.1:{port} (stopped at the end)")
    bootstrap = broker.up(port=port, timeout_s=120, progress=lambda m: None)
    if session is not None:
        session.stack.callback(broker.down, progress=lambda m: None)
    return bootstrap


def run(exp: Experiment, out_dir: Path, repeat: int = 1, seed: int | None = None, log=print,
        keep_topics: bool = False) -> Path:
    seed = exp.seed if seed is None else seed
    env = preflight()
    offered = env["cc_available"] + env["cc_bpf"]  # the kernel's, and ccab's BPF ones the agent loads
    unavailable = [a for a in exp.algorithms if a not in offered]
    runnable = [c for c in exp.cases if set(c.algorithms) <= set(offered)]
    skipped = [c.name for c in exp.cases if c not in runnable]
    for a in unavailable:
        log(f"lab: algorithm {a!r} is not offered by this kernel ({env['kernel']}: "
            f"{' '.join(env['cc_available'])}): its cases are reported as unavailable, not run")
    if not runnable:
        raise LabError(f"no case of {exp.name} can run: algorithms {unavailable} unavailable")
    tbf_cases = [c for c in runnable if c.bottleneck["path"] == "tbf"]
    link_cases = [c for c in runnable if c.bottleneck["path"] == "link"]
    if any(float(c.bottleneck["loss_pct"]) > 0 for c in tbf_cases) and not env["nftables"]:
        raise LabError("random loss on path: tbf needs nftables (apt-get install nftables; make setup does it)")
    if link_cases and link_binary() is None:
        raise LabError("bin/ccab-link is not built (make setup builds it); or run with --path tbf (no delay)")
    if tbf_cases and not env["netem"]:
        log("lab: netem is not available on this kernel: no added delay; base RTT = the veth path "
            "(~0.1 ms) plus queueing, and buffers are sized in BDPs of the nominal rtt_ms")
    # ccab's BPF algorithms are not registered yet (the agent loads them) and allow themselves
    allow_cc(sorted({a for c in runnable for a in c.algorithms} - set(env["cc_bpf"])))

    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-s{seed}"
    rollout_id = f"{exp.name}-{run_id}"
    run_dir = (out_dir / rollout_id).absolute()
    (run_dir / "cases").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    meta = {
        "schema": "ccab-lab-run/1", "experiment": exp.name, "kind": exp.kind, "description": exp.description,
        "rollout_id": rollout_id, "pop": "lab", "run_id": run_id, "seed": seed, "repeat": repeat,
        "kernel": env["kernel"], "uname": " ".join(platform.uname()), "environment": env,
        "algorithms": exp.algorithms, "algorithms_unavailable": unavailable, "cases_unavailable": skipped,
        "delay_emulation": _delay_emulation(runnable, env),
        "sample_interval_ms": exp.sample_interval_ms, "yaml": exp.source,
        "collapse": {"share_of_fair": exp.collapse_share, "min_s": exp.collapse_min_s},
        "started_at": time.time(), "cases": [],
    }
    _write_json(run_dir / "run.json", meta)


    with Session(log) as session:
        bootstrap = _kafka(log, session)
        topic_tcp, topic_http = f"ccab.lab.{rollout_id}.tcp", f"ccab.lab.{rollout_id}.http"
        topic_conn = f"ccab.lab.{rollout_id}.conn"
        ensure_topics(bootstrap, {t: TopicSpec(partitions=1) for t in (topic_tcp, topic_http, topic_conn)})
        meta["kafka"] = {"bootstrap": bootstrap, "topics": [topic_tcp, topic_http, topic_conn]}
        sizes = sorted({f.size_bytes for c in runnable for f in c.flows if f.size_bytes})
        make_www(run_dir / "www", sizes)
        generation = 0
        for rep in range(repeat):
            for case in runnable:
                generation += 1
                log(f"lab: {exp.name} case {case.name} (repeat {rep + 1}/{repeat}, {case.duration_s:.0f} s)")
                info = run_case(case, rep, exp, run_dir, rollout_id, generation, bootstrap, topic_tcp, topic_http,
                                env, session, rng, seed, topic_conn)
                meta["cases"].append(info)
                _write_json(run_dir / "run.json", meta)
        meta["finished_traffic_at"] = time.time()
        log("lab: loading Kafka → warehouse")
        meta["load"] = load(bootstrap, [topic_tcp, topic_http, topic_conn], f"ccab-lab-{rollout_id}")
        meta["cohorts"] = cohort_rollup(rollout_id, log)
        results = analyze(meta, exp, run_dir)
        _write_json(run_dir / "results.json", results)
        meta["rows"] = results["rows"]
        if not keep_topics:
            _delete_topics(bootstrap, [topic_tcp, topic_http, topic_conn])
    meta["finished_at"] = time.time()
    _write_json(run_dir / "run.json", meta)
    return run_dir


def _delay_emulation(cases: list[Case], env: dict) -> str:
    paths = {c.bottleneck["path"] for c in cases}
    parts = []
    if "link" in paths:
        parts.append("ccab-link")
    if "tbf" in paths:
        parts.append("netem" if env["netem"] else "none (path tbf, no netem on this kernel)")
    return " + ".join(parts)


def trace_file(trace, cdir: Path, base_dir: str) -> Path:
    """The case's Mahimahi trace: a file (relative to the YAML's directory), or generated by
    ``ccab-link gen-trace`` from a mapping of its options (``duration_s: 60`` → ``--duration-s 60``)."""
    if isinstance(trace, str):
        p = Path(trace) if Path(trace).is_absolute() else Path(base_dir) / trace
        if not p.exists():
            raise LabError(f"trace file {p} not found")
        return p
    args = []
    for k, v in trace.items():
        args += [f"--{k.replace('_', '-')}", ",".join(str(x) for x in v) if isinstance(v, list) else str(v)]
    out = cdir / "link.trace"
    res = subprocess.run([str(link_binary()), "gen-trace", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise LabError(f"ccab-link gen-trace {' '.join(args)}: {res.stderr.strip()[-500:]}")
    out.write_text(res.stdout)
    (cdir / "link.trace.summary").write_text(res.stderr)
    return out


def trace_mean_bps(path: Path) -> float:
    """Mean capacity of a Mahimahi trace: 1500 bytes per line over the period (the last timestamp)."""
    ts = [int(l) for l in path.read_text().split()]
    if not ts or ts[-1] <= 0:
        raise LabError(f"trace {path}: empty or zero period")
    return len(ts) * 1500 * 8 / (ts[-1] / 1000)


def run_case(case: Case, rep: int, exp: Experiment, run_dir: Path, rollout_id: str, generation: int,
             bootstrap: str, topic_tcp: str, topic_http: str, env: dict, session: Session,
             rng: random.Random, seed: int, topic_conn: str = "") -> dict:
    case_id = f"{case.name}.r{rep + 1}"
    cdir = run_dir / "cases" / case_id
    cdir.mkdir(parents=True, exist_ok=True)
    token = f"{os.getpid()}-{generation}"
    topo = Topology(token=token, net=rng.randint(100, 250), host_labels=list(case.hosts), registry=session.registry)
    bn = dict(case.bottleneck)
    use_link = bn["path"] == "link"
    trace = trace_file(bn["trace"], cdir, exp.base_dir) if use_link and bn.get("trace") else None
    if trace is not None:
        bn["rate_mbit"] = round(trace_mean_bps(trace) / 1e6, 3)  # the trace's mean: BDP, utilization
    rate_bps = float(bn["rate_mbit"]) * 1e6
    bdp_bytes = rate_bps / 8 * float(bn["rtt_ms"]) / 1000
    # ccab-link counts IP bytes; tbf's limit counts frames (MTU 1514)
    buffer_bytes = int(max(2 * MTU, float(bn["buffer_bdp"]) * bdp_bytes))
    info = {"case": case.name, "case_id": case_id, "rep": rep + 1, "vars": case.vars, "bottleneck": bn,
            "bdp_bytes": int(bdp_bytes), "buffer_bytes": buffer_bytes, "flows": [asdict(f) for f in case.flows],
            "hosts": {}}
    collectors: list[Collector] = []
    nginxes: list[Nginx] = []
    link: Link | None = None
    try:
        topo.up(bottleneck_veth=not use_link)
        if use_link:
            ge = None
            loss = float(bn["loss_pct"]) / 100
            if bn.get("loss_model") == "gilbert-elliott":
                ge = {"p": float(bn["ge_p"]), "r": float(bn["ge_r"]),
                      "loss_bad": float(bn.get("ge_loss_bad", 1.0)), "loss_good": float(bn.get("ge_loss_good", 0.0))}
            link = Link(topo, cdir / "link", delay_ms=float(bn["rtt_ms"]) / 2, rate_bps=rate_bps, trace=trace,
                        buffer_bytes=buffer_bytes, loss=loss, ge=ge, seed=seed * 1000 + generation)
            info["shaping"] = {"ccab-link": link.start()}
        else:
            info["shaping"] = topo.shape(float(bn["rate_mbit"]), buffer_bytes, int(bn["burst_bytes"]),
                                         float(bn["loss_pct"]), float(bn["rtt_ms"]) if env["netem"] else None)
        for label, cc in case.hosts.items():
            ns = topo.hosts[label]
            host = f"{case_id}.{label}"
            hdir = cdir / label
            agent = apply_cc(ns, host, cc, rollout_id, generation, hdir / "agent")
            if cc in env["cc_bpf"]:
                session.stack.callback(release_bpf, host, cc)
            ng = Nginx(ns, topo.host_ip[label], hdir / "nginx", run_dir / "www", session.registry)
            ng.start()
            nginxes.append(ng)
            col = Collector(ns, host, hdir / "collector", ng.access_log, Path(agent["state_file"]), bootstrap,
                            topic_tcp, topic_http, exp.sample_interval_ms, session.registry, topic_conn)
            col.start()
            collectors.append(col)
            info["hosts"][label] = {"host": host, "cc": cc, "namespace": ns, "ip": topo.host_ip[label],
                                    "agent": {k: v for k, v in agent.items() if k not in ("stdout",)}}
        if link is not None:  # the base RTT the link gives, idle, before the traffic (run.json)
            info["base_rtt"] = _connect_rtt(topo.client, next(iter(topo.host_ip.values())))
        t0 = time.time() + 1.5
        plan = {"t0": t0, "seed": seed * 1000 + generation, "flows": [
            {"id": f.id, "kind": f.kind, "start_s": f.start_s, "duration_s": f.duration_s,
             "size_bytes": f.size_bytes, "rate_per_s": f.rate_per_s, "host": f.host,
             "url": f"http://{topo.host_ip[f.host]}/{'stream' if f.kind == 'stream' else f.size_bytes}"}
            for f in case.flows]}
        _write_json(cdir / "plan.json", plan)
        client_env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        res = subprocess.run(["ip", "netns", "exec", topo.client, sys.executable, "-m", "ccab_workshop.lab.client",
                              str(cdir / "plan.json"), str(cdir / "client.jsonl")],
                             capture_output=True, text=True, env=client_env, timeout=case.duration_s + 120)
        if res.returncode != 0:
            raise LabError(f"client failed in case {case_id}: {res.stderr.strip()[-1500:]}")
        info["t0_ms"] = int(t0 * 1000)
        info["t_end_ms"] = int((t0 + case.duration_s) * 1000)
        time.sleep(max(1.0, exp.sample_interval_ms / 1000 * 1.5))  # last lines and a last tick
        if link is not None:
            info["counters"] = {"ccab-link": link_counters(link.metrics())}
            info["link_stopped"] = link.stop()
        else:
            info["counters"] = topo.counters()
        for col in collectors:
            m = col.drain()
            label = col.cmd[col.cmd.index("--host") + 1].rsplit(".", 1)[1]
            info["hosts"][label]["collector"] = {
                "lines": metric_sum(m, "ccab_collector_log_lines_read_total"),
                "produced": metric_sum(m, "ccab_collector_records_produced_total"),
                "dropped": metric_sum(m, "ccab_collector_records_dropped_total"),
                "exit": col.stop()}
        return info
    finally:
        for col in collectors:
            col.stop()
        for ng in nginxes:
            ng.stop()
        if link is not None:
            link.stop()
        topo.down()


CONNECT_RTT_PY = """
import socket, sys, time
ip, n, out = sys.argv[1], int(sys.argv[2]), []
for _ in range(n):
    s = socket.socket(); t = time.monotonic(); s.connect((ip, 80)); out.append((time.monotonic() - t) * 1000); s.close()
    time.sleep(0.1)
out.sort(); print(f"{out[0]:.3f} {out[len(out) // 2]:.3f} {out[-1]:.3f}")
"""


def _connect_rtt(ns: str, ip: str, n: int = 5) -> dict:
    """Idle RTT through the path (ms): TCP handshakes from the client namespace to an edge host's
    nginx (connect() returns after SYN → SYN-ACK: one round trip); min / median / max of ``n``."""
    out = sh("ip", "netns", "exec", ns, sys.executable, "-c", CONNECT_RTT_PY, ip, str(n), check=False).split()
    if len(out) != 3:
        return {}
    return dict(zip(("min_ms", "median_ms", "max_ms"), map(float, out)))


def load(bootstrap: str, topics: list[str], group: str) -> dict:
    """The production loader (ccab.ingest.loader.Loader) from the run's topics into the warehouse."""

    wh = connect()
    try:
        migrate(wh, log=lambda _m: None)
        schemas = dict(zip(topics, (SCHEMAS["tcp_sample/1"], SCHEMAS["http_request/1"], SCHEMAS["tcp_conn/1"])))
        totals = Loader(wh, bootstrap, schemas, group=group, batch_wait_s=0.3).run(max_idle_s=4)
        return {"inserted": totals.inserted, "dead_letters": totals.dead_total}
    finally:
        wh.close()


def cohort_rollup(rollout_id: str, log=print) -> dict:
    """The production hourly cohort job (``ccab.cohorts.job.run_window``) over the UTC hours the
    run's rows touch, so the run lands in ``cohort_hourly`` / ``cohort_heatmap_hourly`` under PoP
    ``lab`` like production data. The job recomputes whole hours (every PoP), idempotently, exactly
    as the scheduled job would; no look-back: the lab adds rows to its own hours only."""
    from datetime import datetime, timezone


    wh = connect()
    try:
        span = analysis.time_range(wh, rollout_id)
        if span is None:
            log("lab: no rows in the warehouse for this run; cohort job not run")
            return {"hours": [], "summary": "no rows"}
        first, last = (datetime.fromtimestamp(ms / 1000, timezone.utc).replace(minute=0, second=0, microsecond=0)
                       for ms in span)
        report = run_window(wh, first, last + HOUR, lookback=False)
    finally:
        wh.close()
    log(f"lab: cohort job {first:%Y-%m-%dT%H}:00Z–{last + HOUR:%Y-%m-%dT%H}:00Z: {report.summary()}")
    return {"hours": [h.hour.strftime("%Y-%m-%dT%H:00Z") for h in report.computed],
            "connections": sum(h.connections for h in report.computed),
            "rollup_rows": sum(h.rollup_rows for h in report.computed),
            "heatmap_rows": sum(h.heatmap_rows for h in report.computed),
            "summary": report.summary()}


def _delete_topics(bootstrap: str, topics: list[str]) -> None:
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for fut in admin.delete_topics(topics, operation_timeout=30).values():
            fut.exception(timeout=30)
    except Exception:  # noqa: BLE001 - best effort
        pass


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    tmp.rename(path)


# --- analysis ---------------------------------------------------------------------------------------------


def analyze(meta: dict, exp: Experiment, run_dir: Path) -> dict:

    wh = connect()
    try:
        rows = analysis.counts(wh, meta["rollout_id"])
        cases = [analyze_case(wh, meta, info, run_dir, exp) for info in meta["cases"]]
    finally:
        wh.close()
    return {"rollout_id": meta["rollout_id"], "kind": exp.kind, "rows": rows, "cases": cases,
            "summary": summarize(exp.kind, cases)}


def analyze_case(wh, meta: dict, info: dict, run_dir: Path, exp: Experiment) -> dict:
    rollout = meta["rollout_id"]
    hosts = {h["host"]: label for label, h in info["hosts"].items()}
    t0 = info["t0_ms"]
    rate_bps = float(info["bottleneck"]["rate_mbit"]) * 1e6
    # per host, its long flow is the socket that moved the most bytes (a stream, where there is
    # one); shorter long-lived sockets (e.g. 1 MB requests under load) stay out of the flow views
    whole = analysis.flow_window(wh, rollout, list(hosts), t0 - 5000, info["t_end_ms"] + 5000)
    main_sock: dict[str, dict] = {}
    for w in whole:
        if w["host"] not in main_sock or int(w["acked_bytes"]) > int(main_sock[w["host"]]["acked_bytes"]):
            main_sock[w["host"]] = w
    streams = {f["host"]: f for f in info["flows"] if f["kind"] == "stream"}
    main_ids = {w["sock_id"] for h, w in main_sock.items() if not streams or hosts[h] in streams}
    series: dict[str, dict] = {}
    for r in analysis.flow_series(wh, rollout, list(hosts), t0):
        if r["sock_id"] not in main_ids:
            continue
        name = hosts[r["host"]]
        s = series.setdefault(name, {"cc": r["cc"], "host_label": name, "t_s": [], "goodput_bps": [], "cwnd": [],
                                     "rtt_us": [], "total_retrans": []})
        s["t_s"].append(round(float(r["t_s"]), 3))
        s["goodput_bps"].append(None if r["goodput_bps"] is None else float(r["goodput_bps"]))
        s["cwnd"].append(int(r["cwnd"]))
        s["rtt_us"].append(int(r["rtt_us"]))
        s["total_retrans"].append(int(r["total_retrans"]))
    # the window where every stream flow is active (past a 2 s warm-up after the last start)
    starts = [f["start_s"] for f in streams.values()] or [0.0]
    ends = [f["start_s"] + f["duration_s"] for f in streams.values()] or [max(f["start_s"] + f["duration_s"]
                                                                              for f in info["flows"])]
    a_s, b_s = max(starts) + 2.0, min(ends) - 0.5
    if b_s - a_s < 2:
        a_s, b_s = min(starts), max(ends)
    window = analysis.flow_window(wh, rollout, list(hosts), t0 + int(a_s * 1000), t0 + int(b_s * 1000))
    flows = []
    for w in window:
        if w["sock_id"] not in main_ids:
            continue
        label = hosts[w["host"]]
        tot = next((x for x in whole if x["sock_id"] == w["sock_id"]), w)
        flows.append({"flow": label, "cc": w["cc"], "goodput_bps": float(w["goodput_bps"]),
                      "bytes_sent": int(tot["sent_bytes"]), "bytes_retrans": int(tot["retrans_bytes"]),
                      "retrans_pct": 100 * int(tot["retrans_bytes"]) / max(1, int(tot["sent_bytes"])),
                      "total_retrans": int(tot["retrans_segs"]), "min_rtt_ms": int(w["min_rtt_us_min"]) / 1000,
                      "rtt_p50_ms": float(w["rtt_p50_us"]) / 1000, "rtt_p95_ms": float(w["rtt_p95_us"]) / 1000,
                      # self-inflicted delay: RTT above the connection's own min RTT (Verizon's metric)
                      "queue_delay_p50_ms": (float(w["rtt_p50_us"]) - int(tot["min_rtt_us_min"])) / 1000,
                      "queue_delay_p95_ms": (float(w["rtt_p95_us"]) - int(tot["min_rtt_us_min"])) / 1000,
                      "cwnd_avg": float(w["cwnd_avg"])})
    stream_flows = [f for f in flows if f["flow"] in streams]
    goodputs = [f["goodput_bps"] for f in stream_flows]
    active = {label: (f["start_s"], f["start_s"] + f["duration_s"]) for label, f in streams.items()}
    coll = analysis.collapses(
        {k: list(zip(v["t_s"], v["goodput_bps"])) for k, v in series.items() if k in active}, active,
        capacity_bps=rate_bps * 0.95, share=exp.collapse_share, min_s=exp.collapse_min_s)
    per_cc: dict[str, float] = {}
    for f in stream_flows:
        per_cc[f["cc"]] = per_cc.get(f["cc"], 0.0) + f["goodput_bps"]
    sent = sum(f["bytes_sent"] for f in stream_flows)
    out = {
        "case": info["case"], "case_id": info["case_id"], "rep": info["rep"], "vars": info["vars"],
        "bottleneck": info["bottleneck"], "buffer_bytes": info["buffer_bytes"], "window_s": [a_s, b_s],
        "duration_s": (info["t_end_ms"] - t0) / 1000,
        "flows": flows, "series": series, "jain": analysis.jain(goodputs) if len(goodputs) > 1 else None,
        "sum_goodput_bps": sum(goodputs), "utilization": sum(goodputs) / rate_bps if goodputs else None,
        "retrans_pct": 100 * sum(f["bytes_retrans"] for f in stream_flows) / sent if sent else None,
        "goodput_by_cc_bps": per_cc, "collapses": coll, "collapsed": bool(coll),
        "algorithms": sorted({h["cc"] for h in info["hosts"].values()}),
        "cc_seen": sorted({s["cc"] for s in series.values()}),
    }
    sizes = sorted({f["size_bytes"] for f in info["flows"] if f["size_bytes"]})
    if sizes:
        out["classes_nginx"] = analysis.size_classes(wh, rollout, list(hosts), sizes)
        client = [json.loads(l) for l in (run_dir / "cases" / info["case_id"] / "client.jsonl").read_text().splitlines()
                  if l.strip()]
        out["classes_client"] = analysis.client_latency(client)
    return out


def summarize(kind: str, cases: list[dict]) -> dict:
    """Across repeats: mean ± 95% t-interval per case; kind-specific pivots."""
    by_case: dict[str, list[dict]] = {}
    for c in cases:
        by_case.setdefault(c["case"], []).append(c)
    table = []
    for name, cs in by_case.items():
        row = {"case": name, "vars": cs[0]["vars"], "algorithms": cs[0]["algorithms"], "repeats": len(cs),
               "sum_goodput_mbit": analysis.mean_ci(c["sum_goodput_bps"] / 1e6 for c in cs),
               "utilization": analysis.mean_ci(c["utilization"] for c in cs),
               "jain": analysis.mean_ci(c["jain"] for c in cs),
               "retrans_pct": analysis.mean_ci(c["retrans_pct"] for c in cs),
               "collapse_rate": sum(1 for c in cs if c["collapsed"]) / len(cs),
               "goodput_by_cc_mbit": {cc: analysis.mean_ci(c["goodput_by_cc_bps"].get(cc, 0) / 1e6 for c in cs)
                                      for cc in cs[0]["goodput_by_cc_bps"]},
               "rtt_p50_ms": analysis.mean_ci(
                   sum(f["rtt_p50_ms"] for f in c["flows"]) / len(c["flows"]) if c["flows"] else None for c in cs),
               "queue_delay_p50_ms": analysis.mean_ci(
                   sum(f.get("queue_delay_p50_ms", 0) for f in c["flows"]) / len(c["flows"]) if c["flows"] else None
                   for c in cs),
               "min_rtt_ms": analysis.mean_ci(
                   min(f["min_rtt_ms"] for f in c["flows"]) if c["flows"] else None for c in cs)}
        if "classes_client" in cs[0]:
            row["classes"] = {}
            for size in cs[0]["classes_client"]:
                row["classes"][size] = {q: analysis.mean_ci(c["classes_client"].get(size, {}).get(q) for c in cs)
                                        for q in ("p50_ms", "p99_ms", "p999_ms", "goodput_p50_bps")}
                row["classes"][size]["n"] = sum(c["classes_client"].get(size, {}).get("n", 0) for c in cs)
        table.append(row)
    out = {"cases": table}
    if kind == "loss-resilience":
        pts: dict[str, list] = {}
        for row in table:
            if len(row["algorithms"]) == 1 and "loss_pct" in row["vars"]:
                pts.setdefault(row["algorithms"][0], []).append((row["vars"]["loss_pct"], row["sum_goodput_mbit"]["mean"]))
        out["loss_at_75pct"] = {cc: analysis.loss_at_fraction(p, 0.75) for cc, p in pts.items()}
    return out


def reanalyze(run_dir: Path) -> Path:
    """Run the cohort job and the analysis again on a finished run (the rows are in the warehouse)."""

    meta = json.loads((run_dir / "run.json").read_text())
    exp = spec.expand(meta["yaml"])
    meta["cohorts"] = cohort_rollup(meta["rollout_id"], log=lambda _m: None)
    _write_json(run_dir / "run.json", meta)
    results = analyze(meta, exp, run_dir)
    _write_json(run_dir / "results.json", results)
    return run_dir / "results.json"
