"""The Airflow DAGs in dags/: they import cleanly, and run end to end with dag.test() into chdb.

Airflow runs in a process of its own — `ccab dags list|test`, the same commands `make demo` uses
— never inside pytest: importing Airflow registers at-fork handlers and starts threads, and a
later fork without exec in the test process (the simulator's worker pool) could deadlock. Inside
that process ``dag.test()`` runs each task in-process, so the tasks open the test's embedded
warehouse themselves (the test closes its own handle first: one process per data directory).
A local Airflow home (SQLite: ``airflow db migrate`` + the ``clickhouse`` pool) is prepared once
per session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from ccab import cli
from ccab.base import schema as migrate
from ccab.base.warehouse import ServerWarehouse
from ccab_workshop import dags_local as airflow_local
from ccab.ingest.loader import load_files
from cohort_reference import (actual_heatmap, actual_rollup, assert_rollups_match, expected_heatmap,
                                    expected_rollup, read_jsonl)

H12 = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
H13 = H12 + timedelta(hours=1)
H14 = H12 + timedelta(hours=2)
DAG_IDS = {"ccab_cohorts_hourly", "ccab_compare", "ccab_daily_report"}


def ccab(env: dict, *args: str, timeout: int = 600) -> list | dict:
    """Run ``ccab ARGS --json`` in a fresh process with ``env``; its last stdout line, parsed."""
    proc = subprocess.run([sys.executable, "-m", "ccab.cli", *args, "--json"], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout)
    assert proc.returncode == 0, f"ccab {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def airflow(tmp_path_factory, warehouse_service) -> dict:
    """A local Airflow home prepared once (db migrate + pool) by `ccab dags list`: its
    environment (``env``) and what `ccab dags list --json` reported (``dags``)."""
    home = tmp_path_factory.mktemp("airflow-home")
    env = {**airflow_local.environment(home), "CCAB_DATA_DIR": str(tmp_path_factory.mktemp("airflow-data")),
           "CCAB_CLICKHOUSE_URL": f"{warehouse_service}/t_airflow_list"}
    listed = ccab(env, "dags", "list")
    assert listed["import_errors"] == {}
    return {"env": env, "dags": listed["dags"]}


@pytest.fixture(scope="module")
def records(tiny_world):
    return read_jsonl(tiny_world / "ccab.tcp.v1.jsonl"), read_jsonl(tiny_world / "ccab.http.v1.jsonl")


def test_dag_files_import_with_tags_retries_and_the_clickhouse_pool(airflow):
    dags = {d["dag_id"]: d for d in airflow["dags"]}
    assert set(dags) == DAG_IDS
    for dag in dags.values():
        assert "ccab" in dag["tags"] and len(dag["tags"]) >= 2, dag
        assert dag["timetable"] == "CronDataIntervalTimetable", dag
        assert dag["max_active_runs"] == 1
        assert dag["tasks"], dag
        for t in dag["tasks"]:
            assert t["retries"] >= 2, (dag["dag_id"], t)
            assert t["pool"] == airflow_local.POOL, (dag["dag_id"], t)


def test_schedules_give_real_one_hour_and_one_day_intervals(airflow):
    """A cron string would give zero-width intervals in Airflow 3 (platform notes): not here."""
    day = datetime(2025, 11, 20, tzinfo=timezone.utc)
    got = ccab(airflow["env"], "dags", "test", *sorted(DAG_IDS), "--from", day.isoformat(),
               "--to", (day + timedelta(days=2)).isoformat(), "--dry-run")
    iv = {d: [(datetime.fromisoformat(s), datetime.fromisoformat(e)) for s, e in x] for d, x in got.items()}
    assert [e - s for s, e in iv["ccab_cohorts_hourly"]] == [timedelta(hours=1)] * 48
    assert (H12, H13) in iv["ccab_cohorts_hourly"]
    assert [e - s for s, e in iv["ccab_compare"]] == [timedelta(hours=1)] * 48
    assert all(s.minute == 15 for s, _ in iv["ccab_compare"])
    assert [e - s for s, e in iv["ccab_daily_report"]] == [timedelta(days=1)] * 2


def test_dag_files_do_no_heavy_imports_at_top_level():
    """Parsing a DAG file must not import the warehouse engine, pandas, matplotlib or the job."""
    code = (
        "import sys, runpy, json\n"
        "import airflow.sdk\n"
        "before = set(sys.modules)\n"
        f"for f in {sorted(str(p) for p in airflow_local.DAGS_DIR.glob('*.py'))!r}: runpy.run_path(f)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    env = {**airflow_local.environment(Path("/nonexistent-airflow-home")), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    new = json.loads(out.stdout.strip().splitlines()[-1])
    heavy = [m for m in new if m.split(".")[0] in ("chdb", "pandas", "matplotlib", "numpy", "scipy", "statsmodels")
             or m.startswith("ccab.")]
    assert heavy == [], heavy


def run_dag(env: dict, dag_id: str, start: datetime, end: datetime) -> list[tuple[datetime, datetime, str]]:
    runs = ccab(env, "dags", "test", dag_id, "--from", start.isoformat(), "--to", end.isoformat())
    return [(datetime.fromisoformat(r["start"]), datetime.fromisoformat(r["end"]), r["state"]) for r in runs
            if r["dag_id"] == dag_id]


def test_hourly_dag_with_late_rows_then_compare_and_report(airflow, records, tmp_path):
    """dag.test() of ccab_cohorts_hourly over two hours of simulated data into chdb, the second
    hour's tcp samples arriving late; then ccab_compare and ccab_daily_report on the result."""
    tcp, http = records
    h13_ms = int(H13.timestamp() * 1000)
    data = tmp_path / "data"
    url = airflow["env"]["CCAB_CLICKHOUSE_URL"].rsplit("/", 1)[0] + f"/t_{uuid.uuid4().hex[:12]}"
    env = {**airflow["env"], "CCAB_DATA_DIR": str(data), "CCAB_CLICKHOUSE_URL": url}
    wh = ServerWarehouse(url)
    migrate.migrate(wh, log=lambda _m: None)
    (tmp_path / "h12.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tcp + http if r["ts_ms"] < h13_ms))
    (tmp_path / "h13.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tcp + http if r["ts_ms"] >= h13_ms))
    assert not load_files(wh, [tmp_path / "h12.jsonl"]).dead
    wh.close()  # the tasks open the warehouse themselves

    assert run_dag(env, "ccab_cohorts_hourly", H12, H13) == [(H12, H13, "success")]
    wh = ServerWarehouse(url)
    early_tcp = [r for r in tcp if r["ts_ms"] < h13_ms]
    early_http = [r for r in http if r["ts_ms"] < h13_ms]
    assert_rollups_match(expected_rollup(early_tcp, early_http), actual_rollup(wh))
    assert not load_files(wh, [tmp_path / "h13.jsonl"]).dead  # the next hour, after 12:00 was computed
    wh.close()

    # the 13:00 interval, then ccab_compare: its interval [13:15, 14:15) summarises the 24 h before
    # 14:00 (it also runs [12:15, 13:15), which ends inside the window)
    runs = ccab(env, "dags", "test", "ccab_cohorts_hourly", "ccab_compare", "--from", H13.isoformat(),
                "--to", (H14 + timedelta(minutes=15)).isoformat())
    assert [(r["dag_id"], r["end"], r["state"]) for r in runs] == [
        ("ccab_cohorts_hourly", "2025-11-20T14:00:00+00:00", "success"),
        ("ccab_compare", "2025-11-20T13:15:00+00:00", "success"),
        ("ccab_compare", "2025-11-20T14:15:00+00:00", "success")]
    wh = ServerWarehouse(url)
    try:
        # 12:00 was recomputed by recompute_late_hours: connections that continued into 13:00 moved
        assert_rollups_match(expected_rollup(tcp, http), actual_rollup(wh))
        assert expected_heatmap(tcp) == actual_heatmap(wh)
        marks = wh.query("SELECT hour FROM cohort_watermarks FINAL ORDER BY hour").rows
        assert [m[0] for m in marks] == ["2025-11-20 12:00:00", "2025-11-20 13:00:00"]
    finally:
        wh.close()

    day_end = datetime(2025, 11, 21, tzinfo=timezone.utc)
    assert [r[2] for r in run_dag(env, "ccab_daily_report", day_end, day_end + timedelta(hours=1))] == ["success"]

    wh = ServerWarehouse(url)
    try:
        arms = wh.query("SELECT arm, n FROM cohort_arm_summaries FINAL WHERE metric = 'rtt_us' AND segment = 'all' "
                        "AND window_end = '2025-11-20 14:00:00' ORDER BY arm").rows
        n_conns = len({(r["host"], r["sock_id"]) for r in tcp})
        assert sum(n for _, n in arms) == n_conns and len(arms) == 3
    finally:
        wh.close()
    report = data / "reports" / "2025-11-20" / "tst1" / "tst1-tiny"
    pngs = sorted(p.name for p in report.glob("*.png"))
    assert "heatmap_rtt_retrans.png" in pngs and "pdf_retrans_pct.png" in pngs and len(pngs) == 12
    assert all((report / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "| control | cubic |" in (report / "summary.md").read_text()


def test_the_test_process_never_imports_airflow():
    """Guard for the rule above (keep it last in this file)."""
    assert "airflow" not in sys.modules


def test_ctrl_c_stops_dags_test_at_once_with_one_line(airflow):
    """Ctrl-C (SIGINT to the process, as a terminal sends it) during `ccab dags test`: no traceback,
    no retry of the interrupted task, no next interval; exit 130 and one line naming the run."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "ccab.cli", "dags", "test", "ccab_cohorts_hourly", "--from",
                             H12.isoformat(), "--to", (H12 + timedelta(hours=6)).isoformat()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **airflow["env"]})
    first = proc.stdout.readline()
    assert "run 1/6" in first, first + proc.stderr.read()
    time.sleep(0.5)  # inside dag.test of the first interval (or the next): Airflow's task runner holds it
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    out = first + out
    assert proc.returncode == 130, (proc.returncode, out[-3000:], err[-3000:])
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, err[-3000:]
    assert "run 6/6" not in out, out
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("ccab dags test: interrupted (Ctrl-C) during ccab_cohorts_hourly [2025-11-20 "), lines
    assert "later runs not started" in lines[-1]
