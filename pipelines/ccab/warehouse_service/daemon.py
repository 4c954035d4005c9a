"""``ccab warehouse serve|up|down|status``: the local warehouse service's process.

``serve`` runs it in the foreground (what the systemd unit runs): it takes ``lock`` (one service
per data directory), opens the engine at ``$CCAB_DATA_DIR/warehouse``, writes its pid file and
serves 127.0.0.1:``CCAB_WAREHOUSE_PORT`` until SIGTERM/SIGINT. ``up`` starts ``serve`` in the
background (own session, output to ``service.log``) unless it already answers, and waits until
``/healthz`` does; ``down`` stops the process of this data directory's pid file (SIGTERM, then
SIGKILL); ``status`` reads ``/healthz``. State: ``$CCAB_DATA_DIR/warehouse-service/``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ccab.base import atomicfile
from ccab.base.config import Settings, settings
from ccab.warehouse_service import engine as engine_mod
from ccab.warehouse_service import http as http_mod

STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 20
Progress = Callable[[str], None]


class ServiceError(RuntimeError):
    """The service could not be started, stopped or reached; the message is one line for a person."""


def _say(message: str) -> None:
    print(f"warehouse: {message}", flush=True)


@dataclass(frozen=True)
class Paths:
    state_dir: Path
    warehouse: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "service.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "service.log"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "lock"


def paths(s: Settings | None = None) -> Paths:
    s = s or settings()
    return Paths(state_dir=s.data_dir / "warehouse-service", warehouse=s.warehouse_path)


def health(port: int, timeout_s: float = 2.0) -> dict | None:
    """The ``/healthz`` document of whatever warehouse service answers on 127.0.0.1:``port``, or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout_s) as r:
            return json.loads(r.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def same_path(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _is_service(pid: int) -> bool:
    argv = _cmdline(pid)
    return ("ccab.warehouse_service" in argv or "warehouse" in argv) and "serve" in argv


def _read_pid(p: Paths) -> int | None:
    try:
        return int(p.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def service_pid(p: Paths | None = None) -> int | None:
    """The pid of this data dir's service if it is alive (a stale pid file is removed)."""
    p = p or paths()
    pid = _read_pid(p)
    if pid is None:
        return None
    if _is_service(pid):
        return pid
    p.pid_file.unlink(missing_ok=True)
    return None


def status(s: Settings | None = None) -> dict | None:
    """``/healthz`` of this data dir's service, or None when it does not answer on its port."""
    s = s or settings()
    doc = health(s.warehouse_port)
    if doc is None or not same_path(doc.get("path", ""), s.warehouse_path):
        return None
    return doc


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no log)"


def up(port: int | None = None, timeout_s: float = 60.0, slots: int = engine_mod.DEFAULT_SLOTS,
       progress: Progress = _say) -> int:
    """Make sure this data dir's service answers; start it if not. Returns its pid."""
    s = settings()
    port = port or s.warehouse_port
    p = paths(s)
    doc = health(port)
    if doc is not None:
        if not same_path(doc.get("path", ""), s.warehouse_path):
            raise ServiceError(f"port {port} serves the warehouse at {doc.get('path')}, not {s.warehouse_path}: "
                               "pick another port with CCAB_WAREHOUSE_PORT (or --port)")
        progress(f"already running (pid {doc.get('pid')}) at http://127.0.0.1:{port}, engine {s.warehouse_path}")
        return int(doc.get("pid", 0))
    pid = service_pid(p)
    if pid is not None:
        raise ServiceError(f"the service of {s.data_dir} (pid {pid}) runs but does not answer on port {port}; "
                           f"see {p.log_file}, or restart it with `ccab warehouse down` and `ccab warehouse up`")
    if not _port_is_free(port):
        raise ServiceError(f"port {port} on 127.0.0.1 is in use by something else; pick another with "
                           "CCAB_WAREHOUSE_PORT (or --port)")
    p.state_dir.mkdir(parents=True, exist_ok=True)
    progress(f"starting the warehouse service on 127.0.0.1:{port} (engine {s.warehouse_path}), log {p.log_file}")
    with open(p.log_file, "ab") as log:
        log.write(f"===== ccab warehouse up: port {port} at {time.strftime('%Y-%m-%d %H:%M:%S')} =====\n".encode())
        log.flush()
        child = subprocess.Popen([sys.executable, "-m", "ccab.warehouse_service", "serve", "--port", str(port),
                                  "--slots", str(slots)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    started = time.monotonic()
    while True:
        doc = health(port, 1.0)
        if doc is not None and doc.get("pid") == child.pid:
            progress(f"up (pid {child.pid}) at http://127.0.0.1:{port} in {time.monotonic() - started:.1f} s")
            return child.pid
        if child.poll() is not None:
            raise ServiceError(f"the warehouse service exited with code {child.returncode} while starting; "
                               f"log {p.log_file}:\n{_tail(p.log_file)}")
        if time.monotonic() - started > timeout_s:
            child.terminate()
            raise ServiceError(f"the warehouse service did not answer within {timeout_s:.0f} s; stopped it. "
                               f"Log {p.log_file}:\n{_tail(p.log_file)}")
        time.sleep(0.1)


def down(timeout_s: float = STOP_TIMEOUT_S, progress: Progress = _say) -> bool:
    """Stop this data dir's service (SIGTERM, then SIGKILL after ``timeout_s``). False if none ran."""
    p = paths()
    pid = _read_pid(p)
    if pid is None:
        progress("not running")
        return False
    if not _is_service(pid):
        p.pid_file.unlink(missing_ok=True)
        progress(f"not running (removed the stale pid file of pid {pid})")
        return False
    progress(f"stopping the warehouse service (pid {pid})")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _is_service(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _is_service(pid):
        progress(f"it did not stop within {timeout_s:.0f} s; sending SIGKILL")
        os.kill(pid, signal.SIGKILL)
        while _is_service(pid):
            time.sleep(0.1)
    p.pid_file.unlink(missing_ok=True)
    progress("stopped")
    return True


def serve(port: int | None = None, slots: int = engine_mod.DEFAULT_SLOTS,
          reserved: int = engine_mod.DEFAULT_RESERVED, ready: Callable[[int], None] | None = None,
          stop: threading.Event | None = None) -> None:
    """Run the service in this process until SIGTERM/SIGINT (or ``stop``)."""
    s = settings()
    port = s.warehouse_port if port is None else port
    p = paths(s)
    p.state_dir.mkdir(parents=True, exist_ok=True)
    lock = open(p.lock_file, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ServiceError(f"another warehouse service owns {s.warehouse_path} (pid {_read_pid(p)}); "
                           "only one process can hold an embedded engine") from None
    try:
        try:
            engine = engine_mod.Engine(s.warehouse_path, slots=slots, reserved=reserved)
        except ValueError as exc:
            raise ServiceError(str(exc)) from None
        except Exception as exc:
            raise ServiceError(f"cannot open the embedded engine at {s.warehouse_path}: {exc}") from None
        stop = stop or threading.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())

        def started(bound: int) -> None:
            atomicfile.write_text(p.pid_file, f"{os.getpid()}\n")
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} serving {s.warehouse_path} (chdb {engine.version}) "
                  f"on http://127.0.0.1:{bound}, {slots} statement slots ({reserved} for priority)", flush=True)
            if ready is not None:
                ready(bound)

        try:
            http_mod.serve(engine, "127.0.0.1", port, stop, ready=started)
        except OSError as exc:
            raise ServiceError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
        finally:
            engine.close()
            if _read_pid(p) == os.getpid():
                p.pid_file.unlink(missing_ok=True)
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} stopped", flush=True)
    finally:
        lock.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m ccab.warehouse_service serve [--port N] [--slots N]`` (what ``up`` and systemd run)."""
    ap = argparse.ArgumentParser(prog="python -m ccab.warehouse_service")
    ap.add_argument("action", choices=["serve"])
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--slots", type=int, default=engine_mod.DEFAULT_SLOTS)
    ap.add_argument("--reserved", type=int, default=engine_mod.DEFAULT_RESERVED,
                    help="slots batch statements cannot take (bench/warehouse runs --slots 1 --reserved 0: serialized)")
    args = ap.parse_args(argv)
    try:
        serve(args.port, args.slots, args.reserved)
    except ServiceError as exc:
        print(f"ccab warehouse: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
