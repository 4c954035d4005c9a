"""The Airflow DAGs in dags/: they import cleanly, and run end to end with dag.test() into chdb.

A local Airflow home (SQLite) is prepared once per session (``airflow db migrate`` + the
``clickhouse`` pool); ``dag.test()`` runs the tasks in this process, so they open the test's
embedded warehouse themselves (the test closes its own handle first: one process per path).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ccab import cli, migrate
from ccab.cohorts import airflow_local
from ccab.loader import load_files
from ccab.warehouse import ChdbWarehouse
from test_cohorts_reference import (actual_heatmap, actual_rollup, assert_rollups_match, expected_heatmap,
                                    expected_rollup, read_jsonl)

H12 = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
H13 = H12 + timedelta(hours=1)
H14 = H12 + timedelta(hours=2)
DAG_IDS = {"ccab_cohorts_hourly", "ccab_compare", "ccab_daily_report"}


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory):
    env = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("airflow-home")
    for key, value in airflow_local.environment(home).items():
        env.setenv(key, value)
    airflow_local.configure(home)
    yield home
    env.undo()


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim-tiny-dags")
    assert cli.main(["sim", "tiny", "--out", str(out), "--hours", "2", "--workers", "1", "--no-progress"]) == 0
    return read_jsonl(out / "ccab.tcp.v1.jsonl"), read_jsonl(out / "ccab.http.v1.jsonl")


def test_dag_files_import_with_tags_retries_and_the_clickhouse_pool(airflow_home):
    from airflow.sdk import CronDataIntervalTimetable

    bag = airflow_local.dag_bag()
    assert bag.import_errors == {}
    assert set(bag.dags) == DAG_IDS
    for dag in bag.dags.values():
        assert "ccab" in dag.tags and len(dag.tags) >= 2, dag.dag_id
        assert isinstance(dag.timetable, CronDataIntervalTimetable), dag.dag_id
        assert dag.max_active_runs == 1
        for t in dag.tasks:
            assert t.retries >= 2, (dag.dag_id, t.task_id)
            assert t.pool == airflow_local.POOL, (dag.dag_id, t.task_id)


def test_schedules_give_real_one_hour_and_one_day_intervals(airflow_home):
    """A cron string would give zero-width intervals in Airflow 3 (platform notes): not here."""
    bag = airflow_local.dag_bag()
    hourly = airflow_local.intervals(bag.dags["ccab_cohorts_hourly"], H12, H14)
    assert hourly == [(H12, H13), (H13, H14)]
    compare = airflow_local.intervals(bag.dags["ccab_compare"], H12, H14)
    assert [e - s for s, e in compare] == [timedelta(hours=1)] * 2 and compare[0][0].minute == 15
    day = datetime(2025, 11, 20, tzinfo=timezone.utc)
    daily = airflow_local.intervals(bag.dags["ccab_daily_report"], day, day + timedelta(days=2), step=timedelta(minutes=30))
    assert [e - s for s, e in daily] == [timedelta(days=1)] * 2


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


def test_hourly_dag_with_late_rows_then_compare_and_report(airflow_home, records, tmp_path, monkeypatch):
    """dag.test() of ccab_cohorts_hourly over two hours of simulated data into chdb, the second
    hour's tcp samples arriving late; then ccab_compare and ccab_daily_report on the result."""
    tcp, http = records
    h13_ms = int(H13.timestamp() * 1000)
    data = tmp_path / "data"
    wh = ChdbWarehouse(data / "warehouse")
    migrate.migrate(wh, log=lambda _m: None)
    first = [r for r in tcp + http if r["ts_ms"] < h13_ms]
    (tmp_path / "h12.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    (tmp_path / "h13.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tcp + http if r["ts_ms"] >= h13_ms))
    assert not load_files(wh, [tmp_path / "h12.jsonl"]).dead
    wh.close()  # the tasks open the warehouse themselves
    monkeypatch.setenv("CCAB_DATA_DIR", str(data))
    monkeypatch.delenv("CCAB_CLICKHOUSE_URL", raising=False)

    runs = airflow_local.test_intervals("ccab_cohorts_hourly", H12, H13)
    assert [(r.start, r.end, r.state) for r in runs] == [(H12, H13, "success")]

    wh = ChdbWarehouse(data / "warehouse")
    early_tcp = [r for r in tcp if r["ts_ms"] < h13_ms]
    early_http = [r for r in http if r["ts_ms"] < h13_ms]
    assert_rollups_match(expected_rollup(early_tcp, early_http), actual_rollup(wh))
    assert not load_files(wh, [tmp_path / "h13.jsonl"]).dead  # the next hour, after 12:00 was computed
    wh.close()

    runs = airflow_local.test_intervals("ccab_cohorts_hourly", H13, H14)
    assert [(r.start, r.end, r.state) for r in runs] == [(H13, H14, "success")]
    wh = ChdbWarehouse(data / "warehouse")
    try:
        # 12:00 was recomputed by recompute_late_hours: connections that continued into 13:00 moved
        assert_rollups_match(expected_rollup(tcp, http), actual_rollup(wh))
        assert expected_heatmap(tcp) == actual_heatmap(wh)
    finally:
        wh.close()

    runs = airflow_local.test_intervals("ccab_compare", H14, H14 + timedelta(hours=1))
    assert [r.state for r in runs] == ["success"]
    day_end = datetime(2025, 11, 21, tzinfo=timezone.utc)
    runs = airflow_local.test_intervals("ccab_daily_report", day_end, day_end + timedelta(hours=1))
    assert [r.state for r in runs] == ["success"]

    wh = ChdbWarehouse(data / "warehouse")
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
