"""The hourly cohort job: raw rows of one hour -> the cohort rollups, idempotently.

``rollup_hour(wh, hour)`` rewrites exactly one hour of ``cohort_hourly`` (sums and counts),
``cohort_cells_hourly`` (histogram cells), ``cohort_heatmap_hourly`` and ``cohort_prefix_hourly`` (``rollup_hours`` several, each run of
consecutive hours with one statement per SQL file: see its docstring):

1. the hour's partitions of the ``*_stage`` tables are cleared (leftovers of a failed run);
2. the fingerprint of the raw rows the hour depends on is read (tcp_samples in
   ``[hour, hour+2h)``, http_requests in ``[hour, hour+1h)``);
3. the SQL in ``cohorts/sql/`` fills the stage tables (prefix classes -> per-connection rows ->
   metric summaries and heatmap counts) — all aggregation happens in ClickHouse;
4. each target's partition is swapped in with ``ALTER TABLE t REPLACE PARTITION ID ... FROM
   t_stage`` (or dropped, when the hour now has no rows for it), the stage is cleared;
5. the fingerprint is recorded in ``cohort_watermarks`` — last, so an hour whose run died half
   way still looks stale and is redone.

Running an hour again replaces it with the same result: re-runs never double or drop rows.

``stale_hours`` finds the hours whose raw rows changed since they were computed (late data), or
that were computed with other SQL or another bulk filter, or never; ``run_window`` computes a
window's hours and then those stale hours of its look-back. Hours whose raw rows are all gone
(expired after 90 days) are never recomputed: the rollups keep the history.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable, Mapping

from ccab.base.chtime import HOUR, hours_between, parse_sql_time, sql_time, utc_hour
from ccab.base.warehouse import Warehouse, WarehouseError
from ccab.cohorts.daily import SOURCES as DAILY_SOURCES, STAGE_INSERT_SETTINGS, add_hours, refresh_day

SQL_DIR = Path(__file__).with_name("sql")
DEFAULT_BULK_MIN_BYTES = 1 << 20
DEFAULT_LOOKBACK = timedelta(hours=24)

#: stage -> target tables swapped per hour, in the order they are swapped
SWAPS: tuple[tuple[str, str], ...] = (
    ("cohort_prefix_hourly_stage", "cohort_prefix_hourly"),
    ("cohort_hourly_stage", "cohort_hourly"),
    ("cohort_cells_hourly_stage", "cohort_cells_hourly"),
    ("cohort_heatmap_hourly_stage", "cohort_heatmap_hourly"),
)
SCRATCH = "cohort_connections_stage"
#: (sql file, stage table it fills), in dependency order
STEPS: tuple[tuple[str, str], ...] = (
    ("prefix_classes.sql", "cohort_prefix_hourly_stage"),
    ("connections.sql", "cohort_connections_stage"),
    # each metric family: its sums and counts (*_metrics.sql), its histograms as cells (*_cells.sql)
    ("connection_metrics.sql", "cohort_hourly_stage"),
    ("connection_cells.sql", "cohort_cells_hourly_stage"),
    ("sample_metrics.sql", "cohort_hourly_stage"),
    ("sample_cells.sql", "cohort_cells_hourly_stage"),
    ("request_metrics.sql", "cohort_hourly_stage"),
    ("request_cells.sql", "cohort_cells_hourly_stage"),
    # segments by the client's network (access type, country, ASN): cohorts/networks.py
    ("network_metrics.sql", "cohort_hourly_stage"),
    ("network_cells.sql", "cohort_cells_hourly_stage"),
    ("network_request_metrics.sql", "cohort_hourly_stage"),
    ("network_request_cells.sql", "cohort_cells_hourly_stage"),
    ("heatmap.sql", "cohort_heatmap_hourly_stage"),
)
#: the raw tables behind a connection (source_fingerprints.sql names each table)
TCP_SOURCES = ("tcp_samples", "tcp_conns")
#: the fleet's samples an hour's prefix classes pool, on a shard (``JobConfig.prefix_samples``)
FLEET_SAMPLES = "fleet_samples"
#: steps whose only source is tcp samples, or http requests: skipped for hours without them
SAMPLE_STEPS = frozenset({"prefix_classes.sql", "sample_metrics.sql", "sample_cells.sql"})
REQUEST_STEPS = frozenset({"request_metrics.sql", "request_cells.sql", "network_request_metrics.sql",
                           "network_request_cells.sql"})


class CohortJobError(RuntimeError):
    """A step of the cohort job failed; the message names the hour and the step."""


@dataclass(frozen=True)
class JobConfig:
    """Settings of the cohort job.

    Parameters
    ----------
    bulk_min_bytes : int
        Bulk filter: requests with ``body_bytes_sent`` below it have no goodput value, and
        connections with ``bytes_acked`` below it are not in the 'bulk' segment. Changing it makes
        every hour in a look-back stale (their watermark records the filter they used).
    lookback : timedelta
        How far before a window ``run_window`` looks for hours with late data.
    prefix_samples : str
        Where the prefix RTT classes pool ``min_rtt_us`` from. A class is a property of the client
        prefix across every host of the PoP, so on one shard of a cluster it must read the fleet's
        samples (the ``Distributed`` table, or ``merge()`` over the shard databases), not the
        shard's own: :func:`fleet_samples`. Default: this warehouse's ``tcp_samples``.
    """

    bulk_min_bytes: int = DEFAULT_BULK_MIN_BYTES
    lookback: timedelta = DEFAULT_LOOKBACK
    prefix_samples: str = "tcp_samples"

    def __post_init__(self):
        if self.bulk_min_bytes < 0:
            raise ValueError(f"bulk_min_bytes must be >= 0, got {self.bulk_min_bytes}")
        if self.lookback < timedelta(0) or self.lookback % HOUR:
            raise ValueError(f"lookback must be a whole number of hours >= 0, got {self.lookback}")
        if not _SAMPLES_SOURCE_RE.fullmatch(self.prefix_samples):
            raise ValueError(f"prefix_samples must be a table name (db.table) or a merge() over shard databases, "
                             f"got {self.prefix_samples!r}")


_SAMPLES_SOURCE_RE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)?|merge\(REGEXP\('\^[\w\[\]\-+|()]+\$'\), '\^tcp_samples\$'\)")


def fleet_samples(shard_databases_regexp: str) -> str:
    """``prefix_samples`` reading ``tcp_samples`` of every database matching the regexp (the
    one-engine shard layout; on a cluster, name the ``Distributed`` table instead)."""
    return f"merge(REGEXP('^{shard_databases_regexp}$'), '^tcp_samples$')"


@dataclass(frozen=True)
class Fingerprint:
    """The raw rows an hour depends on: row counts and newest ``_loaded_at`` per source."""

    tcp_rows: int
    tcp_max_loaded_at: str
    http_rows: int
    http_max_loaded_at: str
    own_rows: int  # rows whose event time is in the hour itself (tcp + http)


@dataclass(frozen=True)
class Watermark:
    fingerprint: Fingerprint
    bulk_min_bytes: int
    code_version: str


@dataclass
class HourResult:
    hour: datetime
    reason: str
    skipped: bool = False
    connections: int = 0
    rollup_rows: int = 0
    heatmap_rows: int = 0
    prefixes: int = 0
    seconds: float = 0.0
    step_seconds: dict[str, float] = field(default_factory=dict)  # per SQL file


@dataclass
class WindowReport:
    start: datetime
    end: datetime
    hours: list[HourResult] = field(default_factory=list)

    @property
    def computed(self) -> list[HourResult]:
        return [h for h in self.hours if not h.skipped]

    def summary(self) -> str:
        late = [h for h in self.computed if h.reason != "requested"]
        skipped = [h for h in self.hours if h.skipped]
        return (f"{len(self.computed)} hour(s) computed ({len(late)} from the look-back), "
                f"{len(skipped)} without raw rows skipped, "
                f"{sum(h.connections for h in self.computed):,} connections, "
                f"{sum(h.rollup_rows for h in self.computed):,} rollup rows")


# --------------------------------------------------------------------------- pure helpers


def partition_id(hour: datetime) -> str:
    """Partition id of ``hour`` in the hourly-partitioned tables (unix seconds)."""
    return str(int(utc_hour(hour).timestamp()))


def code_version(sql_dir: Path = SQL_DIR) -> str:
    """Hash of the job's SQL: an hour computed by other SQL is stale."""
    h = hashlib.sha256()
    for p in sorted(sql_dir.glob("*.sql")):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def fingerprint_of(hour: datetime, rows: Mapping[tuple[str, datetime], tuple[int, str]]) -> Fingerprint:
    """Combine per-(source table, hour) ``(rows, max_loaded_at)`` into the fingerprint of ``hour``.

    A connection belongs to the hour of its last sample, so ``hour`` also depends on the next
    hour's tcp samples and close records (tcp = both tables); requests depend on their own hour only.
    On a shard whose prefix RTT classes pool the fleet's samples (``JobConfig.prefix_samples``),
    ``rows`` also holds ``fleet_samples`` per hour: a late sample on *another* shard changes this
    hour's classes, so it is part of the tcp fingerprint too.
    """
    empty = (0, "1970-01-01 00:00:00")
    tcp = [rows.get((t, h), empty) for h in (hour, hour + HOUR) for t in TCP_SOURCES]
    fleet = rows.get((FLEET_SAMPLES, hour), empty)
    http = rows.get(("http_requests", hour), empty)
    return Fingerprint(
        tcp_rows=sum(r for r, _ in tcp) + fleet[0],
        tcp_max_loaded_at=max([m for _, m in tcp] + [fleet[1]]),
        http_rows=http[0],
        http_max_loaded_at=http[1],
        own_rows=sum(r for r, _ in tcp[:len(TCP_SOURCES)]) + http[0],
    )


