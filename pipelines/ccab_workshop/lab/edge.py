"""One lab edge host: nginx (the Debian package, own config, the ``ccab`` JSON access log),
ccab-collector (nginx log + netlink tcp_info of the host's namespace) and the congestion
control set by ccab-agent.

The collector runs in the root namespace (it reaches the local Kafka on 127.0.0.1) and samples
the host's namespace with ``--tcp-info-namespaces`` (setns per dump; needs CAP_SYS_ADMIN).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from ccab.base.config import settings
from ccab_workshop.lab.netns import LabError, Registry, in_ns
from ccab.rollout import signing


# The ccab log_format of docs/reference/nginx.md.
CCAB_LOG_FORMAT = (
    "log_format ccab escape=json '{\"msec\":$msec,\"remote_addr\":\"$remote_addr\",\"connection\":$connection,'\n"
    "  '\"connection_requests\":$connection_requests,\"request_method\":\"$request_method\",\"status\":$status,'\n"
    "  '\"bytes_sent\":$bytes_sent,\"body_bytes_sent\":$body_bytes_sent,\"request_time\":$request_time,'\n"
    "  '\"tcpinfo_rtt\":\"$tcpinfo_rtt\",\"tcpinfo_rttvar\":\"$tcpinfo_rttvar\",'\n"
    "  '\"tcpinfo_snd_cwnd\":\"$tcpinfo_snd_cwnd\",\"tcpinfo_rcv_space\":\"$tcpinfo_rcv_space\"}';"
)


def nginx_config(prefix: Path, access_log: Path, listen: str, www: Path, *, workers: int = 1,
                 worker_connections: int = 1024) -> str:
    """An nginx.conf for a test or lab nginx run as ``nginx -p PREFIX -c FILE``: everything it
    writes stays under ``prefix``, the access log is in the ``ccab`` JSON log_format, ``www`` is
    served as is on ``listen`` (e.g. ``10.0.0.1:80 backlog=1024``)."""
    return f"""
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
user root;
events {{ worker_connections {worker_connections}; }}
http {{
    {CCAB_LOG_FORMAT}
    access_log {access_log} ccab;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 10;
    default_type application/octet-stream;
    server {{
        listen {listen};
        root {www};
    }}
}}
"""


STREAM_FILE_BYTES = 8 << 30  # sparse: sendfile reads zero pages, no disk I/O


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_www(www: Path, sizes: list[int]) -> None:
    """The files nginx serves: ``stream`` (sparse, 8 GiB) and ``<n>`` for each request size."""
    www.mkdir(parents=True, exist_ok=True)
    stream = www / "stream"
    if not stream.exists():
        with open(stream, "wb") as f:
            f.truncate(STREAM_FILE_BYTES)
    for n in sizes:
        p = www / str(n)
        if not p.exists() or p.stat().st_size != n:
            p.write_bytes(os.urandom(n))


# --- congestion control: set by the real agent from a signed assignment ------------------------------


def agent_binary() -> Path | None:
    p = settings().agent_bin
    return p if p.exists() and os.access(p, os.X_OK) else None


# ccab's BPF congestion controls (rollout/bpf/cc): on a kernel without them the agent loads them
# when an assignment names one, so the lab offers them wherever the agent can (kernel BTF).
BPF_CC = ("bbr2", "bbr3", "vivace")


def bpf_loadable(kernel_offers: list[str]) -> list[str]:
    """The BPF algorithms the agent would load here: those the kernel lacks, when the agent binary
    exists and the kernel has BTF (the agent refuses with the reason otherwise)."""
    if agent_binary() is None or not Path("/sys/kernel/btf/vmlinux").exists():
        return []
    return [a for a in BPF_CC if a not in kernel_offers]


def release_bpf(host: str, cc: str) -> None:
    """A lab host going away drops its use of ccab's BPF ``cc`` (the last user unregisters it)."""
    agent = agent_binary()
    if agent is not None:
        subprocess.run([str(agent), "--release-bpf", cc, "--host", host], capture_output=True, timeout=30)


