"""Real ``ccab-agent`` processes for the Python tests, each managing a network namespace that
stands for a host (test_agent_kafka.py, test_rollout_kafka.py).

- ``build_agent(tmp_path_factory)``: the agent binary built from this tree (skips the test
  without root, ``go`` or ``ip``).
- ``host_namespaces(*names)``: namespaces running cubic, deleted on exit.
- ``agent_args(...)``: the command line of an agent for one host, keyed by the test-only public
  key of the shared vectors; ``Agent``: the process (start, kill, stop); ``stop_all``.
- ``ns_cc(ns)``: the namespace's ``net.ipv4.tcp_congestion_control``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

import pytest
from paths import REPO, VECTORS


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def ns_cc(ns: str) -> str:
    return sh("ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/tcp_congestion_control").strip()


def build_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ccab-agent, built from this tree; skips without root, ``go`` or ``ip``."""
    if os.geteuid() != 0:
        pytest.skip("needs root: creates network namespaces and sets their sysctls")
    for tool in ("go", "ip"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    out = tmp_path_factory.mktemp("bin") / "ccab-agent"
    subprocess.run(["go", "build", "-o", str(out), "./rollout/cmd/ccab-agent"], cwd=REPO, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    return out


@contextlib.contextmanager
def host_namespaces(*names: str) -> Iterator[list[str]]:
    """Namespaces standing for hosts, each running cubic, deleted on exit. cubic is added to the
    init namespace's allowed list and left there: removing it at teardown could break another
    test's namespace running concurrently (Go test packages), and adding a name is harmless."""
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
    old = allowed.read_text().strip()
    if "cubic" not in old.split():
        sh("sysctl", "-q", "-w", f"net.ipv4.tcp_allowed_congestion_control={old} cubic")
    made: list[str] = []
    try:
        for n in names:
            sh("ip", "netns", "add", n)
            made.append(n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
            sh("ip", "netns", "exec", n, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=cubic")
        yield list(names)
    finally:
        for n in made:
            subprocess.run(["ip", "netns", "delete", n], check=False)


def agent_args(brokers: str, assignments_topic: str, status_topic: str, host: str, netns: str, state_file: Path,
               heartbeat: str) -> list[str]:
    """Arguments of an agent for host (PoP lab1) in netns, trusting the vectors' test key."""
    return ["--brokers", brokers, "--assignments-topic", assignments_topic, "--status-topic", status_topic,
            "--host", host, "--pop", "lab1", "--netns", netns,
            "--public-key", str(VECTORS / "test_ed25519_public.b64"), "--state-file", str(state_file),
            "--heartbeat-interval", heartbeat, "--metrics-addr", ""]


class Agent:
    """The agent process; start() again after kill() is a restart. stderr goes to log."""

    def __init__(self, binary: Path, args: list[str], log: Path):
        self.binary, self.args, self.log = binary, args, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([str(self.binary), *self.args], stdout=subprocess.DEVNULL,
                                     stderr=self.log.open("a"))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()

    def reap(self) -> None:
        """Wait for a terminated agent, killing it after 15 s."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()

    def stop(self) -> None:
        self.terminate()
        self.reap()


def stop_all(agents: Iterable[Agent]) -> None:
    """Stop agents together: SIGTERM to all, then wait for each."""
    agents = list(agents)
    for a in agents:
        a.terminate()
    for a in agents:
        a.reap()