def stale_reason(fp: Fingerprint, wm: Watermark | None, bulk_min_bytes: int, version: str) -> str | None:
    """Why an hour must be recomputed, or None when its rollup is current.

    Hours without raw rows of their own are never stale (nothing to compute, and a rollup whose
    raw rows expired must be kept).
    """
    if fp.own_rows == 0:
        return None
    if wm is None:
        return "never computed"
    if (wm.fingerprint.tcp_rows, wm.fingerprint.tcp_max_loaded_at, wm.fingerprint.http_rows,
            wm.fingerprint.http_max_loaded_at) != (fp.tcp_rows, fp.tcp_max_loaded_at, fp.http_rows,
                                                   fp.http_max_loaded_at):
        return "late data"
    if wm.bulk_min_bytes != bulk_min_bytes:
        return "bulk filter changed"
    if wm.code_version != version:
        return "job SQL changed"
    return None


# --------------------------------------------------------------------------- warehouse I/O


def _shorten(text: str, limit: int = 1500) -> str:
    """ClickHouse repeats the whole expanded query in its errors; keep the head and the tail."""
    return text if len(text) <= limit else f"{text[:limit // 2]} [...] {text[-limit // 2:]}"


#: a line of a statement that stands for a fragment's text (``cohorts/sql/_*.sql``: CTEs shared by
#: several statements, e.g. the per-connection metrics declared once in ``_connection_values.sql``)
_INCLUDE_RE = re.compile(r"^-- include: (_[\w]+\.sql)[ \t]*$", re.MULTILINE)