_KEY = None


def _lab_key():
    """The signing key of this lab run: generated in memory, trusted only by this run's agents."""
    global _KEY
    if _KEY is None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        _KEY = Ed25519PrivateKey.generate()
    return _KEY


def apply_cc(ns: str, host: str, cc: str, rollout_id: str, generation: int, workdir: Path) -> dict:
    """Set ``cc`` in namespace ``ns`` through the real agent with a signed assignment, and
    return what happened: {"setter", "state", "cc_effective", "state_file", ...}.

    SEAM (until ``bin/ccab-agent`` exists): without the agent binary the lab writes the sysctl
    itself and the agent's state file for the collector, and says so in run.json
    (``setter: "lab-fallback"``). Nothing else in the lab changes when the agent lands."""
    workdir.mkdir(parents=True, exist_ok=True)
    record = {"schema": "assignment/1", "rollout_id": rollout_id, "generation": generation, "pop": "lab",
              "host": host, "arm": cc, "cc": cc, "qdisc": None, "issued_at_ms": int(time.time() * 1000)}

    key = _lab_key()  # a key made for this run: the lab's hosts trust nothing else
    signed = signing.sign(record, key)
    assignment = workdir / "assignment.json"
    assignment.write_text(json.dumps(signed))
    state_file = workdir / "state.json"
    agent = agent_binary()
    if agent is not None:
        pub = workdir / "controller.pub"
        pub.write_text(signing.public_b64(key) + "\n")
        cmd = [str(agent), "--once", "--assignment-file", str(assignment), "--netns", ns,
               "--public-key", str(pub), "--state-file", str(state_file), "--host", host, "--pop", "lab",
               "--metrics-addr", ""]
        cmd += settings().lab_agent_args
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        effective = in_ns(ns, "sysctl", "-n", "net.ipv4.tcp_congestion_control").strip()
        out = {"setter": "ccab-agent", "cmd": cmd, "exit": res.returncode, "stdout": res.stdout[-2000:],
               "stderr": res.stderr[-2000:], "cc_effective": effective, "state_file": str(state_file)}
        if res.returncode != 0 or effective != cc:
            raise LabError(f"ccab-agent did not apply {cc} in {ns} (exit {res.returncode}, "
                           f"effective {effective}): {res.stderr.strip()[-500:]}")
        if not state_file.exists():  # the collector still needs rollout_id/arm
            _write_state(state_file, rollout_id, cc, generation)
        return out
    # --- SEAM: lab-fallback, remove when bin/ccab-agent exists everywhere ---
    in_ns(ns, "sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cc}")
    effective = in_ns(ns, "sysctl", "-n", "net.ipv4.tcp_congestion_control").strip()
    if effective != cc:
        raise LabError(f"could not set {cc} in {ns}: effective {effective}")
    _write_state(state_file, rollout_id, cc, generation)
    return {"setter": "lab-fallback", "why": "bin/ccab-agent not built yet: sysctl written by the lab",
            "cc_effective": effective, "state_file": str(state_file), "assignment": str(assignment)}


def _write_state(path: Path, rollout_id: str, arm: str, generation: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"rollout_id": rollout_id, "arm": arm, "cc": arm, "generation": generation}))
    tmp.rename(path)


# --- nginx -------------------------------------------------------------------------------------------


