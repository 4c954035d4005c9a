"""A local Airflow for running ccab's DAGs in-process with ``dag.test()`` (tests, ``make demo``).

Airflow reads its configuration when it is first imported, so :func:`configure` must run before
anything imports ``airflow`` in this process. It points Airflow at

- ``AIRFLOW_HOME``: the environment's, else ``$CCAB_DATA_DIR/airflow`` (a SQLite metadata DB);
- ``dags/`` of this repository as the dags folder, no example DAGs;
- a 1-second retry delay (production keeps Airflow's default of 300 s: the DAGs do not set one),
- log level WARNING unless ``AIRFLOW__LOGGING__LOGGING_LEVEL`` says otherwise (task failures
  still print their traceback),

runs ``airflow db migrate`` once per home and creates the pool ``clickhouse`` (1 slot).
``dag.test()`` then runs each task in this very process — which is what lets a task open the
embedded chdb warehouse (one process per data directory), provided the caller has closed its own
handle on it first.

Run it in a process of its own (``ccab dags ...``): importing Airflow registers at-fork handlers
and starts threads, and a later ``fork()`` without exec in the same process (a multiprocessing
pool, say) can deadlock in the child. The tests call the CLI in a subprocess for that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from ccab.base.config import REPO_ROOT, settings

DAGS_DIR = REPO_ROOT / "dags"
POOL = "clickhouse"
POOL_SLOTS = 1
_MARKER = ".ccab-airflow-ready"


class AirflowLocalError(RuntimeError):
    """The local Airflow could not be prepared, or a DAG is missing or broken."""


@dataclass
class RunResult:
    dag_id: str
    start: datetime
    end: datetime
    state: str
    seconds: float


def default_home() -> Path:

    return Path(os.environ.get("AIRFLOW_HOME") or settings().data_dir / "airflow")


def environment(home: Path, dags_folder: Path = DAGS_DIR) -> dict[str, str]:
    """The Airflow settings of a local home, as environment variables."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING"),
    }


def _airflow_cli(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "airflow", *args], env={**os.environ, **env},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise AirflowLocalError(f"`airflow {' '.join(args)}` failed (exit {proc.returncode}):\n{tail}")


def configure(home: Path | None = None, dags_folder: Path = DAGS_DIR) -> Path:
    """Point this process (and its children) at a local Airflow home; prepare it once.

    Raises
    ------
    AirflowLocalError
        ``airflow`` was already imported with another home (configure earlier, before any
        import of airflow), or ``airflow db migrate`` failed.
    """
    home = Path(home or default_home()).absolute()
    env = environment(home, dags_folder)
    if "airflow.configuration" in sys.modules and os.environ.get("AIRFLOW_HOME") != env["AIRFLOW_HOME"]:
        raise AirflowLocalError(
            f"airflow was imported before ccab configured it (AIRFLOW_HOME={os.environ.get('AIRFLOW_HOME')!r}, "
            f"wanted {home}); call ccab_workshop.dags_local.configure() before importing airflow")
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(env)
    marker = home / _MARKER
    if not marker.exists():
        _airflow_cli(["db", "migrate"], env)
        _airflow_cli(["pools", "set", POOL, str(POOL_SLOTS),
                      "ClickHouse: one slot (an embedded chdb warehouse is one process at a time)"], env)
        marker.write_text("ok\n")
    return home


def dag_bag(dags_folder: Path = DAGS_DIR):
    """Parse the dags folder (``DagBag``; its ``import_errors`` say what failed)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(dags_folder))


def describe(dag) -> dict:
    """What the tests check of a DAG, as plain data (so they need not import Airflow themselves)."""
    return {"dag_id": dag.dag_id, "timetable": type(dag.timetable).__name__, "schedule": describe_schedule(dag),
            "tags": sorted(dag.tags), "max_active_runs": dag.max_active_runs,
            "tasks": [{"task_id": t.task_id, "retries": t.retries, "pool": t.pool} for t in dag.tasks]}


def dag_intervals(dag_id: str, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """The data intervals of ``dag_id`` that end in ``(start, end]``."""
    return intervals(_get_dag(dag_id), start, end)


def _get_dag(dag_id: str):
    bag = dag_bag()
    dag = bag.dags.get(dag_id)
    if dag is None:
        errors = "; ".join(f"{p}: {e}" for p, e in bag.import_errors.items())
        raise AirflowLocalError(f"no DAG {dag_id!r} in {DAGS_DIR} (found: {', '.join(sorted(bag.dags)) or 'none'})"
                                + (f"; import errors: {errors}" if errors else ""))
    return dag


def describe_schedule(dag) -> str:
    tt = dag.timetable
    expr = getattr(tt, "_expression", None) or getattr(tt, "expression", None) or ""
    return f"{type(tt).__name__}({expr!r})" if expr else type(tt).__name__


def intervals(dag, start: datetime, end: datetime, step: timedelta = timedelta(minutes=5)) -> list[tuple[datetime, datetime]]:
    """The DAG's data intervals that end in ``(start, end]``, in order (found by asking its
    timetable for a manual run's interval, exactly as ``dag.test()`` does)."""
    from airflow.sdk import timezone as af_tz
    from airflow.serialization.encoders import coerce_to_core_timetable

    core = coerce_to_core_timetable(dag.timetable)
    found: dict[datetime, datetime] = {}
    t = start + step
    while t <= end:
        iv = core.infer_manual_data_interval(run_after=af_tz.coerce_datetime(t))
        s, e = iv.start.astimezone(timezone.utc), iv.end.astimezone(timezone.utc)
        if e == t:
            found[s] = e
        t += step
    return sorted(found.items())


def test_intervals(dag_id: str, start: datetime, end: datetime,
                   log: Callable[[str], None] = lambda _m: None) -> list[RunResult]:
    """``dag.test()`` once per data interval of ``dag_id`` that ends in ``(start, end]``, in order.

    The logical date of each run is its interval's end: for a ``CronDataIntervalTimetable`` a
    manual run's interval is the last complete one before its logical date.
    """
    dag = _get_dag(dag_id)
    import warnings

    # Airflow 3.3's in-process execution API pulls in starlette's test client, which warns on import
    warnings.filterwarnings("ignore", message=".*starlette.testclient.*")
    out = []
    todo = list(intervals(dag, start, end))
    for i, (s, e) in enumerate(todo, 1):  # progress: which run of how many, with the time so far
        log(f"{time.strftime('%H:%M:%S')} dag.test {dag_id} [{s:%Y-%m-%d %H:%M}, {e:%Y-%m-%d %H:%M}) "
            f"run {i}/{len(todo)}" + (f", {sum(r.seconds for r in out):.0f} s so far" if out else ""))
        t0 = time.perf_counter()
        run = dag.test(logical_date=e)
        state = str(getattr(run.state, "value", run.state))
        out.append(RunResult(dag_id, s, e, state, time.perf_counter() - t0))
    return out