def read_sql(name: str) -> str:
    """The statement ``name`` of ``cohorts/sql/``, its ``-- include: _fragment.sql`` lines replaced
    by the fragments' text (fragments are not steps; they may not include others)."""
    return _INCLUDE_RE.sub(lambda m: (SQL_DIR / m.group(1)).read_text().rstrip("\n"), (SQL_DIR / name).read_text())


def _columns(wh: Warehouse, table: str) -> list[str]:
    """Insertable columns of ``table``, cached on the connection (the schema does not change mid-run)."""
    cache = getattr(wh, "_cohort_columns", None)
    if cache is None:
        cache = {}
        try:
            setattr(wh, "_cohort_columns", cache)
        except AttributeError:  # a connection object without a __dict__: no cache
            pass
    if table not in cache:
        cache[table] = _query_columns(wh, table)
    return cache[table]


def _query_columns(wh: Warehouse, table: str) -> list[str]:
    res = wh.query("SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String} "
                   "AND default_kind NOT IN ('ALIAS', 'MATERIALIZED') ORDER BY position", params={"t": table})
    if not res.rows:
        raise CohortJobError(f"table {table} does not exist: run `ccab db migrate` (migration 0003_cohort_rollups)")
    return [r[0] for r in res.rows]


def source_rows(wh: Warehouse, start: datetime, end: datetime,
                prefix_samples: str = "tcp_samples") -> dict[tuple[str, datetime], tuple[int, str]]:
    """Per (raw table, hour) in ``[start, end)``: row count and newest ``_loaded_at``; with a fleet
    source for the prefix classes (not this warehouse's ``tcp_samples``), its rows as ``fleet_samples``."""
    sql = read_sql("source_fingerprints.sql")
    if prefix_samples != "tcp_samples":
        sql += (f"\nUNION ALL\nSELECT '{FLEET_SAMPLES}' AS source, toDateTime(toStartOfHour(ts), 'UTC') AS hour, "
                f"count() AS rows, max(_loaded_at) AS max_loaded_at FROM {prefix_samples}\n"
                "WHERE ts >= {range_start:DateTime('UTC')} AND ts < {range_end:DateTime('UTC')}\nGROUP BY hour")
    res = wh.query(sql, params={"range_start": sql_time(start), "range_end": sql_time(end)})
    out = {}
    for source, hour, rows, max_loaded in res.rows:
        h = parse_sql_time(hour)
        out[(source, h)] = (int(rows), str(max_loaded))
    return out


