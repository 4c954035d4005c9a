"""ccab_cohorts_hourly — per-cohort distributions of the last hour, into the ClickHouse rollups.

Every hour, for the data interval [start, end):
  rollup_interval       recompute that hour of cohort_hourly / cohort_heatmap_hourly /
                        cohort_prefix_hourly (staging table + REPLACE PARTITION: a re-run replaces
                        the hour, never doubles or drops it)
  recompute_late_hours  recompute the hours of the 24 h before it whose raw rows changed since
                        they were computed (late data; watermarks in cohort_watermarks)

Thin: the work is ccab.dags.tasks (the same functions `ccab analyze` runs). Both tasks use the
pool `clickhouse` (1 slot: an embedded chdb warehouse is one process at a time). Retry delay:
Airflow's [core] default_task_retry_delay. Docs: docs/cohorts/README.md.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow.sdk import CronDataIntervalTimetable, dag, task

LOOKBACK_HOURS = 24


@dag(
    dag_id="ccab_cohorts_hourly",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=datetime(2025, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["ccab", "cohorts", "clickhouse"],
    default_args={"owner": "ccab", "retries": 3, "pool": "clickhouse"},
    doc_md=__doc__,
)
def ccab_cohorts_hourly():
    @task
    def rollup_interval(data_interval_start=None, data_interval_end=None) -> dict:
        from ccab.dags.tasks import rollup_interval as run

        return run(data_interval_start, data_interval_end)

    @task
    def recompute_late_hours(data_interval_start=None) -> dict:
        from ccab.dags.tasks import recompute_late_hours as run

        return run(data_interval_start, lookback_hours=LOOKBACK_HOURS)

    rollup_interval() >> recompute_late_hours()


ccab_cohorts_hourly()
