"""Network namespaces of one lab case, and the machinery that always removes them.

Topology (one /24 per link, ``10.<net>.<i>.0/24``)::

    edge host h1 ─┐
    edge host h2 ─┼─ router ──[tbf rate/buffer, nft random loss, egress]── client
    edge host h3 ─┘

Data flows edge → client, so the bottleneck queue is the ``tbf`` on the router's client-facing
interface; random loss is an nftables rule on the same path (``numgen random mod 10000 < N
drop``). Base delay is ``netem`` on the client's egress (the ACK path) when the kernel has
netem; otherwise there is no added delay and the BDP used to size the buffer is the
configured nominal RTT (recorded as such in run.json).

Every namespace name starts with ``ccl<pid>-``; every process the lab starts is listed in a
registry file under ``/run/ccab-lab/<pid>.json``. ``sweep_leftovers()`` (run at start) removes
what a dead lab process left behind: the processes inside its namespaces, its registered
processes, then the namespaces.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NS_PREFIX = "ccl"
REGISTRY_DIR = Path("/run/ccab-lab")
MTU_BYTES = 1514
TCP_RMEM = "4096 131072 67108864"
TCP_WMEM = "4096 16384 67108864"


class LabError(RuntimeError):
    pass


def sh(*cmd: str, check: bool = True, input: str | None = None) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, input=input)
    if check and res.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def in_ns(ns: str, *cmd: str, check: bool = True, input: str | None = None) -> str:
    return sh("ip", "netns", "exec", ns, *cmd, check=check, input=input)


# --- what the kernel offers -------------------------------------------------------------------------


def available_cc() -> list[str]:
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def allow_cc(names: list[str]) -> list[str]:
    """Add ``names`` to the init namespace's tcp_allowed_congestion_control (a namespace may only
    pick an allowed name). Only adds; returns the list before."""
    p = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    before = p.read_text().split()
    want = before + [n for n in names if n not in before]
    if want != before:
        p.write_text(" ".join(want))
    return before


def probe_qdisc(kind: str, *args: str) -> bool:
    """Whether ``tc qdisc add ... kind`` works on this kernel (tried on lo of a throw-away namespace)."""
    ns = f"{NS_PREFIX}{os.getpid()}-probe{random.randint(0, 9999)}"
    sh("ip", "netns", "add", ns)
    try:
        res = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", kind, *args],
                             capture_output=True, text=True)
        return res.returncode == 0
    finally:
        sh("ip", "netns", "del", ns, check=False)


def probe_nft() -> bool:
    import shutil

    return shutil.which("nft") is not None


# --- registry and sweep ---------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_pid(pid: int, expect: tuple[str, ...] = ()) -> None:
    """SIGTERM (then SIGKILL) one pid, if its command line still matches ``expect``."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return
    if expect and not any(e in cmdline for e in expect):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(30):
        if not _pid_alive(pid) or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_ns_processes(ns: str) -> None:
    out = sh("ip", "netns", "pids", ns, check=False)
    for p in out.split():
        if p.isdigit() and int(p) != os.getpid():
            _kill_pid(int(p))


def delete_ns(ns: str) -> None:
    kill_ns_processes(ns)
    sh("ip", "netns", "del", ns, check=False)


def lab_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines() if line.startswith(NS_PREFIX)]


def sweep_leftovers(log=print) -> list[str]:
    """Remove namespaces and processes of lab runs whose process is gone. Returns what was removed."""
    removed = []
    if REGISTRY_DIR.exists():
        for f in REGISTRY_DIR.glob("*.json"):
            owner = int(f.stem) if f.stem.isdigit() else -1
            if owner > 0 and _pid_alive(owner):
                continue
            try:
                reg = json.loads(f.read_text())
            except (OSError, ValueError):
                reg = {}
            for pid, expect in reg.get("pids", []):
                _kill_pid(int(pid), tuple(expect))
            for ns in reg.get("namespaces", []):
                delete_ns(ns)
                removed.append(ns)
            f.unlink(missing_ok=True)
    for ns in lab_namespaces():
        owner = ns[len(NS_PREFIX):].split("-")[0]
        if owner.isdigit() and not _pid_alive(int(owner)):
            delete_ns(ns)
            removed.append(ns)
    if removed:
        log(f"lab: removed {len(set(removed))} leftover namespace(s) of dead runs: {', '.join(sorted(set(removed)))}")
    return removed


