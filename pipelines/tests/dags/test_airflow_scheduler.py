"""ccab_cohorts_hourly under a real Airflow 3: API server, DAG processor and scheduler
(LocalExecutor, SQLite metadata DB) run its scheduled intervals and a backfill unattended.

Simulated data covers the 4 hours before the current hour H. The DAG file is ``dags/`` 's own,
copied with two lines changed so that it has recent intervals to catch up on: ``start_date`` = H-2h
and ``catchup=True`` (the deployed file keeps catchup off). The scheduler then runs [H-2, H-1) and
[H-1, H) on its own; ``airflow backfill create`` asks for [H-4, H-2), which the scheduler runs too.
The warehouse is then compared with the cohort job run directly on the same rows in a second
warehouse, and with the independent reference (``cohort_reference``).

Slow (several minutes: ``airflow db migrate``, three Airflow processes, one task process per task):
marked ``airflow_scheduler``, which ``make test`` leaves out and ``make test-airflow`` runs.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest
from airflow_services import AirflowServices, wait_for
from ccab import cli
from ccab.base import schema as migrate
from ccab.base.warehouse import ServerWarehouse
from ccab.cohorts.job import run_window
from ccab_workshop import dags_local as airflow_local
from ccab.ingest.loader import load_files
from cohort_reference import (actual_heatmap, actual_rollup, assert_rollups_match, expected_heatmap,
                              expected_rollup, read_jsonl)

pytestmark = [pytest.mark.airflow_scheduler, pytest.mark.slow, pytest.mark.timeout(3000)]

DAG_ID = "ccab_cohorts_hourly"
DEPLOYED_START = "start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),"
DEPLOYED_CATCHUP = "catchup=False,"


def dag_with_recent_start(start: datetime) -> str:
    """The deployed DAG file with ``start_date`` = ``start`` and catchup on (each line replaced
    exactly once, so a change to the file fails here rather than testing something else)."""
    src = (airflow_local.DAGS_DIR / f"{DAG_ID}.py").read_text()
    assert src.count(DEPLOYED_START) == 1 and src.count(DEPLOYED_CATCHUP) == 1, \
        f"dags/{DAG_ID}.py changed its start_date/catchup lines: update this test's substitution"
    return (src.replace(DEPLOYED_START, f"start_date=datetime({start.year}, {start.month}, {start.day}, {start.hour}, "
                                        "tzinfo=timezone.utc),")
               .replace(DEPLOYED_CATCHUP, "catchup=True,"))


def test_scheduler_runs_scheduled_hours_and_a_backfill_like_the_job_run_directly(tmp_path, warehouse_service):
    now_hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    first, scheduled_from = now_hour - timedelta(hours=4), now_hour - timedelta(hours=2)

    sim = tmp_path / "sim"
    assert cli.main(["sim", "tiny", "--out", str(sim), "--hours", "4", "--connections", "400", "--workers", "1",
                     "--no-progress", "--start", first.isoformat()]) == 0
    tcp, http = read_jsonl(sim / "ccab.tcp.v1.jsonl"), read_jsonl(sim / "ccab.http.v1.jsonl")
    assert tcp and http
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in tcp + http))
    urls = {name: f"{warehouse_service}/t_{name.replace('-', '_')}_{os.getpid()}" for name in ("airflow-data", "direct-data")}
    for name in ("airflow-data", "direct-data"):
        wh = ServerWarehouse(urls[name])
        try:
            migrate.migrate(wh, log=lambda _m: None)
            assert not load_files(wh, [records]).dead
        finally:
            wh.close()

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(dag_with_recent_start(scheduled_from))
    af = AirflowServices(tmp_path / "airflow-home", dags,
                         {"CCAB_DATA_DIR": str(tmp_path / "airflow-data"), "CCAB_CLICKHOUSE_URL": urls["airflow-data"]})
    want_scheduled = [(scheduled_from + timedelta(hours=i), scheduled_from + timedelta(hours=i + 1)) for i in range(2)]
    want_backfill = [(first + timedelta(hours=i), first + timedelta(hours=i + 1)) for i in range(2)]
    try:
        af.start()

        def finished(kind: str, want: list) -> bool:
            runs = {(r.start, r.end): r for r in af.runs(DAG_ID) if r.run_type == kind}
            failed = [r for r in runs.values() if r.state == "failed"]
            assert not failed, f"{kind} run(s) failed: {failed}\nscheduler log:\n{af.log_tail('scheduler')}"
            return all(iv in runs and runs[iv].state == "success" for iv in want)

        # the backfill is asked for once the DAG processor has parsed the DAG, before the scheduler
        # starts (SQLite: one writer at a time); the scheduler then runs it and the scheduled hours
        wait_for(lambda: af.serialized(DAG_ID), 600, f"the DAG processor to parse {DAG_ID}", af.check_alive)
        af.airflow("backfill", "create", "--dag-id", DAG_ID, "--from-date", first.isoformat(),
                         "--to-date", (first + timedelta(hours=1)).isoformat())  # logical dates, inclusive
        assert [(r.start, r.end) for r in af.runs(DAG_ID) if r.run_type == "backfill"] == want_backfill
        af.start_scheduler()
        wait_for(lambda: finished("scheduled", want_scheduled) and finished("backfill", want_backfill), 1500,
                 "the scheduled and backfill runs to succeed", af.check_alive, poll_s=5)
        # nothing may still hold the warehouse (a run of a new hour if the clock crossed one)
        wait_for(lambda: all(r.state in ("success", "failed") for r in af.runs(DAG_ID)), 600,
                 "every run to finish", af.check_alive, poll_s=5)
        runs = af.runs(DAG_ID)
    finally:
        af.stop()

    assert [(r.start, r.end) for r in runs if r.run_type == "backfill"] == want_backfill
    assert [(r.start, r.end) for r in runs if r.run_type == "scheduled"][:2] == want_scheduled
    assert all(r.state == "success" for r in runs), runs

    direct = ServerWarehouse(urls["direct-data"])
    try:
        run_window(direct, first, now_hour, lookback=False)
        want, want_heatmap = actual_rollup(direct), actual_heatmap(direct)
    finally:
        direct.close()
    hours = [(first + timedelta(hours=i)).strftime("%Y-%m-%d %H:%M:%S") for i in range(4)]
    assert want and {k[0] for k in want} == set(hours)
    airflowed = ServerWarehouse(urls["airflow-data"])
    try:
        assert_rollups_match(want, actual_rollup(airflowed))
        assert want_heatmap == actual_heatmap(airflowed)
        assert_rollups_match(expected_rollup(tcp, http), actual_rollup(airflowed))
        assert expected_heatmap(tcp) == actual_heatmap(airflowed)
        marks = [m[0] for m in airflowed.query("SELECT hour FROM cohort_watermarks FINAL ORDER BY hour").rows]
        assert marks[:4] == hours
    finally:
        airflowed.close()
