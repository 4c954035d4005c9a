"""bench/cohorts/parts.py — where the hourly job's time goes against the floor of each part.

Issue #30 asks for the whole job within 3x the corrected engine floor (the peer's cells, each value
once). The job computes more than those cells: per-connection sums, the network families' cells,
heatmaps. This experiment measures, on the same close-records warehouse as bench_cohorts.py (the
simulation `replicas` times over), in interleaved rounds (medians):

- floor: the corrected engine floor of bench_cohorts.py (`floor_close_sql`), the ratio's unit;
- per statement of the job (each INSERT as the job runs it, the whole window at once):
  job      the statement as the job runs it: INSERT INTO its stage table;
  empty    the same statement over a window with no rows (a day later): its fixed cost — planning,
           scalar subqueries, dictionary probes — which dominates at x1;
  compute  the same SELECT into a Null-engine copy of the stage (everything but the write);
  agg      its aggregation alone — `SELECT count(), sum(cityHash64(*)) FROM cells` where the
           statement has a `cells` CTE (its group keys, counts; no join-back, no names, no rows out);
  write    its output rows (saved beforehand) inserted into an empty copy of the stage table: the
           cost of sorting and writing those rows in the table's order;
  write0   the same rows into a MergeTree with no sort key (ORDER BY tuple()): what writing that
           many rows costs in any table form.

The sum over the statements of agg (compute where a statement has no `cells` CTE) + write0 is a
lower bound of the job's statements in this engine for the rows its readers need (the cells, sums
and heatmaps at their grains), whatever the SQL; the daily tables take the same rows once more
(+ write0 again). If that is already above 3x the floor, the goal needs fewer rows, not better
statements. Also printed: the whole job (`run_window`) and its time outside its statements.

Usage: bench/cohorts/run.sh --parts [--replicas 10] [--rounds 3] [--workdir DIR] [--keep]
(`.venv/bin/python bench/cohorts/parts.py --help`).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cohorts as bc  # noqa: E402
from ccab.base.chtime import sql_time  # noqa: E402
from ccab.base.config import REPO_ROOT  # noqa: E402
from ccab.cohorts.daily import STAGE_INSERT_SETTINGS  # noqa: E402
from ccab.cohorts.job import MAX_BATCH_HOURS, REQUEST_STEPS, SAMPLE_STEPS, STEPS, read_sql  # noqa: E402

#: the top-level SELECT of a statement: the last line that starts with SELECT at column 0
_FINAL_SELECT = re.compile(r"^SELECT\b", re.MULTILINE)
_CELLS_CTE = re.compile(r"^cells AS \(", re.MULTILINE)


def agg_only(sql: str) -> str | None:
    """The statement with its final SELECT replaced by a checksum of its ``cells`` CTE (None if it
    has none): the aggregation at the statement's grain with nothing joined back or written."""
    if not _CELLS_CTE.search(sql):
        return None
    finals = list(_FINAL_SELECT.finditer(sql))
    return sql[:finals[-1].start()] + "SELECT count(), sum(cityHash64(*)) FROM cells"


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(wh, rounds: int) -> tuple[list[float], list[float], list[float], dict[str, dict[str, list[float]]],
                                      dict[str, int]]:
    """Run the job's statements over the window ``rounds`` times, each part measured each round:
    (floor, whole job, the job's time outside its statements, per statement and kind, rows out)."""
    params = {"hour_start": sql_time(bc.START), "hour_end": sql_time(bc.START + bc.timedelta(hours=bc.HOURS)),
              "bulk_min_bytes": bc.MIB}
    assert bc.HOURS <= MAX_BATCH_HOURS  # the job runs the window as one statement set, like here
    has = {t: int(wh.query(f"SELECT count() FROM {t}").scalar()) > 0 for t in ("tcp_samples", "http_requests")}
    steps = [(f, t) for f, t in STEPS
             if not ((f in SAMPLE_STEPS and not has["tcp_samples"]) or (f in REQUEST_STEPS and not has["http_requests"]))]
    empty = {**params, "hour_start": sql_time(bc.START + bc.timedelta(days=1)),
             "hour_end": sql_time(bc.START + bc.timedelta(days=1, hours=bc.HOURS))}
    floor: list[float] = []
    whole: list[float] = []
    outside: list[float] = []
    parts: dict[str, dict[str, list[float]]] = {f: {} for f, _ in steps}
    rows: dict[str, int] = {}
    settings = STAGE_INSERT_SETTINGS  # the job's own insert settings
    for r in range(rounds):
        bc.clear_rollups(wh)
        bc.settle_merges(wh, quiet_s=1.0)
        floor.append(bc.engine_floor_close(wh)[0])
        # the whole job once (as bench_cohorts.py times it): what it spends outside its statements
        # (fingerprints, swaps, the daily tables, watermarks)
        t0 = time.perf_counter()
        res = bc.run_window(wh, bc.START, bc.START + bc.timedelta(hours=bc.HOURS), lookback=False)
        whole.append(time.perf_counter() - t0)
        outside.append(whole[-1] - sum(sum(h.step_seconds.values()) for h in res.hours))
        bc.clear_rollups(wh)
        bc.settle_merges(wh, quiet_s=1.0)  # no measurement runs beside the merges of an earlier one
        for f, table in steps:
            cols = ", ".join(bc._columns(wh, table))
            sql = read_sql(f)
            select = f"SELECT {cols} FROM (\n{sql}\n)"
            got = parts[f]
            bc.settle_merges(wh, quiet_s=1.0)
            wh.command("DROP TABLE IF EXISTS bench_null")
            wh.command(f"CREATE TABLE bench_null AS {table} ENGINE = Null")
            got.setdefault("compute", []).append(_timed(lambda: wh.command(
                f"INSERT INTO bench_null ({cols}) {select}", params=params, settings=settings)))
            got.setdefault("empty", []).append(_timed(lambda: wh.command(
                f"INSERT INTO {table} ({cols}) {select}", params=empty, settings=settings)))
            agg = agg_only(sql)
            if agg:
                got.setdefault("agg", []).append(_timed(lambda: wh.query(agg, params=params)))
            # the job's own statement last: later statements read what it writes (connections.sql)
            got.setdefault("job", []).append(_timed(lambda: wh.command(
                f"INSERT INTO {table} ({cols}) {select}", params=params, settings=settings)))
            if table == "cohort_connections_stage":
                continue  # a scratch table the later statements read, not rows the readers need
            # its rows, saved once (not timed), then written again into an empty copy
            wh.command("DROP TABLE IF EXISTS bench_rows")
            wh.command(f"CREATE TABLE bench_rows AS {table} ENGINE = Memory")  # the table's own types
            wh.command(f"INSERT INTO bench_rows ({cols}) {select}", params=params)
            rows[f] = int(wh.query("SELECT count() FROM bench_rows").scalar())
            for name, engine in (("write", None), ("write0", "MergeTree ORDER BY tuple()")):
                wh.command("DROP TABLE IF EXISTS bench_copy")
                wh.command(f"CREATE TABLE bench_copy AS {table}" + (f" ENGINE = {engine}" if engine else ""))
                got.setdefault(name, []).append(_timed(lambda: wh.command(
                    f"INSERT INTO bench_copy ({cols}) SELECT {cols} FROM bench_rows", settings=settings)))
            wh.command("DROP TABLE IF EXISTS bench_rows")
            wh.command("DROP TABLE IF EXISTS bench_copy")
        wh.command("DROP TABLE IF EXISTS bench_null")
        print(f"round {r + 1}/{rounds}: floor {floor[-1]:.2f}s, job's statements "
              f"{sum(p['job'][-1] for p in parts.values()):.2f}s, whole job {whole[-1]:.2f}s (load average {bc.os.getloadavg()[0]:.1f})",
              flush=True)
    return floor, whole, outside, parts, rows


