"""A real Airflow 3 deployment on loopback for tests: API server, DAG processor and scheduler.

Airflow 3 splits what Airflow 2's scheduler did: the **DAG processor** parses the dags folder into
the metadata DB, the **scheduler** creates runs and hands task instances to its executor
(LocalExecutor: worker processes on this machine), and every task process talks to the **API
server**'s execution API (``[core] execution_api_server_url``, JWTs signed with
``[api_auth] jwt_secret``, which every component must share). All three are started here as
``airflow <component>`` processes, each in its own process group, with a SQLite metadata DB.

Nothing here imports Airflow: the test process must not (``test_dags.py`` says why). The state
of runs is read from the SQLite metadata DB with the standard library.
"""

from __future__ import annotations

import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from alertmanager_fixture import free_port
from ccab_workshop import dags_local as airflow_local


@dataclass
class DagRunRow:
    run_id: str
    run_type: str
    state: str
    start: datetime
    end: datetime


@dataclass
class AirflowServices:
    """One Airflow home with its three components; :meth:`stop` ends every process it started."""

    home: Path
    dags_folder: Path
    extra_env: dict[str, str]
    api_port: int = field(default_factory=free_port)
    log_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **airflow_local.environment(self.home, self.dags_folder),
            **self.extra_env,
            # SQLite takes one writer at a time: wait for the lock (60 s) instead of failing after 5 s
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}?timeout=60",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret,
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_port),
            # a loaded CI machine answers slowly: a task waits a minute for the API, not 5 s
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            # a fast loop: the scheduler and DAG processor notice new files and runs in seconds
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        }

    def __post_init__(self) -> None:
        self._secret = secrets.token_hex(16)

    def airflow(self, *args: str, timeout: int = 600) -> str:
        proc = subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"`airflow {' '.join(args)}` failed (exit {proc.returncode}):\n"
                               f"{(proc.stdout + proc.stderr)[-3000:]}")
        return proc.stdout

    def _start(self, name: str, *args: str) -> None:
        log = open(self.home / f"{name}.log", "w")  # noqa: SIM115 - the process owns it until stop()
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "airflow", name, *args], env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout_s: float = 600) -> None:
        """``db migrate`` and the ``clickhouse`` pool, then the API server (waited for: a task
        started before it listens fails) and the DAG processor; :meth:`start_scheduler` next."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.airflow("db", "migrate")
        self.airflow("pools", "set", airflow_local.POOL, str(airflow_local.POOL_SLOTS), "ccab: one writer")
        self._start("api-server", "--host", "127.0.0.1", "--port", str(self.api_port))
        wait_for(lambda: self._api_up(), timeout_s, "the Airflow API server to listen", self.check_alive)
        self._start("dag-processor")

    def start_scheduler(self) -> None:
        self._start("scheduler")

    def serialized(self, dag_id: str) -> bool:
        """The DAG processor has parsed ``dag_id`` into the metadata DB."""
        return bool(self._select("SELECT count(*) FROM serialized_dag WHERE dag_id = ?", (dag_id,))[0][0])

    def _api_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/api/v2/monitor/health", timeout=5) as r:
                return r.status == 200
        except (OSError, ValueError):
            return False

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"airflow {name} exited ({p.returncode}); its log:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.home / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    def _select(self, sql: str, args: tuple) -> list[tuple]:
        db = sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=30)
        try:
            return db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:  # not migrated yet
            if "no such table" in str(exc):
                return [(0,)]
            raise
        finally:
            db.close()

    def runs(self, dag_id: str) -> list[DagRunRow]:
        rows = self._select("SELECT run_id, run_type, state, data_interval_start, data_interval_end FROM dag_run "
                            "WHERE dag_id = ? ORDER BY data_interval_start, run_id", (dag_id,))
        return [DagRunRow(r[0], r[1], r[2], _utc(r[3]), _utc(r[4])) for r in rows]

    def stop(self) -> None:
        """SIGTERM each component (the scheduler first: it ends its workers), SIGKILL after 30 s, then
        SIGKILL whatever is left of each component's session: task processes run in process groups
        of their own, but in the session of the component that started them."""
        for name in ("scheduler", "dag-processor", "api-server"):
            p = self.procs.get(name)
            if p is None:
                continue
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)
            for pid in session_pids(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def session_pids(sid: int) -> list[int]:
    """Processes of session ``sid`` (field 6 of /proc/PID/stat)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            out.append(int(stat.parent.name))
    return out

def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


def wait_for(ready: Callable[[], bool], timeout_s: float, what: str, check: Callable[[], None] = lambda: None,
             poll_s: float = 2.0) -> None:
    """Poll ``ready`` until it is true; ``check`` raises if waiting is pointless (a component died)."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)

