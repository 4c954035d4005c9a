"""ccab_compare — compare the arms over the last 24 h, every hour.

At :15 past each hour (after ccab_cohorts_hourly has rolled up the hour that just ended), for
the 24 whole hours before the interval's end: per-arm summaries of every metric and segment into
cohort_arm_summaries, then the statistical judge once it exists (ccab.judge.judge_window; see
ccab.cohorts.summaries). Reads only the rollups. Thin: the work is ccab.dags.tasks.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import CronDataIntervalTimetable, dag, task

WINDOW_HOURS = 24


@dag(
    dag_id="ccab_compare",
    schedule=CronDataIntervalTimetable("15 * * * *", timezone="UTC"),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["ccab", "cohorts", "judge", "clickhouse"],
    default_args={"owner": "ccab", "retries": 3, "pool": "clickhouse"},
    doc_md=__doc__,
)
def ccab_compare():
    @task
    def compare_arms(data_interval_end=None) -> dict:
        from ccab.dags.tasks import compare_window

        return compare_window(data_interval_end, hours=WINDOW_HOURS)

    compare_arms()


ccab_compare()