def watermarks(wh: Warehouse, start: datetime, end: datetime) -> dict[datetime, Watermark]:
    """The newest watermark of each hour in ``[start, end)``."""
    res = wh.query(
        """SELECT hour, tcp_rows, tcp_max_loaded_at, http_rows, http_max_loaded_at, bulk_min_bytes, code_version
           FROM cohort_watermarks FINAL
           WHERE hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}""",
        params={"a": sql_time(start), "b": sql_time(end)})
    out = {}
    for hour, tcp_rows, tcp_max, http_rows, http_max, bulk, version in res.rows:
        h = parse_sql_time(hour)
        out[h] = Watermark(Fingerprint(int(tcp_rows), str(tcp_max), int(http_rows), str(http_max), -1),
                           int(bulk), version)
    return out


def stale_hours(wh: Warehouse, start: datetime, end: datetime, cfg: JobConfig | None = None) -> dict[datetime, str]:
    """Hours in ``[start, end)`` whose rollup is not current, with the reason."""
    cfg = cfg or JobConfig()
    hours = hours_between(start, end)
    if not hours:
        return {}
    rows = source_rows(wh, hours[0], hours[-1] + 2 * HOUR, cfg.prefix_samples)
    marks = watermarks(wh, hours[0], hours[-1] + HOUR)
    version = code_version()
    out = {}
    for h in hours:
        why = stale_reason(fingerprint_of(h, rows), marks.get(h), cfg.bulk_min_bytes, version)
        if why:
            out[h] = why
    return out


def rollup_hour(wh: Warehouse, hour: datetime, cfg: JobConfig | None = None, reason: str = "requested") -> HourResult:
    """Recompute one hour of the cohort rollups (idempotent; see the module docstring and
    :func:`rollup_hours`)."""
    return rollup_hours(wh, {utc_hour(hour): reason}, cfg)[0]


#: at most this many hours per statement set (an INSERT may touch 100 partitions by default)
MAX_BATCH_HOURS = 24


def batches(hours: list[datetime], max_hours: int = MAX_BATCH_HOURS) -> list[list[datetime]]:
    """Sorted ``hours`` cut into runs of consecutive hours, each at most ``max_hours`` long (pure).

    A run is computed by one statement set over ``[first, last + 1h)``: only consecutive hours,
    so the statements never touch an hour that is not being recomputed.
    """
    out: list[list[datetime]] = []
    for h in sorted(hours):
        if out and h - out[-1][-1] == HOUR and len(out[-1]) < max_hours:
            out[-1].append(h)
        else:
            out.append([h])
    return out