def report(floor: list[float], whole: list[float], outside: list[float],
           parts: dict[str, dict[str, list[float]]], rows: dict[str, int]) -> None:
    med = statistics.median
    f = med(floor)
    print(f"\nthe whole job (run_window): {med(whole):.2f} s = {med(whole) / f:.2f}x the floor, of which "
          f"{med(outside):.2f} s ({med(outside) / f:.2f}x) outside its statements (fingerprints, swaps, daily, "
          "watermarks)")
    kinds = ("job", "empty", "compute", "agg", "write", "write0")
    print(f"\nmedians, seconds (x the floor's {f:.2f} s):")
    print(f"  {'statement':<24} {'rows out':>11} " + " ".join(f"{k:>14}" for k in kinds))
    total = {k: 0.0 for k in kinds}
    bound = 0.0
    for name, got in parts.items():
        cells = []
        for k in kinds:
            if k in got:
                v = med(got[k])
                total[k] += v
                cells.append(f"{v:6.2f} ({v / f:4.2f}x)")
            else:
                cells.append(f"{'-':>14}")
        # the part's lower bound: its aggregation (or, without one, its compute) plus writing its rows
        part_bound = med(got.get("agg", got["compute"])) + (med(got["write0"]) if "write0" in got else 0.0)
        bound += part_bound
        print(f"  {name:<24} {rows.get(name, 0):>11,} " + " ".join(cells))
    print(f"  {'total':<24} {sum(rows.values()):>11,} "
          + " ".join(f"{total[k]:6.2f} ({total[k] / f:4.2f}x)" for k in kinds))
    print(f"\nlower bound of the job's statements (each part's aggregation, or its compute without one, "
          f"+ writing its rows unsorted): {bound:.2f} s = {bound / f:.2f}x the floor")
    # the hourly job also adds each new hour's rows to the daily tables (daily.add_hours): the same rows
    # written once more, at least write0 each
    with_daily = bound + total["write0"]
    print(f"... and with the daily tables' copy of the same rows (write0 once more): {with_daily:.2f} s = "
          f"{with_daily / f:.2f}x the floor")
    print(f"the job's statements as they run: {total['job']:.2f} s = {total['job'] / f:.2f}x the floor")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=10, help="the simulation this many times over (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians; default 3)")
    p.add_argument("--connections", type=int, default=74_000, help="connections to simulate (default 74000)")
    p.add_argument("--workdir", type=Path, default=REPO_ROOT / "bench" / "out" / "cohorts")
    p.add_argument("--keep", action="store_true", help="keep (and reuse) the simulation output")
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    sim = bc.simulate(args.workdir, args.connections, args.keep)
    path = args.workdir / f"warehouse-parts-x{args.replicas}"
    wh = bc.build_warehouse(path, sim, args.replicas, "close")
    n = int(wh.query("SELECT count() FROM tcp_conns").scalar())
    print(f"== [parts] {n:,} close records (x{args.replicas}); {bc.settle_merges(wh)}", flush=True)
    try:
        report(*measure(wh, args.rounds))
        print(f"load average (1/5/15 min) {' '.join(f'{x:.1f}' for x in bc.os.getloadavg())}")
    finally:
        wh.close()
        bc.shutil.rmtree(path, ignore_errors=True)
        if not args.keep:
            bc.shutil.rmtree(sim, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
