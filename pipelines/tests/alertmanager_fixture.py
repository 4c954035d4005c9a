"""A real Alertmanager for tests: the Debian binary on a free 127.0.0.1 port, with its own config
and storage under the test's tmp_path, clustering off. Skips (with the reason) when the binary is
missing.

Use it from a test module by importing the fixtures into it:

    from alertmanager_fixture import alertmanager, alertmanager_factory, wait_until  # noqa: F401

- ``alertmanager``: one running instance with ``DEFAULT_CONFIG`` (group_by rollout, pop, arm).
- ``alertmanager_factory(config=...)``: start instances with another config; all are stopped at
  the end of the test.
- ``wait_until(fn, what=...)``: bounded polling of a condition (no sleeps in tests).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

import pytest

BINARY_NAMES = ("prometheus-alertmanager", "alertmanager")  # Debian's name first, upstream's second

# Groups as deploy/prometheus/alertmanager.yml does (rollout, pop, arm), short waits so a group
# forms at once, and a receiver that sends nothing anywhere.
DEFAULT_CONFIG = """\
route:
  receiver: test-sink
  group_by: [rollout, pop, arm]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test-sink
"""

T = TypeVar("T")


def alertmanager_binary() -> str | None:
    for name in BINARY_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition: Callable[[], T], *, what: str, timeout_s: float = 15.0, interval_s: float = 0.1) -> T:
    """Call ``condition`` until it returns something truthy and return that; fail the test after
    ``timeout_s`` naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"gave up after {timeout_s:g} s waiting for {what}; last value: {last!r:.500}")
        time.sleep(interval_s)


@dataclass
class Alertmanager:
    url: str  # http://127.0.0.1:PORT
    port: int
    workdir: Path
    log_path: Path
    process: subprocess.Popen = field(repr=False)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_alertmanager(workdir: Path, config: str = DEFAULT_CONFIG, *, binary: str | None = None,
                       ready_timeout_s: float = 30.0) -> Alertmanager:
    """Start Alertmanager with ``config`` in ``workdir`` (config file, storage, log) and return once
    it answers ``/-/ready``. A port taken between choosing and binding it is retried."""
    binary = binary or alertmanager_binary()
    if binary is None:
        raise FileNotFoundError("no Alertmanager binary (" + " or ".join(BINARY_NAMES) + ") on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "alertmanager.yml"
    cfg.write_text(config)
    for attempt in range(3):
        port = free_port()
        log_path = workdir / f"alertmanager-{attempt}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [binary, f"--config.file={cfg}", f"--storage.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=info"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        am = Alertmanager(url=f"http://127.0.0.1:{port}", port=port, workdir=workdir, log_path=log_path, process=proc)
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(am.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return am
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        am.stop()
        if "address already in use" in am.log_tail(100):
            continue
        raise RuntimeError(f"Alertmanager ({binary}) did not become ready on 127.0.0.1:{port} within "
                           f"{ready_timeout_s:g} s (exit code {proc.returncode}); log:\n{am.log_tail()}")
    raise RuntimeError(f"Alertmanager could not bind a free port in 3 attempts; log:\n{am.log_tail()}")


@pytest.fixture
def alertmanager_factory(tmp_path):
    binary = alertmanager_binary()
    if binary is None:
        pytest.skip("no Alertmanager binary on PATH (" + " or ".join(BINARY_NAMES) + "; Debian package "
                    "prometheus-alertmanager, which `make setup` installs when run as root)")
    started: list[Alertmanager] = []

    def start(config: str = DEFAULT_CONFIG) -> Alertmanager:
        am = start_alertmanager(tmp_path / f"alertmanager{len(started)}", config, binary=binary)
        started.append(am)
        return am

    yield start
    for am in started:
        am.stop()


@pytest.fixture
def alertmanager(alertmanager_factory) -> Alertmanager:
    return alertmanager_factory()