def rollup_hours(wh: Warehouse, todo: Mapping[datetime, str], cfg: JobConfig | None = None,
                 on_hour: Callable[[HourResult, int, int], None] | None = None) -> list[HourResult]:
    """Recompute the hours of ``todo`` (hour -> reason), idempotently, in sorted order.

    Hours without raw rows of their own are skipped (their rollup is kept). The others are cut
    into runs of consecutive hours (:func:`batches`) and each run is computed by ONE set of
    statements over its hours (every SQL file groups by ``hour``): the job's cost is dominated by
    planning each statement (hundreds of ms in the embedded engine even on empty input), so a
    window of N hours costs one plan per file instead of N. Statements whose source has no rows
    in the run are skipped (per-sample ones without tcp samples, per-request ones without
    requests): they would write nothing. Each hour's partitions are then swapped in and the
    run's watermarks written, last.

    Raises
    ------
    CohortJobError
        A statement failed; the message names the hour(s) and the step. Every hour of the failed
        run keeps its previous rollup per table and its watermark is not updated, so the next run
        (or an Airflow retry) redoes it.
    """
    cfg = cfg or JobConfig()
    hours = sorted(utc_hour(h) for h in todo)
    if not hours:
        return []
    results: dict[datetime, HourResult] = {}
    t0 = time.perf_counter()
    try:
        rows = source_rows(wh, hours[0], hours[-1] + 2 * HOUR, cfg.prefix_samples)
    except WarehouseError as exc:
        raise _job_error(hours[0], hours[-1], "read the raw-row fingerprint", exc) from exc
    fps = {h: fingerprint_of(h, rows) for h in hours}

    def finished(res: HourResult) -> None:
        results[res.hour] = res
        if on_hour:
            on_hour(res, len(results), len(hours))

    for h in hours:
        if fps[h].own_rows == 0:
            finished(HourResult(h, todo[h], skipped=True, seconds=time.perf_counter() - t0))
    for run in batches([h for h in hours if h not in results]):
        for res in _rollup_run(wh, run, {h: fps[h] for h in run}, rows, todo, cfg):
            finished(res)
    return [results[h] for h in hours]


def _label(first: datetime, last: datetime) -> str:
    if first == last:
        return "hour " + first.strftime("%Y-%m-%dT%H:00Z")
    return f"hours {first.strftime('%Y-%m-%dT%H:00Z')}..{last.strftime('%Y-%m-%dT%H:00Z')}"


def _job_error(first: datetime, last: datetime, step: str, exc: Exception) -> CohortJobError:
    return CohortJobError(
        f"cohort job, {_label(first, last)}, step '{step}' failed: {_shorten(str(exc))}\n"
        "The hour keeps its previous rollup and watermark; fix the cause and re-run it "
        f"(`ccab analyze --from {first.strftime('%Y-%m-%dT%H:00Z')} "
        f"--to {(last + HOUR).strftime('%Y-%m-%dT%H:00Z')}`).")


def _has_rows(rows: Mapping[tuple[str, datetime], tuple[int, str]], table: str, run: list[datetime]) -> bool:
    """Whether ``table`` (tcp_samples or http_requests) has rows in the hours of ``run``."""
    return any(n for (t, h), (n, _) in rows.items() if t == table and run[0] <= h <= run[-1])


