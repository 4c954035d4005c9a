"""What the Airflow DAGs in ``dags/`` call: one function per task, warehouse opened and closed inside.

Each takes the task's data interval (aware datetimes), never the wall clock, and returns a small
JSON-able dict (it becomes the task's XCom). The warehouse comes from the environment
(``CCAB_CLICKHOUSE_URL`` or the embedded chdb at ``$CCAB_DATA_DIR/warehouse``); an embedded
warehouse can be held by one process at a time, hence the Airflow pool ``clickhouse`` with one slot.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from ccab.base.chtime import utc_hour
from ccab.base.config import settings
from ccab.cohorts.job import DEFAULT_BULK_MIN_BYTES, JobConfig, refresh_late, run_window
from ccab.pipeline import analyze_window
from ccab.pipeline import open_warehouse as warehouse
from ccab.report.daily import render_report, report_dir


def rollup_interval(start: datetime, end: datetime, bulk_min_bytes: int = DEFAULT_BULK_MIN_BYTES) -> dict:
    """Recompute every hour of ``[start, end)`` (the scheduled interval)."""
    with warehouse() as wh:
        report = run_window(wh, start, end, JobConfig(bulk_min_bytes=bulk_min_bytes), lookback=False)
    return {"window": [report.start.isoformat(), report.end.isoformat()], "summary": report.summary(),
            "hours": [{"hour": h.hour.isoformat(), "skipped": h.skipped, "connections": h.connections,
                       "rollup_rows": h.rollup_rows} for h in report.hours]}


def recompute_late_hours(before: datetime, lookback_hours: int = 24,
                         bulk_min_bytes: int = DEFAULT_BULK_MIN_BYTES) -> dict:
    """Recompute the hours of ``[before - lookback, before)`` whose raw rows changed since."""
    cfg = JobConfig(bulk_min_bytes=bulk_min_bytes, lookback=timedelta(hours=lookback_hours))
    with warehouse() as wh:
        report = refresh_late(wh, before, cfg)
    return {"lookback": [report.start.isoformat(), report.end.isoformat()], "summary": report.summary(),
            "recomputed": [{"hour": h.hour.isoformat(), "reason": h.reason} for h in report.computed]}


def compare_window(end: datetime, hours: int = 24, rollout_id: str = "") -> dict:
    """Per-arm summaries and the judge's verdicts of the ``hours`` before ``end``'s hour (alerts go to
    ``CCAB_ALERT_WEBHOOK_URL`` when set)."""
    end = utc_hour(end.replace(minute=0, second=0, microsecond=0))
    with warehouse() as wh:
        result = analyze_window(wh, end - timedelta(hours=hours), end, rollout_id,
                             notify_url=settings().alert_webhook_url)
    return result.as_dict()


def daily_report(end: datetime, out_dir: Path | None = None) -> dict:
    """Heatmaps, PDFs, CDFs and the per-arm table of the UTC day before ``end`` (PNG + Markdown)."""
    day_end = end.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    day = day_end - timedelta(days=1)
    out = out_dir or report_dir(day)
    with warehouse() as wh:
        files = render_report(wh, day, day_end, out)
    return {"day": day.date().isoformat(), "dir": str(out), "files": [str(p) for p in files]}