class Nginx:
    def __init__(self, ns: str, ip: str, root: Path, www: Path, registry: Registry):
        self.ns, self.ip, self.root, self.www, self.registry = ns, ip, root, www, registry
        self.conf = root / "nginx.conf"
        self.access_log = root / "access.log"
        self.pid_file = root / "nginx.pid"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        r = self.root
        self.conf.write_text(nginx_config(r, self.access_log, f"{self.ip}:80 backlog=1024", self.www))
        in_ns(self.ns, "nginx", "-p", str(r), "-c", str(self.conf))
        for _ in range(50):
            if self.pid_file.exists() and self.pid_file.read_text().strip():
                self.registry.add_pid(int(self.pid_file.read_text()), ["nginx"])
                return
            time.sleep(0.05)
        raise LabError(f"nginx in {self.ns} did not write its pid file; see {r}/error.log")

    def stop(self) -> None:
        if self.pid_file.exists():
            try:
                pid = int(self.pid_file.read_text().strip())
                os.kill(pid, signal.SIGQUIT)
                for _ in range(50):
                    if not Path(f"/proc/{pid}").exists():
                        break
                    time.sleep(0.05)
                self.registry.forget_pid(pid)
            except (ProcessLookupError, ValueError):
                pass


# --- collector ---------------------------------------------------------------------------------------


def collector_binary() -> Path:
    p = settings().collector_bin
    if not p.exists():
        raise LabError(f"{p} not found: build it with `make setup` "
                       "(CGO_ENABLED=0 go build -o bin/ccab-collector ./collectors/cmd/ccab-collector)")
    return p


class Collector:
    """``ccab-collector run`` for one host: its nginx log, tcp_info of its namespace polled, and a
    close-time ``tcp_conn/1`` record of every connection (the collector's close capture)."""

    def __init__(self, ns: str, host: str, root: Path, access_log: Path, state_file: Path, bootstrap: str,
                 topic_tcp: str, topic_http: str, interval_ms: int, registry: Registry, topic_conn: str = ""):
        self.root = root
        self.log = root / "collector.log"
        self.metrics_port = free_port()
        self.registry = registry
        self.cmd = [
            str(collector_binary()), "run", "--metrics-addr", f"127.0.0.1:{self.metrics_port}",
            "--kafka-brokers", bootstrap, "--topic-tcp", topic_tcp, "--topic-http", topic_http,
            *(["--topic-conn", topic_conn] if topic_conn else ["--close-capture=false"]),
            "--state-dir", str(root / "state"), "--nginx-paths", str(access_log), "--nginx-format", "json",
            "--nginx-poll-interval", "100ms", "--nginx-checkpoint-interval", "1s",
            "--pop", "lab", "--host", host, "--rollout-state-file", str(state_file), "--cc-netns", ns,
            "--tcp-info-enabled", "--tcp-info-interval", f"{interval_ms}ms", "--tcp-info-namespaces", ns,
            "--tcp-info-local-ports", "80", "--tcp-info-salt", "ccab-lab",
            "--kafka-shutdown-timeout", "10s", "--kafka-linger", "50ms",
        ]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.registry.add_pid(self.proc.pid, ["ccab-collector"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.metrics()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise LabError(f"ccab-collector exited {self.proc.returncode}: {self.tail()}")
                time.sleep(0.1)
        raise LabError(f"ccab-collector /metrics did not answer: {self.tail()}")

    def metrics(self) -> dict[str, float]:
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        out = {}
        for line in body.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                try:
                    out[key] = float(value)
                except ValueError:
                    pass
        return out

    def drain(self, timeout_s: float = 30) -> dict[str, float]:
        """Wait until everything read is acknowledged by Kafka; the last metrics."""
        deadline = time.monotonic() + timeout_s
        m: dict[str, float] = {}
        while time.monotonic() < deadline:
            try:
                m = self.metrics()
            except OSError:
                break
            if (m.get("ccab_collector_inflight_records", 0) == 0 and m.get("ccab_collector_queue_records", 0) == 0
                    and m.get("ccab_collector_spool_mode", 0) == 0
                    and m.get("ccab_collector_checkpoint_lag_bytes", 0) == 0):
                break
            time.sleep(0.2)
        return m

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.registry.forget_pid(self.proc.pid)
        code = self.proc.returncode
        self.proc = None
        return code

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""


def metric_sum(m: dict[str, float], name: str) -> float:
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


