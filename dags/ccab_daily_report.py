"""ccab_daily_report — the analysts' figures of the previous UTC day.

Daily at 00:30 UTC (after ccab_cohorts_hourly has rolled up the day's last hour), for the UTC
day that ended before the interval's end: heatmaps (RTT x retransmit %, RTT x in
flight), PDFs and CDFs per arm and a per-arm Markdown table for every (pop, rollout), written to
$CCAB_DATA_DIR/reports/<YYYY-MM-DD>/<pop>/<rollout>/. Reads only the rollups; re-running a day
overwrites its files. Thin: the work is ccab.report.daily via ccab.dags.tasks.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import CronDataIntervalTimetable, dag, task


@dag(
    dag_id="ccab_daily_report",
    schedule=CronDataIntervalTimetable("30 0 * * *", timezone="UTC"),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["ccab", "cohorts", "report"],
    default_args={"owner": "ccab", "retries": 2, "pool": "clickhouse"},
    doc_md=__doc__,
)
def ccab_daily_report():
    @task
    def render_report(data_interval_end=None) -> dict:
        from ccab.dags.tasks import daily_report

        return daily_report(data_interval_end)

    render_report()


ccab_daily_report()