class Registry:
    """What this process created, on disk so a sweep can undo it after a crash."""

    def __init__(self):
        self.path = REGISTRY_DIR / f"{os.getpid()}.json"
        self.namespaces: list[str] = []
        self.pids: list[tuple[int, list[str]]] = []

    def _save(self) -> None:
        REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"namespaces": self.namespaces, "pids": self.pids}))
        tmp.rename(self.path)

    def add_ns(self, ns: str) -> None:
        self.namespaces.append(ns)
        self._save()

    def add_pid(self, pid: int, expect: list[str]) -> None:
        self.pids.append((pid, expect))
        self._save()

    def forget_ns(self, ns: str) -> None:
        if ns in self.namespaces:
            self.namespaces.remove(ns)
            self._save()

    def forget_pid(self, pid: int) -> None:
        self.pids = [p for p in self.pids if p[0] != pid]
        self._save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


# --- one case's topology ----------------------------------------------------------------------------


@dataclass
class Topology:
    """Namespaces and addresses of one case. ``hosts``: host label → namespace name."""

    token: str
    net: int
    host_labels: list[str]
    registry: Registry
    router: str = ""
    client: str = ""
    hosts: dict[str, str] = field(default_factory=dict)
    host_ip: dict[str, str] = field(default_factory=dict)
    client_ip: str = ""
    bottleneck_dev: str = ""
    client_dev: str = ""

    def __post_init__(self):
        self.router = f"{NS_PREFIX}{self.token}-r"
        self.client = f"{NS_PREFIX}{self.token}-c"
        self.client_ip = f"10.{self.net}.250.2"
        for i, label in enumerate(self.host_labels, start=1):
            self.hosts[label] = f"{NS_PREFIX}{self.token}-h{i}"
            self.host_ip[label] = f"10.{self.net}.{i}.2"
        short = self.token.replace("-", "")[-8:]
        self.bottleneck_dev = f"b{short}"
        self.client_dev = f"c{short}"

    def namespaces(self) -> list[str]:
        return [self.router, self.client, *self.hosts.values()]

    @property
    def router_ip(self) -> str:
        return f"10.{self.net}.250.1"

    def up(self, bottleneck_veth: bool = True) -> None:
        """Namespaces and the edge links. ``bottleneck_veth``: also the router ↔ client veth
        (the tbf path); with ccab-link, ``Link.start`` creates that link instead."""
        short = self.token.replace("-", "")[-8:]
        for ns in self.namespaces():
            self.registry.add_ns(ns)
            sh("ip", "netns", "add", ns)
            in_ns(ns, "ip", "link", "set", "lo", "up")
            # high BDPs (100 ms × tens of Mbit/s, deep buffers): let autotuning grow past the
            # defaults' 4–6 MB so the socket buffers never limit a flow before the path does
            in_ns(ns, "sysctl", "-qw", f"net.ipv4.tcp_rmem={TCP_RMEM}", f"net.ipv4.tcp_wmem={TCP_WMEM}")
        in_ns(self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        if bottleneck_veth:
            self._link(self.router, self.bottleneck_dev, self.router_ip,
                       self.client, self.client_dev, self.client_ip)
        for i, (label, ns) in enumerate(self.hosts.items(), start=1):
            self._link(self.router, f"r{short}{i}", f"10.{self.net}.{i}.1", ns, f"e{short}{i}", self.host_ip[label])

    def _link(self, ns_a: str, dev_a: str, ip_a: str, ns_b: str, dev_b: str, ip_b: str) -> None:
        sh("ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
        in_ns(ns_a, "ip", "addr", "add", f"{ip_a}/24", "dev", dev_a)
        in_ns(ns_b, "ip", "addr", "add", f"{ip_b}/24", "dev", dev_b)
        in_ns(ns_a, "ip", "link", "set", dev_a, "up")
        in_ns(ns_b, "ip", "link", "set", dev_b, "up")
        if ns_b != self.router:
            in_ns(ns_b, "ip", "route", "add", "default", "via", ip_a)

    def shape(self, rate_mbit: float, buffer_bytes: int, burst_bytes: int, loss_pct: float,
              delay_ms: float | None) -> dict:
        """The bottleneck: tbf (rate, queue limit) on the router's egress to the client; random
        loss in nftables on the same path; netem delay on the client's egress (ACK path) when
        ``delay_ms`` is given (callers pass None when the kernel has no netem)."""
        in_ns(self.router, "tc", "qdisc", "replace", "dev", self.bottleneck_dev, "root", "tbf",
              "rate", f"{rate_mbit}mbit", "burst", str(burst_bytes), "limit", str(buffer_bytes))
        applied = {"tbf": in_ns(self.router, "tc", "qdisc", "show", "dev", self.bottleneck_dev).strip()}
        if loss_pct > 0:
            n = int(round(loss_pct * 100))  # per 10000
            rules = (f"table inet ccablab {{\n chain lossy {{\n  type filter hook forward priority 0; policy accept;\n"
                     f"  oifname \"{self.bottleneck_dev}\" numgen random mod 10000 < {n} counter drop\n }}\n}}\n")
            in_ns(self.router, "nft", "-f", "-", input=rules)
            applied["nft"] = f"numgen random mod 10000 < {n} drop"
        if delay_ms:
            in_ns(self.client, "tc", "qdisc", "replace", "dev", self.client_dev, "root", "netem",
                  "delay", f"{delay_ms}ms", "limit", "100000")
            applied["netem"] = f"delay {delay_ms}ms on the client's egress"
        return applied

    def counters(self) -> dict:
        """tbf drops/backlog and nftables drop counter, after a case."""
        out = {"tbf": in_ns(self.router, "tc", "-s", "qdisc", "show", "dev", self.bottleneck_dev, check=False).strip()}
        nft = in_ns(self.router, "nft", "list", "ruleset", check=False) if probe_nft() else ""
        if "ccablab" in nft:
            out["nft"] = " ".join(l.strip() for l in nft.splitlines() if "numgen" in l)
        return out

    def down(self) -> None:
        for ns in self.namespaces():
            delete_ns(ns)
            self.registry.forget_ns(ns)


# --- ccab-link: the bottleneck as a userspace link with delay (lab/link/README.md) -----------------------


def link_binary() -> Path | None:
    p = Path(__file__).resolve().parents[3] / "bin" / "ccab-link"
    return p if p.exists() else None


def parse_metrics(body: str) -> dict[str, float]:
    """Prometheus text → {'name{labels}': value} (comments skipped)."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        try:
            out[key] = float(val)
        except ValueError:
            continue
    return out


@dataclass
class Link:
    """One ccab-link process between the router (A) and the client (B). "up" (A → B) is the data
    direction: rate or trace, droptail buffer, loss; "down" carries the ACKs (same delay, no limit)."""

    topo: Topology
    workdir: Path
    delay_ms: float
    rate_bps: float = 0.0
    trace: Path | None = None
    buffer_bytes: int = 0
    loss: float = 0.0
    ge: dict | None = None  # {"p", "r", "loss_bad", "loss_good"}
    seed: int = 1
    rt_priority: int = 10
    proc: subprocess.Popen | None = None
    ready: dict = field(default_factory=dict)
    stopped: dict | None = None

    def command(self, binary: Path) -> list[str]:
        t = self.topo
        cmd = [str(binary), "--netns-a", t.router, "--netns-b", t.client, "--dev-a", t.bottleneck_dev,
               "--dev-b", t.client_dev, "--addr-a", f"{t.router_ip}/24", "--addr-b", f"{t.client_ip}/24",
               "--delay-ms", f"{self.delay_ms:g}", "--buffer-up-bytes", str(int(self.buffer_bytes)),
               "--seed", str(self.seed), "--metrics-addr", "127.0.0.1:0",
               "--ready-file", str(self.workdir / "link.ready")]
        if self.trace is not None:
            cmd += ["--trace-up", str(self.trace)]
        else:
            cmd += ["--rate-up-bps", f"{self.rate_bps:.0f}"]
        if self.loss > 0:
            cmd += ["--loss-up", f"{self.loss:g}"]
        if self.ge:
            cmd += ["--ge-p", f"{self.ge['p']:g}", "--ge-r", f"{self.ge['r']:g}",
                    "--ge-loss-bad", f"{self.ge.get('loss_bad', 1.0):g}",
                    "--ge-loss-good", f"{self.ge.get('loss_good', 0.0):g}", "--ge-direction", "up"]
        if self.rt_priority:
            cmd += ["--rt-priority", str(self.rt_priority)]
        return cmd

    def start(self, timeout_s: float = 10.0) -> dict:
        binary = link_binary()
        if binary is None:
            raise LabError("bin/ccab-link is not built (make setup builds it); or use path: tbf (no delay)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ready = self.workdir / "link.ready"
        ready.unlink(missing_ok=True)
        cmd = self.command(binary)
        self.out = open(self.workdir / "link.stdout", "w")
        self.err = open(self.workdir / "link.stderr", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, start_new_session=True)
        self.topo.registry.add_pid(self.proc.pid, ["ccab-link"])
        deadline = time.time() + timeout_s
        while not ready.exists():
            if self.proc.poll() is not None:
                raise LabError(f"ccab-link exited {self.proc.returncode}: "
                               f"{(self.workdir / 'link.stderr').read_text().strip()[-500:]}")
            if time.time() > deadline:
                raise LabError(f"ccab-link not ready after {timeout_s:g} s ({self.workdir}/link.stderr)")
            time.sleep(0.05)
        self.ready = json.loads(ready.read_text())
        in_ns(self.topo.client, "ip", "route", "add", "default", "dev", self.topo.client_dev)
        return {"command": cmd, "ready": self.ready}

    def metrics(self) -> dict[str, float]:
        import urllib.request

        addr = self.ready.get("metrics_addr")
        if not addr or self.proc is None or self.proc.poll() is not None:
            return {}
        try:
            return parse_metrics(urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode())
        except OSError:
            return {}

    def stop(self) -> dict | None:
        """SIGTERM, wait, the stopped line (totals per direction) from stdout."""
        if self.proc is None:
            return self.stopped
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.out.close()
        self.err.close()
        self.topo.registry.forget_pid(self.proc.pid)
        lines = [l for l in (self.workdir / "link.stdout").read_text().splitlines() if l.strip()]
        try:
            self.stopped = json.loads(lines[-1]) if lines else None
        except ValueError:
            self.stopped = {"raw": lines[-1]}
        if self.stopped is not None:
            self.stopped["exit"] = self.proc.returncode
        self.proc = None
        return self.stopped


def link_counters(m: dict[str, float]) -> dict:
    """The per-case summary of a ccab-link scrape: drops by cause, delivered, lateness quantiles."""
    def pick(name: str, **labels: str) -> float:
        want = [f'{k}="{v}"' for k, v in labels.items()]
        return sum(v for k, v in m.items() if k.split("{")[0] == name and all(w in k for w in want))

    out: dict = {}
    for d in ("up", "down"):
        out[d] = {
            "rx_packets": pick("ccab_link_rx_packets_total", direction=d),
            "delivered_packets": pick("ccab_link_delivered_packets_total", direction=d),
            "delivered_bytes": pick("ccab_link_delivered_bytes_total", direction=d),
            "dropped_packets": {c: pick("ccab_link_dropped_packets_total", direction=d, cause=c)
                                for c in ("loss", "ge_loss", "buffer", "memory", "write")},
            "release_lateness_p99_s": _hist_quantile(m, "ccab_link_release_lateness_seconds", d, 0.99),
            "sojourn_p50_s": _hist_quantile(m, "ccab_link_sojourn_seconds", d, 0.5),
        }
    return out


def _hist_quantile(m: dict[str, float], name: str, direction: str, q: float) -> float | None:
    buckets = []
    for k, v in m.items():
        if k.startswith(name + "_bucket{") and f'direction="{direction}"' in k:
            le = k.split('le="')[1].split('"')[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    for le, c in buckets:
        if c >= q * total:
            return le
    return None