def _rollup_run(wh: Warehouse, run: list[datetime], fps: Mapping[datetime, Fingerprint],
                rows: Mapping[tuple[str, datetime], tuple[int, str]], todo: Mapping[datetime, str],
                cfg: JobConfig) -> list[HourResult]:
    """One statement set over the consecutive hours of ``run`` (see :func:`rollup_hours`)."""
    t0 = time.perf_counter()
    pids = [partition_id(h) for h in run]
    stages = [s for s, _ in SWAPS] + [SCRATCH]
    step = "start"
    try:
        step = "clear the stage tables"
        _drop_partitions(wh, stages, pids)
        params = {"hour_start": sql_time(run[0]), "hour_end": sql_time(run[-1] + HOUR),
                  "bulk_min_bytes": cfg.bulk_min_bytes}
        has_samples = _has_rows(rows, "tcp_samples", run)
        has_requests = _has_rows(rows, "http_requests", run)
        step_seconds: dict[str, float] = {}
        for sql_file, table in STEPS:
            if (sql_file in SAMPLE_STEPS and not has_samples) or (sql_file in REQUEST_STEPS and not has_requests):
                continue  # no source rows in these hours: the statement would write nothing
            step = f"{sql_file} -> {table}"
            cols = ", ".join(_columns(wh, table))
            t_step = time.perf_counter()
            sql = read_sql(sql_file)
            if sql_file == "prefix_classes.sql" and cfg.prefix_samples != "tcp_samples":
                sql = re.sub(r"\bFROM tcp_samples\b", f"FROM {cfg.prefix_samples}", sql)
            wh.command(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM (\n{sql}\n)",
                       params=params, settings=STAGE_INSERT_SETTINGS)
            step_seconds[sql_file] = time.perf_counter() - t_step
        step = "count the stage tables"
        counts = _partition_counts(wh, stages, pids)
        # hours the daily rollups have never held: their hourly partitions are still empty
        held = _partition_counts(wh, list(DAILY_SOURCES), pids)
        new_hours = {h for h, p in zip(run, pids) if not any(held.get((t, p)) for t in DAILY_SOURCES)}
        for stage, target in SWAPS:
            step = f"swap {stage} -> {target}"
            present = [p for p in pids if counts.get((stage, p))]
            absent = [p for p in pids if not counts.get((stage, p))]
            if present:
                wh.command(f"ALTER TABLE {target} " + ", ".join(
                    f"REPLACE PARTITION ID '{p}' FROM {stage}" for p in present))
            # REPLACE from an empty partition is refused; those hours now have no rows here
            _drop_partitions(wh, [target], absent)
        step = "clear the stage tables"
        _drop_partitions(wh, stages, pids)
        step = "update the run's days in the daily rollups"
        for day_hour in sorted({h.replace(hour=0) for h in run}):
            hours = [h for h in run if h.replace(hour=0) == day_hour]  # consecutive
            if new_hours.issuperset(hours):
                add_hours(wh, hours[0], hours[-1] + HOUR)  # the usual hourly run: one hour of rows
            else:
                refresh_day(wh, day_hour)  # an hour recomputed (or a run that died): the day whole
        step = "write the watermark"
        version = code_version()
        wh.command(
            """INSERT INTO cohort_watermarks (hour, computed_seq, tcp_rows, tcp_max_loaded_at, http_rows,
                   http_max_loaded_at, bulk_min_bytes, code_version, rollup_rows, heatmap_rows, connections)
               SELECT toDateTime(w.1, 'UTC'), toUnixTimestamp64Nano(now64(9)), w.2, toDateTime(w.3, 'UTC'), w.4,
                   toDateTime(w.5, 'UTC'), {bulk:UInt64}, {version:String}, w.6, w.7, w.8
               FROM (SELECT arrayJoin(arrayZip({hours:Array(String)}, {tcp_rows:Array(UInt64)},
                   {tcp_max:Array(String)}, {http_rows:Array(UInt64)}, {http_max:Array(String)},
                   {rollup_rows:Array(UInt64)}, {heatmap_rows:Array(UInt64)}, {connections:Array(UInt64)})) AS w)""",
            params={"hours": [sql_time(h) for h in run],
                    "tcp_rows": [fps[h].tcp_rows for h in run],
                    "tcp_max": [fps[h].tcp_max_loaded_at for h in run],
                    "http_rows": [fps[h].http_rows for h in run],
                    "http_max": [fps[h].http_max_loaded_at for h in run],
                    "rollup_rows": [counts.get(("cohort_hourly_stage", p), 0) for p in pids],
                    "heatmap_rows": [counts.get(("cohort_heatmap_hourly_stage", p), 0) for p in pids],
                    "connections": [counts.get((SCRATCH, p), 0) for p in pids],
                    "bulk": cfg.bulk_min_bytes, "version": version})
    except WarehouseError as exc:
        raise _job_error(run[0], run[-1], step, exc) from exc
    seconds = time.perf_counter() - t0
    share = 1 / len(run)  # each hour is given an equal share of the run's statements
    return [HourResult(h, todo[h], connections=counts.get((SCRATCH, p), 0),
                       rollup_rows=counts.get(("cohort_hourly_stage", p), 0),
                       heatmap_rows=counts.get(("cohort_heatmap_hourly_stage", p), 0),
                       prefixes=counts.get(("cohort_prefix_hourly_stage", p), 0),
                       seconds=seconds * share, step_seconds={f: sec * share for f, sec in step_seconds.items()})
            for h, p in zip(run, pids)]


