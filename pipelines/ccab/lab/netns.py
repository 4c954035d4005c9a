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

    def up(self) -> None:
        short = self.token.replace("-", "")[-8:]
        for ns in self.namespaces():
            self.registry.add_ns(ns)
            sh("ip", "netns", "add", ns)
            in_ns(ns, "ip", "link", "set", "lo", "up")
        in_ns(self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        # router ↔ client: the bottleneck link
        self._link(self.router, self.bottleneck_dev, f"10.{self.net}.250.1",
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
