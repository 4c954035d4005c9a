"""Time as the warehouse has it: UTC hours (the cohort unit) and ClickHouse ``DateTime('UTC')``
text, both ways. The one place that formats or parses a ClickHouse time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

HOUR = timedelta(hours=1)
CH_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def utc_hour(value: datetime) -> datetime:
    """``value`` as an aware UTC datetime on an hour boundary; naive means UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    # a plain datetime, whatever came in (Airflow passes pendulum DateTimes, which do not compare
    # with stdlib-aware datetimes)
    value = datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                     value.microsecond, tzinfo=timezone.utc)
    if value != value.replace(minute=0, second=0, microsecond=0):
        raise ValueError(f"{value.isoformat()} is not on an hour boundary (cohort hours are UTC hours)")
    return value


def floor_hour(value: datetime) -> datetime:
    """The UTC hour that contains the instant ``value`` (any instant: 12:24:28.293 -> 12:00; naive
    means UTC). Use this for every hour derived from an event's time (an assignment, a record, now);
    :func:`utc_hour` is for values that must already be hours (a CLI's ``--from``, a DAG's interval)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    value = value.astimezone(timezone.utc)
    return datetime(value.year, value.month, value.day, value.hour, tzinfo=timezone.utc)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The hours in ``[start, end)``; both must be on hour boundaries."""
    start, end = utc_hour(start), utc_hour(end)
    if end < start:
        raise ValueError(f"window end {end.isoformat()} is before its start {start.isoformat()}")
    out, h = [], start
    while h < end:
        out.append(h)
        h += HOUR
    return out


def covering_hours(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The whole UTC hours that cover ``[start, end)``: ``start`` floored and ``end`` ceiled to the
    hour (a window already on hour boundaries is returned unchanged; naive means UTC)."""
    lo, hi = floor_hour(start), floor_hour(end)
    end_utc = (end if end.tzinfo else end.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)
    if hi < end_utc:
        hi += HOUR
    if hi < lo:
        raise ValueError(f"window end {end.isoformat()} is before its start {start.isoformat()}")
    return lo, hi


def sql_time(value: datetime) -> str:
    """A UTC datetime as ClickHouse reads a ``DateTime('UTC')`` parameter."""
    return value.astimezone(timezone.utc).strftime(CH_TIME_FORMAT)


def parse_sql_time(text: str) -> datetime:
    """A ClickHouse ``DateTime('UTC')`` as text (``2025-11-20 13:00:00``) -> an aware UTC datetime."""
    return datetime.strptime(text, CH_TIME_FORMAT).replace(tzinfo=timezone.utc)