def _drop_partitions(wh: Warehouse, tables: list[str], pids: list[str]) -> None:
    if not pids:
        return
    for table in tables:
        wh.command(f"ALTER TABLE {table} " + ", ".join(f"DROP PARTITION ID '{p}'" for p in pids))


def _partition_counts(wh: Warehouse, tables: list[str], pids: list[str]) -> dict[tuple[str, str], int]:
    """Rows per (table, partition id) of ``tables`` in the partitions ``pids``, in one query."""
    sql = " UNION ALL ".join(
        f"SELECT '{t}' AS t, _partition_id AS p, count() AS n FROM {t} WHERE _partition_id IN {{pids:Array(String)}} "
        "GROUP BY p" for t in tables)
    return {(t, p): int(n) for t, p, n in wh.query(sql, params={"pids": pids}).rows}


def run_window(wh: Warehouse, start: datetime, end: datetime, cfg: JobConfig | None = None, *,
               recompute_requested: bool = True, lookback: bool = True,
               on_hour: Callable[[HourResult, int, int], None] | None = None) -> WindowReport:
    """Compute the hours of ``[start, end)``, then the stale hours of the look-back before it.

    Parameters
    ----------
    recompute_requested : bool
        True: every hour of the window is recomputed (what a scheduled interval or an explicit
        ``ccab analyze`` wants). False: only its stale hours.
    lookback : bool
        Also recompute stale hours in ``[start - cfg.lookback, start)`` (late data).
    on_hour : callable, optional
        Called after each hour with ``(result, done, total)`` (progress bars).
    """
    cfg = cfg or JobConfig()
    window = hours_between(start, end)
    todo: dict[datetime, str] = {}
    if lookback and cfg.lookback:
        todo.update(stale_hours(wh, utc_hour(start) - cfg.lookback, utc_hour(start), cfg))
    if recompute_requested:
        todo.update({h: "requested" for h in window})
    else:
        todo.update(stale_hours(wh, start, end, cfg))
    report = WindowReport(utc_hour(start), utc_hour(end))
    report.hours.extend(rollup_hours(wh, todo, cfg, on_hour))
    return report


def refresh_late(wh: Warehouse, before: datetime, cfg: JobConfig | None = None,
                 on_hour: Callable[[HourResult, int, int], None] | None = None) -> WindowReport:
    """Recompute the stale hours of ``[before - cfg.lookback, before)`` (the late-data pass)."""
    cfg = cfg or JobConfig()
    before = utc_hour(before)
    todo = stale_hours(wh, before - cfg.lookback, before, cfg)
    report = WindowReport(before - cfg.lookback, before)
    report.hours.extend(rollup_hours(wh, todo, cfg, on_hour))
    return report


def rollup_span(wh: Warehouse) -> tuple[datetime, datetime] | None:
    """First hour and the end of the last hour the rollups hold, or None when empty."""
    res = wh.query("SELECT count(), min(hour), max(hour) FROM cohort_hourly")
    count, lo, hi = res.rows[0]
    if not count:
        return None
    return parse_sql_time(lo), parse_sql_time(hi) + HOUR
