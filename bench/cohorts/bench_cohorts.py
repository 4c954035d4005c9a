"""bench/cohorts: the hourly cohort job vs a pandas baseline computing the same histograms, one run.

Data: `ccab sim bench/cohorts/scenario.yaml` (a canary-tyo1-like PoP sampled every second, ~13
tcp samples per connection) gives ~1M tcp samples over 4 hours. The 10M-sample warehouse holds
that simulation 10 times over as 10 disjoint sets of hosts (host names suffixed `-r0`..`-r9`,
sock_ids likewise): a 210-host PoP with 10x the connections, same hours.

Ours: `ccab.cohorts.job.run_window` over those hours — everything the hourly DAG does (prefix
classes, per-connection grain, 11 metrics x segments, heatmaps, REPLACE PARTITION swaps,
watermarks), reading the raw table in the embedded ClickHouse (chdb).
Peer: pandas on the same rows (read from a Parquet export, not timed) computing the same
per-cohort-hour log2 histograms of the tcp metrics (prefix classes, last sample per connection,
8 connection metrics and 2 per-sample metrics x segments) with vectorised numpy — a subset of
our job's work. The bench checks both produce identical histograms, then prints the times, the
ratio, and how each scales from 1M to 10M samples (linear = 10x).

Close-records mode (`--mode close`): the warehouse holds the simulation's close-time connection
records (tcp_conn/1, one per connection, `tcp_conns`) and no tcp samples — a fleet whose
collectors capture at close. Ours: the same whole hourly job. Peer: pandas on the same records
computing the same per-cohort-hour histograms of the 9 per-connection metrics x segments. `--mode
both` runs the samples mode then the close mode.

Usage: bench/cohorts/run.sh [--connections N] [--replicas 1,10,100] [--mode samples|close|both]
       [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from ccab import cli
from ccab.base import schema as migrate
from ccab.base.config import REPO_ROOT
from ccab.base.warehouse import ChdbWarehouse
from ccab.cohorts.job import run_window

SCENARIO = REPO_ROOT / "bench" / "cohorts" / "scenario.yaml"
START = datetime(2025, 11, 20, 0, tzinfo=timezone.utc)
HOURS = 5  # 4 simulated hours + the hour a few connections spill into
HOUR_MS = 3_600_000
MIB = 1 << 20
ZERO = -(2**31)
CLOSE_METRICS = ("retrans_pct", "inflight_bytes", "rtt_us", "min_rtt_us", "bbr_min_rtt_us", "delivery_rate_bps",
                 "rwnd_limited_pct", "sndbuf_limited_pct", "rto_count")
CLOSE_COLUMNS = ("ts_ms", "pop", "host", "sock_id", "rollout_id", "arm", "kernel", "cc", "cc_version", "bytes_sent",
                 "bytes_acked", "bytes_retrans", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "rtt_us",
                 "min_rtt_us", "delivery_rate_bps", "total_rto")
CONN_METRICS = ("retrans_pct", "inflight_bytes", "rtt_us", "min_rtt_us", "bbr_min_rtt_us", "delivery_rate_bps",
                "rwnd_limited_pct", "sndbuf_limited_pct")
SAMPLE_METRICS = ("inflight_bytes_per_sample", "rtt_us_per_sample")
#: the steps of the hourly job that compute what the peer computes (the rest: goodput, heatmaps)
SAME_WORK_STEPS = ("prefix_classes.sql", "connections.sql", "connection_metrics.sql", "connection_cells.sql",
                   "sample_metrics.sql", "sample_cells.sql")
#: ... and in close mode (no samples: prefix classes and per-sample metrics have no rows)
CLOSE_WORK_STEPS = ("connections.sql", "connection_metrics.sql", "connection_cells.sql")
PEER_COLUMNS = ("ts_ms", "pop", "host", "sock_id", "rollout_id", "arm", "kernel", "cc", "cc_version", "peer_prefix",
                "bytes_sent", "bytes_acked", "bytes_retrans", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms",
                "send_q_bytes", "notsent_bytes", "rtt_us", "min_rtt_us", "bbr_min_rtt_us", "delivery_rate_bps")


def simulate(workdir: Path, connections: int, keep: bool) -> Path:
    out = workdir / f"sim-{connections}"
    if keep and (out / "truth.json").exists():
        print(f"reusing {out}")
        return out
    t0 = time.perf_counter()
    code = cli.main(["sim", str(SCENARIO), "--out", str(out), "--connections", str(connections), "--no-progress"])
    if code:
        sys.exit(f"ccab sim failed with exit code {code}")
    print(f"simulated {connections:,} connections in {time.perf_counter() - t0:.0f}s -> {out}")
    return out


def _columns(wh, table: str) -> list[str]:
    return [r[0] for r in wh.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String} "
        "AND default_kind = '' AND NOT startsWith(name, '_') ORDER BY position", params={"t": table}).rows]


def build_warehouse(path: Path, sim: Path, replicas: int, mode: str = "samples") -> ChdbWarehouse:
    """A fresh warehouse holding the simulation ``replicas`` times over (disjoint host sets):
    its tcp samples (mode 'samples') or its close records (mode 'close'), and its requests."""
    shutil.rmtree(path, ignore_errors=True)
    wh = ChdbWarehouse(path)
    migrate.migrate(wh, log=lambda _m: None)
    tcp = ("tcp_samples", "ccab.tcp.v1.jsonl") if mode == "samples" else ("tcp_conns", "ccab.tcp_conn.v1.jsonl")
    for table, name in (tcp, ("http_requests", "ccab.http.v1.jsonl")):
        cols = _columns(wh, table)
        # the table's own types as the file's structure: the simulator leaves null fields out of
        # its lines (a field absent from every line, e.g. total_rto, is then null, not an error)
        types = dict(wh.query("SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                              "AND table = {t:String}", params={"t": table}).rows)
        structure = ", ".join(f"{c} {types[c]}" for c in cols)
        exprs = [f"concat({c}, '-r', toString(replica))" if c in ("host", "sock_id") else c for c in cols]
        wh.command(
            f"INSERT INTO {table} ({', '.join(cols)}, _topic, _partition, _offset) "
            f"SELECT {', '.join(exprs)}, 'bench', 0, rowNumberInAllBlocks() "
            f"FROM file('{sim / name}', JSONEachRow, '{structure}') ARRAY JOIN range({replicas}) AS replica "
            "SETTINGS input_format_skip_unknown_fields = 1, max_partitions_per_insert_block = 1000")
    return wh


def settle_merges(wh: ChdbWarehouse, quiet_s: float = 5.0, timeout_s: float = 900.0) -> str:
    """Wait until the load's background merges are done (none running for ``quiet_s``): the
    job is timed on a settled warehouse, as in production, where parts arrive through the hour
    and are merged as they come, not all at once just before the job (at x100 the merges of
    the 100M freshly inserted rows took ~40 % of the job's first run)."""
    start = time.perf_counter()
    quiet_since = start
    while time.perf_counter() - start < timeout_s:
        if int(wh.query("SELECT count() FROM system.merges").scalar()):
            quiet_since = time.perf_counter()
        elif time.perf_counter() - quiet_since >= quiet_s:
            break
        time.sleep(0.5)
    parts = int(wh.query("SELECT count() FROM system.parts WHERE active AND database = currentDatabase()").scalar())
    return f"background merges settled in {time.perf_counter() - start:.0f} s ({parts} active parts)"


COHORT = ["hour", "pop", "rollout_id", "arm", "kernel", "cc", "cc_version", "host"]
SEGMENTS = ["all", "bulk", "rtt:0-20ms", "rtt:20-50ms", "rtt:50-100ms", "rtt:100-200ms", "rtt:200ms+", "rtt:unknown"]


def count_cells(parts: list[pd.DataFrame], metric: str, values: np.ndarray, cohorts: pd.DataFrame,
                segs: list[np.ndarray]) -> None:
    """Append one row per (cohort, segment, bin) of ``values`` with its count to ``parts``."""
    grouped = cohorts.groupby(COHORT, observed=True, sort=False)
    code = grouped.ngroup().to_numpy()
    # with sort=False, ngroup numbers groups in order of first appearance, as drop_duplicates keeps them
    labels = cohorts[COHORT].drop_duplicates().reset_index(drop=True)
    valid = np.isfinite(values) & (values >= 0)
    b = np.full(values.shape, ZERO, dtype=np.int64)
    pos = valid & (values > 0)
    b[pos] = np.floor(np.log2(values[pos]) * 128).astype(np.int64)
    for seg in segs:
        m = valid & (seg >= 0)
        key = (code[m] * 8 + seg[m]) * (1 << 33) + (b[m] - ZERO)
        keys, counts = np.unique(key, return_counts=True)
        cohort_seg, bin_off = np.divmod(keys, 1 << 33)
        cohort_code, seg_code = np.divmod(cohort_seg, 8)
        part = labels.iloc[cohort_code].reset_index(drop=True)
        part["segment"] = np.asarray(SEGMENTS)[seg_code]
        part["metric"] = metric
        part["bin"] = bin_off + ZERO
        part["count"] = counts
        parts.append(part)


def peer_close_histograms(df: pd.DataFrame, bulk_min: int = MIB) -> pd.DataFrame:
    """The pandas peer on close records: the job's cells of the 9 per-connection metrics.

    Same definitions as the job: a connection is its close record in the hour of its close (one
    per host x sock_id and hour), no tcp samples so no prefix RTT class ('rtt:unknown'), no
    in-flight or BBR min RTT value (missing), ratios only where their denominator is > 0.
    """
    df["hour"] = df["ts_ms"] // HOUR_MS
    df = df.drop_duplicates(["hour", "host", "sock_id"])
    df["cc_version"] = df["cc_version"].fillna(0).astype("int64")
    sent = df["bytes_sent"].to_numpy(dtype=float)
    busy_ms = df["busy_ms"].to_numpy(dtype=float)
    missing = np.full(len(df), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = {
            "retrans_pct": np.where(sent > 0, 100 * df["bytes_retrans"].to_numpy(dtype=float) / sent, np.nan),
            "inflight_bytes": missing,
            "rtt_us": df["rtt_us"].to_numpy(dtype=float),
            "min_rtt_us": df["min_rtt_us"].to_numpy(dtype=float),
            "bbr_min_rtt_us": missing,
            "delivery_rate_bps": df["delivery_rate_bps"].to_numpy(dtype=float),
            "rwnd_limited_pct": np.where(busy_ms > 0, 100 * df["rwnd_limited_ms"].to_numpy(dtype=float) / busy_ms, np.nan),
            "sndbuf_limited_pct": np.where(busy_ms > 0, 100 * df["sndbuf_limited_ms"].to_numpy(dtype=float) / busy_ms, np.nan),
            "rto_count": df["total_rto"].to_numpy(dtype=float),
        }
    segments = [np.zeros(len(df), dtype=np.int64),
                np.where(df["bytes_acked"].fillna(0).to_numpy() >= bulk_min, 1, -1),
                np.full(len(df), SEGMENTS.index("rtt:unknown"), dtype=np.int64)]
    cohorts = df[COHORT].reset_index(drop=True)
    parts: list[pd.DataFrame] = []
    for metric, v in values.items():
        count_cells(parts, metric, v, cohorts, segments)
    return pd.concat(parts, ignore_index=True)


def peer_histograms(df: pd.DataFrame, bulk_min: int = MIB) -> pd.DataFrame:
    """The pandas peer: one row per (cohort-hour, segment, metric, bin) with its count (bin ZERO
    counts the zeros) — cohort_hourly's histograms and zero counts, for the tcp metrics.

    Same definitions as the job (docs/cohorts/README.md): a connection is its last sample (hour
    of that sample), in flight is its mean over busy samples in that hour, prefix RTT class from
    the lower median of the hour's samples' min RTT.
    """
    df["hour"] = df["ts_ms"] // HOUR_MS
    df["cc_version"] = df["cc_version"].fillna(0).astype("int64")
    df["inflight"] = df["send_q_bytes"].astype("int64") - df["notsent_bytes"].astype("int64")
    pk = ["hour", "pop", "peer_prefix"]
    med = df.groupby(pk, observed=True, sort=False)["min_rtt_us"].quantile(0.5, interpolation="lower")
    cls = pd.Series(np.searchsorted([20000, 50000, 100000, 200000], med.to_numpy(), side="right"), index=med.index)
    df["rtt_class"] = cls.reindex(pd.MultiIndex.from_frame(df[pk])).to_numpy()

    conn = df.groupby(["pop", "host", "sock_id"], observed=True, sort=False).ngroup().to_numpy()
    df["conn"] = conn
    last_idx = df.groupby("conn", sort=False)["ts_ms"].idxmax()
    last = df.loc[last_idx.to_numpy()].set_index("conn")
    last_hour = last["hour"].reindex(conn).to_numpy()
    busy = df[(df["hour"].to_numpy() == last_hour) & (df["inflight"].to_numpy() > 0)]
    # never polled busy: no in-flight value (missing, not 0), as the job has it
    busy_mean = busy.groupby("conn")["inflight"].mean().reindex(last.index)

    sent = last["bytes_sent"].to_numpy(dtype=float)
    busy_ms = last["busy_ms"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        conn_values = {
            "retrans_pct": np.where(sent > 0, 100 * last["bytes_retrans"].to_numpy(dtype=float) / sent, np.nan),
            "inflight_bytes": busy_mean.to_numpy(dtype=float),
            "rtt_us": last["rtt_us"].to_numpy(dtype=float),
            "min_rtt_us": last["min_rtt_us"].to_numpy(dtype=float),
            "bbr_min_rtt_us": last["bbr_min_rtt_us"].to_numpy(dtype=float),
            "delivery_rate_bps": last["delivery_rate_bps"].to_numpy(dtype=float),
            "rwnd_limited_pct": np.where(busy_ms > 0, 100 * last["rwnd_limited_ms"].to_numpy(dtype=float) / busy_ms, np.nan),
            "sndbuf_limited_pct": np.where(busy_ms > 0, 100 * last["sndbuf_limited_ms"].to_numpy(dtype=float) / busy_ms, np.nan),
        }
    parts: list[pd.DataFrame] = []

    conn_segments = [np.zeros(len(last), dtype=np.int64),
                     np.where(last["bytes_acked"].to_numpy() >= bulk_min, 1, -1),
                     2 + last["rtt_class"].to_numpy(dtype=np.int64)]
    last_cohorts = last[COHORT].reset_index(drop=True)
    for metric, values in conn_values.items():
        count_cells(parts, metric, values, last_cohorts, conn_segments)
    sample_cohorts = df[COHORT]
    sample_segments = [np.zeros(len(df), dtype=np.int64), 2 + df["rtt_class"].to_numpy(dtype=np.int64)]
    count_cells(parts, "inflight_bytes_per_sample", df["inflight"].to_numpy(dtype=float), sample_cohorts, sample_segments)
    count_cells(parts, "rtt_us_per_sample", df["rtt_us"].to_numpy(dtype=float), sample_cohorts, sample_segments)
    return pd.concat(parts, ignore_index=True)


def job_histograms(wh, path: Path, names: tuple[str, ...]) -> Path:
    """cohort_hourly's histograms and zero counts of ``names`` to a Parquet file ``path``, one row
    per cell (as the peer's)."""
    metrics = ", ".join(f"'{m}'" for m in names)
    # the segments the peer computes; the job's client-network segments (access:*, country:*,
    # asn:*: network_metrics.sql) are part of its whole run but not compared
    segments = ", ".join(f"'{s}'" for s in SEGMENTS)
    path.unlink(missing_ok=True)
    wh.command(f"""
        INSERT INTO FUNCTION file('{path}', Parquet)
        SELECT intDiv(toUnixTimestamp(hour), 3600) AS hour, pop, rollout_id, arm, kernel, cc,
               toInt64(cc_version) AS cc_version, host, segment, metric, toInt64(b) AS bin, sum(c) AS count
        FROM (
            SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin AS b, count AS c
            FROM cohort_cells_hourly
            WHERE metric IN ({metrics}) AND segment IN ({segments})
            UNION ALL
            SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, {ZERO} AS b, n_zero AS c
            FROM cohort_hourly WHERE metric IN ({metrics}) AND segment IN ({segments})
        )
        GROUP BY ALL HAVING count > 0""")
    return path


CLOSE_VALUES = (
    ("retrans_pct", "if(bytes_sent > 0, 100 * bytes_retrans / bytes_sent, NULL)"),
    ("rtt_us", "toFloat64(rtt_us)"),
    ("min_rtt_us", "toFloat64(min_rtt_us)"),
    ("delivery_rate_bps", "toFloat64(delivery_rate_bps)"),
    ("rwnd_limited_pct", "if(busy_ms > 0, 100 * rwnd_limited_ms / busy_ms, NULL)"),
    ("sndbuf_limited_pct", "if(busy_ms > 0, 100 * sndbuf_limited_ms / busy_ms, NULL)"),
    ("rto_count", "toFloat64(total_rto)"),
)
#: the close-mode cells' fixed segments, as columns of one aggregation (close records have no
#: samples, so every connection's RTT class is 'rtt:unknown')
CLOSE_SEGMENTS = ("all", "bulk", "rtt:unknown")


def floor_close_sql(bulk_min: int = MIB) -> str:
    """The corrected engine floor on close records: ONE statement that counts the peer's cells
    straight from ``tcp_conns`` (duplicates dropped as the job and the peers drop them), each value
    once — one GROUP BY per (cohort-hour, metric, bin) with each fixed segment's count as a column
    (``count()`` for 'all', ``countIf`` for 'bulk' and the RTT class) — no stage table, no sums,
    nothing written. Returns (cells, values): one cell per non-zero column of a group."""
    values = ", ".join(v for _, v in CLOSE_VALUES)
    return f"""
        SELECT sum((n_all > 0) + (n_bulk > 0) + (n_unknown > 0)), sum(n_all + n_bulk + n_unknown) FROM (
            SELECT cohort_id, m, if(v > 0, toInt32(floor(log2(v) * 128)), {ZERO}) AS bin,
                   count() AS n_all, countIf(is_bulk) AS n_bulk, countIf(rtt_unknown) AS n_unknown
            FROM (
                SELECT cityHash64(hour, pop, rollout_id, arm, kernel, cc, ifNull(cc_version, 0), host) AS cohort_id,
                       ifNull(bytes_acked, 0) >= {bulk_min} AS is_bulk, true AS rtt_unknown,
                       arrayJoin(arrayZip(range({len(CLOSE_VALUES)}), [{values}])) AS mv, mv.1 AS m, mv.2 AS v
                FROM (SELECT toStartOfHour(ts) AS hour, * FROM tcp_conns LIMIT 1 BY hour, host, sock_id))
            WHERE v IS NOT NULL AND isFinite(v) AND v >= 0
            GROUP BY cohort_id, m, bin)"""


def engine_floor_close(wh, bulk_min: int = MIB) -> tuple[float, int, int]:
    """One timed run of :func:`floor_close_sql`: (seconds, cells, values)."""
    t0 = time.perf_counter()
    cells, n_values = wh.query(floor_close_sql(bulk_min)).rows[0]
    return time.perf_counter() - t0, int(cells), int(n_values)


# ----------------------------------------------------------------------------- duckdb and polars
# Both peers get the corrected formulation too (each value once: one aggregation per (cohort-hour,
# metric, bin) with the fixed segments' counts as columns, then one row per non-zero segment count),
# read their input from RAM (loaded from the same Parquet export, not timed) and produce the cells
# as a table in RAM (timed), compared with the job's cells like pandas'.


def duckdb_close_cells(con, bulk_min: int = MIB):
    """duckdb: the close-mode cells from the in-memory table ``conns``, as an Arrow table."""
    metric_values = ", ".join(
        f"{{'m': '{m}', 'v': {expr}}}" for m, expr in (
            ("retrans_pct", "CASE WHEN bytes_sent > 0 THEN 100 * bytes_retrans::DOUBLE / bytes_sent END"),
            ("rtt_us", "rtt_us::DOUBLE"), ("min_rtt_us", "min_rtt_us::DOUBLE"),
            ("delivery_rate_bps", "delivery_rate_bps::DOUBLE"),
            ("rwnd_limited_pct", "CASE WHEN busy_ms > 0 THEN 100 * rwnd_limited_ms::DOUBLE / busy_ms END"),
            ("sndbuf_limited_pct", "CASE WHEN busy_ms > 0 THEN 100 * sndbuf_limited_ms::DOUBLE / busy_ms END"),
            ("rto_count", "total_rto::DOUBLE")))
    cohort = ", ".join(COHORT)
    return con.sql(f"""
        WITH c AS (
            SELECT DISTINCT ON (hour, host, sock_id) * FROM (
                SELECT ts_ms // {HOUR_MS} AS hour, pop, rollout_id, arm, kernel, cc,
                       coalesce(cc_version, 0)::BIGINT AS cc_version, host, sock_id,
                       coalesce(bytes_acked, 0) >= {bulk_min} AS is_bulk,
                       bytes_sent, bytes_retrans, busy_ms, rwnd_limited_ms, sndbuf_limited_ms, rtt_us, min_rtt_us,
                       delivery_rate_bps, total_rto FROM conns)),
        v AS (SELECT {cohort}, is_bulk, unnest([{metric_values}], recursive := true) FROM c),
        g AS (
            SELECT {cohort}, m AS metric, CASE WHEN v > 0 THEN floor(log2(v) * 128)::BIGINT ELSE {ZERO} END AS bin,
                   count(*) AS n_all, count(*) FILTER (WHERE is_bulk) AS n_bulk
            FROM v WHERE v IS NOT NULL AND isfinite(v) AND v >= 0
            GROUP BY ALL)
        SELECT {cohort}, s.segment, metric, bin, s.count
        FROM g, LATERAL (SELECT unnest(['all', 'bulk', 'rtt:unknown']) AS segment,
                                unnest([n_all, n_bulk, n_all]) AS count) AS s
        WHERE s.count > 0""").arrow().read_all()


def polars_close_cells(df, bulk_min: int = MIB):
    """polars: the close-mode cells from the DataFrame ``df`` (lazy plan, collected)."""
    import polars as pl

    def ratio(num: str, den: str):
        return pl.when(pl.col(den) > 0).then(100 * pl.col(num).cast(pl.Float64) / pl.col(den)).otherwise(None)

    values = {"retrans_pct": ratio("bytes_retrans", "bytes_sent"), "rtt_us": pl.col("rtt_us").cast(pl.Float64),
              "min_rtt_us": pl.col("min_rtt_us").cast(pl.Float64),
              "delivery_rate_bps": pl.col("delivery_rate_bps").cast(pl.Float64),
              "rwnd_limited_pct": ratio("rwnd_limited_ms", "busy_ms"),
              "sndbuf_limited_pct": ratio("sndbuf_limited_ms", "busy_ms"),
              "rto_count": pl.col("total_rto").cast(pl.Float64)}
    v = pl.col("value")
    return (df.lazy()
            .with_columns((pl.col("ts_ms") // HOUR_MS).alias("hour"),
                          pl.col("cc_version").fill_null(0).cast(pl.Int64),
                          (pl.col("bytes_acked").fill_null(0) >= bulk_min).alias("is_bulk"))
            .unique(subset=["hour", "host", "sock_id"], keep="first", maintain_order=False)
            .select(*COHORT, "is_bulk", *[e.alias(m) for m, e in values.items()])
            .unpivot(index=[*COHORT, "is_bulk"], on=list(values), variable_name="metric", value_name="value")
            .filter(v.is_not_null() & v.is_finite() & (v >= 0))
            .with_columns(pl.when(v > 0).then((v.log(2) * 128).floor().cast(pl.Int64)).otherwise(ZERO).alias("bin"))
            .group_by([*COHORT, "metric", "bin"])
            .agg(pl.len().cast(pl.Int64).alias("all"), pl.col("is_bulk").sum().cast(pl.Int64).alias("bulk"))
            .with_columns(pl.col("all").alias("rtt:unknown"))
            .unpivot(index=[*COHORT, "metric", "bin"], on=list(CLOSE_SEGMENTS), variable_name="segment",
                     value_name="count")
            .filter(pl.col("count") > 0)
            .collect())


def _cells_and_values(cells: pd.DataFrame) -> tuple[int, int]:
    return len(cells), int(cells["count"].sum())


def same_cells(peer: Path, job: Path, scratch: Path) -> tuple[bool, str]:
    """Compare the peer's and the job's cells (two Parquet files) in a scratch embedded engine.
    First a streaming multiset checksum of each file — row count, sum of the counts, and the sum
    and XOR of a 64-bit hash of every normalised row — which needs no memory per row (at x100 the
    cells are tens of millions of rows: a pandas merge, then two set differences, ran this machine
    out of memory). Equal checksums: equal cells (a chance collision is ~2^-64). Otherwise both
    set differences are counted and a few rows of each shown."""
    names = ["hour", *COHORT[1:], "segment", "metric", "bin", "count"]
    cast = ", ".join(["toInt64(hour) AS hour"] + [f"toString({c}) AS {c}" for c in COHORT[1:] if c != "cc_version"]
                     + ["toInt64(cc_version) AS cc_version", "toString(segment) AS segment",
                        "toString(metric) AS metric", "toInt64(bin) AS bin", "toInt64(count) AS count"])
    row_hash = f"cityHash64({', '.join(names)})"
    shutil.rmtree(scratch, ignore_errors=True)
    wh = ChdbWarehouse(scratch)
    try:
        def rows(x: Path) -> str:
            return f"SELECT {cast} FROM file('{x}', Parquet)"

        def checksum(x: Path) -> tuple:
            return tuple(int(v) for v in wh.query(
                f"SELECT count(), sum(count), sum({row_hash}), groupBitXor({row_hash}) FROM ({rows(x)})").rows[0])

        got, want = checksum(peer), checksum(job)
        if got == want:
            return True, f"{got[0]:,} (cohort-hour, segment, metric, bin) cells, {got[1]:,} values, checksums equal"

        def diff(x: Path, y: Path, limit: str = "") -> str:
            return f"SELECT * FROM ({rows(x)} EXCEPT {rows(y)}) {limit}"  # the LIMIT bounds the difference, not y
        only_peer, only_job = wh.query(
            f"SELECT (SELECT count() FROM ({diff(peer, job)})), (SELECT count() FROM ({diff(job, peer)}))").rows[0]
        examples = wh.query(f"SELECT 'peer only', * FROM ({diff(peer, job, 'LIMIT 3')}) UNION ALL "
                            f"SELECT 'job only', * FROM ({diff(job, peer, 'LIMIT 3')})").rows
        return False, (f"peer {got[0]:,} cells / {got[1]:,} values, job {want[0]:,} / {want[1]:,}; "
                       f"{int(only_peer)} cells only the peer's, {int(only_job)} only the job's, e.g.\n"
                       + "\n".join(map(str, examples)))
    finally:
        wh.close()
        shutil.rmtree(scratch, ignore_errors=True)


def run_size(workdir: Path, sim: Path, replicas: int, mode: str = "samples", peer: bool = True) -> dict:
    path = workdir / f"warehouse-{mode}-x{replicas}"
    t0 = time.perf_counter()
    wh = build_warehouse(path, sim, replicas, mode)
    table = "tcp_samples" if mode == "samples" else "tcp_conns"
    rows = int(wh.query(f"SELECT count() FROM {table}").scalar())
    unit = "samples" if mode == "samples" else "close records"
    loaded_s = time.perf_counter() - t0
    print(f"\n== [{mode}] {rows:,} {unit} (x{replicas}); loaded in {loaded_s:.0f}s, {settle_merges(wh)}")

    t0 = time.perf_counter()
    report = run_window(wh, START, START + timedelta(hours=HOURS), lookback=False)
    job_s = time.perf_counter() - t0
    steps: dict[str, float] = {}
    for h in report.hours:
        for f, sec in h.step_seconds.items():
            steps[f] = steps.get(f, 0.0) + sec
    same = SAME_WORK_STEPS if mode == "samples" else CLOSE_WORK_STEPS
    same_work_s = sum(sec for f, sec in steps.items() if f in same)
    print(f"ours, whole hourly job (ClickHouse): {job_s:7.2f} s  {rows / job_s:11,.0f} {unit}/s   ({report.summary()})")
    print(f"ours, the peer's share of it:        {same_work_s:7.2f} s  {rows / same_work_s:11,.0f} {unit}/s   "
          f"({' + '.join(same)})")
    print("ours, per statement (all hours): " + ", ".join(f"{f} {sec:.2f}s" for f, sec in steps.items()))

    if not peer:
        wh.close()
        shutil.rmtree(path, ignore_errors=True)
        print(f"peer: not run at x{replicas} (--peer-max-replicas): ours alone, for the scaling")
        return {"rows": rows, "job_s": job_s, "same_work_s": same_work_s, "peer_s": None, "replicas": replicas,
                "unit": unit, "load_avg": os.getloadavg()[0], "floor_s": None}
    floor = engine_floor_close(wh) if mode == "close" else None
    if floor:
        print(f"engine floor, one GROUP BY of the peer's cells only: {floor[0]:7.2f} s  "
              f"({floor[1]:,} cells, {floor[2]:,} values)")

    export = workdir / f"export-{mode}-x{replicas}.parquet"
    export.unlink(missing_ok=True)
    columns = PEER_COLUMNS if mode == "samples" else CLOSE_COLUMNS
    wh.command(f"INSERT INTO FUNCTION file('{export}', Parquet) SELECT {', '.join(columns)} FROM {table}")
    metrics = CONN_METRICS + SAMPLE_METRICS if mode == "samples" else CLOSE_METRICS
    expected = job_histograms(wh, workdir / f"job-hist-{mode}-x{replicas}.parquet", metrics)
    wh.close()
    df = pd.read_parquet(export)
    for c in ("pop", "host", "sock_id", "rollout_id", "arm", "kernel", "cc", "peer_prefix"):
        if c in df:
            df[c] = df[c].astype("category")
    gc.collect()
    print(f"peer input: {len(columns)} columns in RAM, {df.memory_usage(deep=True).sum() / 2**30:.2f} GiB "
          "(ours reads them from compressed columns on disk)")
    t0 = time.perf_counter()
    got = peer_histograms(df) if mode == "samples" else peer_close_histograms(df)
    peer_s = time.perf_counter() - t0
    print(f"peer, pandas + numpy (same cells):   {peer_s:7.2f} s  {rows / peer_s:11,.0f} {unit}/s")
    load_avg = os.getloadavg()[0]
    peer_cells = _cells_and_values(got)
    peer_path = workdir / f"peer-hist-{mode}-x{replicas}.parquet"
    del df
    got.to_parquet(peer_path)
    del got
    gc.collect()
    same_ok, detail = same_cells(peer_path, expected, workdir / f"compare-{mode}-x{replicas}")
    print(f"same histograms: {'yes' if same_ok else 'NO'} ({detail})")
    print(f"ratio pandas / ours [{mode}, {rows:,} {unit}]: whole job {peer_s / job_s:.2f}x, "
          f"same work {peer_s / same_work_s:.2f}x (> 1: ours is faster; load average {load_avg:.1f})")
    if floor:
        print(f"ratio pandas / engine floor: {peer_s / floor[0]:.2f}x — the most any formulation of these cells "
              f"on this engine and machine could beat pandas by (the floor's cells equal the peer's: "
              f"{'yes' if (floor[1], floor[2]) == peer_cells else 'NO'})")
    export.unlink(missing_ok=True)
    expected.unlink(missing_ok=True)
    peer_path.unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)
    if not same_ok:
        sys.exit(1)
    return {"rows": rows, "job_s": job_s, "same_work_s": same_work_s, "peer_s": peer_s, "replicas": replicas,
            "unit": unit, "load_avg": load_avg, "floor_s": floor[0] if floor else None}


def clear_rollups(wh) -> None:
    """Empty every table the hourly job writes (rollups, daily, watermarks, stages), so each round
    of the job computes the hours as the hourly DAG does: new hours, not recomputed ones."""
    for (name,) in wh.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                            "AND startsWith(name, 'cohort_') AND engine LIKE '%MergeTree'").rows:
        wh.command(f"TRUNCATE TABLE {name}")


def _median(xs: list[float]) -> float:
    return float(np.median(xs))


def run_close(workdir: Path, sim: Path, replicas: int, rounds: int) -> dict:
    """Close mode: the job, the corrected floor, pandas, duckdb and polars on the same close
    records, in ``rounds`` interleaved rounds (each round runs every contender once, the job on
    emptied rollups); medians; every contender's cells checked equal to the job's."""
    import duckdb
    import polars as pl

    path = workdir / f"warehouse-close-x{replicas}"
    t0 = time.perf_counter()
    wh = build_warehouse(path, sim, replicas, "close")
    rows = int(wh.query("SELECT count() FROM tcp_conns").scalar())
    print(f"\n== [close] {rows:,} close records (x{replicas}); loaded in {time.perf_counter() - t0:.0f}s, "
          f"{settle_merges(wh)}")
    export = workdir / f"export-close-x{replicas}.parquet"
    export.unlink(missing_ok=True)
    wh.command(f"INSERT INTO FUNCTION file('{export}', Parquet) SELECT {', '.join(CLOSE_COLUMNS)} FROM tcp_conns")

    # Each peer's copy of the records is loaded (not timed) just before its turn and freed after
    # it: at x100 the three copies together and the job's engine did not fit in 23 GB.
    def pandas_frame():
        pdf = pd.read_parquet(export)
        for c in ("pop", "host", "sock_id", "rollout_id", "arm", "kernel", "cc"):
            pdf[c] = pdf[c].astype("category")
        return pdf

    def duckdb_conns():
        con = duckdb.connect()
        con.execute(f"CREATE TABLE conns AS SELECT * FROM read_parquet('{export}')")
        return con

    times: dict[str, list[float]] = {k: [] for k in ("job", "share", "floor", "pandas", "duckdb", "polars")}
    steps: dict[str, list[float]] = {}
    peer_paths = {name: workdir / f"peer-{name}-close-x{replicas}.parquet" for name in ("pandas", "duckdb", "polars")}
    pandas_cells = (0, 0)

    def keep_cells(name: str, got, last_round: bool) -> None:
        """The last round's cells of a peer to Parquet at once (not timed), freed before the next
        peer runs: at x100 each peer's cells are tens of millions of rows."""
        nonlocal pandas_cells
        if not last_round:
            return
        if name == "pandas":
            pandas_cells = _cells_and_values(got)
            got.to_parquet(peer_paths[name])
        elif name == "duckdb":
            import pyarrow.parquet as pq
            pq.write_table(got, peer_paths[name])
        else:
            got.write_parquet(peer_paths[name])

    for r in range(rounds):
        last_round = r == rounds - 1
        clear_rollups(wh)
        t0 = time.perf_counter()
        report = run_window(wh, START, START + timedelta(hours=HOURS), lookback=False)
        times["job"].append(time.perf_counter() - t0)
        per_step: dict[str, float] = {}
        for h in report.hours:
            for f, sec in h.step_seconds.items():
                per_step[f] = per_step.get(f, 0.0) + sec
        for f, sec in per_step.items():
            steps.setdefault(f, []).append(sec)
        times["share"].append(sum(sec for f, sec in per_step.items() if f in CLOSE_WORK_STEPS))
        # the parts the job wrote are merged in the background after it: awaited (not timed, printed)
        # so that the next contenders do not run beside the job's leftover work
        merged = settle_merges(wh, quiet_s=2.0)
        floor_s, floor_cells, floor_values = engine_floor_close(wh)
        times["floor"].append(floor_s)
        df = pandas_frame()
        gc.collect()
        t0 = time.perf_counter()
        got = peer_close_histograms(df)
        times["pandas"].append(time.perf_counter() - t0)
        del df
        keep_cells("pandas", got, last_round)
        del got
        gc.collect()
        con = duckdb_conns()
        t0 = time.perf_counter()
        got = duckdb_close_cells(con)
        times["duckdb"].append(time.perf_counter() - t0)
        con.close()
        keep_cells("duckdb", got, last_round)
        del got
        gc.collect()
        pldf = pl.read_parquet(export)
        t0 = time.perf_counter()
        got = polars_close_cells(pldf)
        times["polars"].append(time.perf_counter() - t0)
        del pldf
        keep_cells("polars", got, last_round)
        del got
        gc.collect()
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items())
              + f" (load average {os.getloadavg()[0]:.1f}; after the job, {merged})", flush=True)
    med = {k: _median(v) for k, v in times.items()}
    print(f"ours, whole hourly job: median {med['job']:.2f} s ({report.summary()})")
    print("ours, per statement (medians, all hours): "
          + ", ".join(f"{f} {_median(v):.2f}s" for f, v in steps.items()))
    expected = job_histograms(wh, workdir / f"job-hist-close-x{replicas}.parquet", CLOSE_METRICS)
    wh.close()
    ok = True
    for name, peer_path in peer_paths.items():
        same_ok, detail = same_cells(peer_path, expected, workdir / f"compare-close-x{replicas}")
        print(f"{name}'s cells = the job's: {'yes' if same_ok else 'NO'} ({detail})")
        if name == "pandas":
            floor_ok = (floor_cells, floor_values) == pandas_cells
            print(f"floor's cells and values = the job's: {'yes' if floor_ok else 'NO'} "
                  f"({floor_cells:,} cells, {floor_values:,} values)")
            ok = ok and floor_ok
        ok = ok and same_ok
        peer_path.unlink(missing_ok=True)
    export.unlink(missing_ok=True)
    expected.unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)
    load = os.getloadavg()
    line = (f"cohorts x{replicas}: job/floor {med['job'] / med['floor']:.2f}; "
            f"share/floor {med['share'] / med['floor']:.2f}; pandas/share {med['pandas'] / med['share']:.2f}; "
            f"duckdb/share {med['duckdb'] / med['share']:.2f}; polars/share {med['polars'] / med['share']:.2f}")
    print(f"medians of {rounds} interleaved rounds, {rows:,} close records: "
          + ", ".join(f"{k} {v:.2f}s" for k, v in med.items()))
    print(f"load average (1/5/15 min) {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if not ok:
        sys.exit("cells differ: the ratios above compare different work")
    return {"line": line, "rows": rows, "replicas": replicas, "load": load, **med}


def print_scaling(mode: str, results: list[dict]) -> None:
    a = results[0]
    print(f"\nscaling [{mode}] (time relative to the smallest size; linear = the row factor):")
    print(f"  {'rows':>13} {'factor':>7} {'ours s':>8} {'ours x':>7} {'pandas s':>9} {'pandas x':>8} {'pandas/ours':>11}")
    for r in results:
        peer = (f"{r['peer_s']:>9.2f} {r['peer_s'] / a['peer_s']:>7.1f}x {r['peer_s'] / r['job_s']:>10.2f}x"
                if r["peer_s"] is not None and a["peer_s"] is not None else f"{'-':>9} {'-':>8} {'-':>11}")
        print(f"  {r['rows']:>13,} {r['rows'] / a['rows']:>6.1f}x {r['job_s']:>8.2f} {r['job_s'] / a['job_s']:>6.1f}x "
              f"{peer}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int, default=74_000,
                   help="connections to simulate (~13.6 samples each; default %(default)s -> ~1M samples)")
    p.add_argument("--replicas", default="1,10",
                   help="sizes to run, as multiples of the simulation, e.g. 1,10,100 (default %(default)s)")
    p.add_argument("--mode", choices=("samples", "close", "both"), default="both",
                   help="samples: tcp samples (connections rebuilt from polls); close: close records only; "
                        "both (default): one then the other")
    p.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench" / "out" / "cohorts")
    p.add_argument("--keep", action="store_true", help="keep (and reuse) the simulation output")
    p.add_argument("--peer-max-replicas", type=int, default=0, metavar="R",
                   help="run pandas only up to this size (0, the default: every size). At x100 in samples "
                        "mode its input alone is ~11 GiB of RAM; above R the job runs alone, for its scaling")
    p.add_argument("--rounds", type=int, default=3,
                   help="close mode: interleaved rounds per size (job, floor, pandas, duckdb, polars each "
                        "once per round; medians reported; default %(default)s)")
    args = p.parse_args(argv)
    replicas = [int(x) for x in args.replicas.split(",")]
    modes = ["samples", "close"] if args.mode == "both" else [args.mode]
    args.workdir.mkdir(parents=True, exist_ok=True)
    sim = simulate(args.workdir, args.connections, args.keep)
    lines = []
    for mode in modes:
        if mode == "close":
            lines += [run_close(args.workdir, sim, r, args.rounds)["line"] for r in replicas]
            continue
        results = [run_size(args.workdir, sim, r, mode, peer=not args.peer_max_replicas or r <= args.peer_max_replicas)
                   for r in replicas]
        if len(results) >= 2:
            print_scaling(mode, results)
    # issue #30's lines: one per replica count (close mode), exactly this form
    print()
    for line in lines:
        print(line)
    if not args.keep:
        shutil.rmtree(sim, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
