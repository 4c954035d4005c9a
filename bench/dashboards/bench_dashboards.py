"""bench/dashboards: every dashboard panel and analyst view on 90 days of rollups for a 500-host PoP.

Data (generated in the embedded ClickHouse with ``INSERT ... SELECT ... FROM numbers()``, one day
per INSERT; nothing simulated): one PoP ``bench1``, one rollout, two arms (control = cubic, bbr),
two kernels, HOSTS hosts, DAYS days of hours:

- ``cohort_hourly``: host x hour x metric (the 7 of the Canary dashboard) x segment (``all``,
  ``bulk``, one RTT class), each with the moments and a BINS-bin histogram (its cells in ``cohort_cells_hourly``) —
  what the hourly job writes for that fleet (real rows have more bins for wide metrics) — for the
  first and last --hourly-days days, their ``cohort_daily`` rows by the job's ``refresh_day``;
  the days between get ``cohort_daily`` rows directly (readers take whole days from there).
- ``cohort_heatmap_hourly``: host x hour x pair (2) x segment (``all``, ``bulk``) x CELLS cells.
- ``assignments``: every host's enrolment plus one reassignment; ``agent_status``: one heartbeat
  per host every 5 minutes for the DAYS days; judge tables: one look per hour; ``alerts``: a few
  hundred; raw ``tcp_samples`` / ``http_requests``: the last 24 h at 1 row per host-minute (the
  raw tables keep 90 days in production; panels on them show hours, not months).

Measured: each panel's SQL with the Grafana macros expanded (``ccab.dashboards.expand``) over the
DAYS-day range less its first 5 and last 3 hours (not day-aligned, like ``now-90d``; panels with
their own relative time over that), every analyst view (``sql/views/``) over
the same range; the best of REPEATS runs, wall time. Also printed per panel: rows read by the
engine, and the cost of a full scan of the table it reads (the "physical limit": a panel cannot
be cheaper than reading its rows once). Goal: every panel < 1 s here. When a panel misses, the
notes at the end say what to change.

Usage: bench/dashboards/run.sh [--hosts 500] [--days 90] [--repeats 3] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ccab.base import schema as migrate
from ccab.base.warehouse import ChdbWarehouse
from ccab.cohorts.daily import refresh_day
from ccab.cohorts.views import install_views, view_files
from ccab.dashboards.definitions import DASHBOARDS, METRICS
from ccab.dashboards.expand import expand

POP, ROLLOUT = "bench1", "r-bench"
ARMS = ["bbr", "control"]
KERNELS = ["6.1.0-bench", "6.6.0-bench"]
SEGMENTS = ["all", "bulk", "rtt:20-80ms"]  # the two the dashboards offer, one RTT class for the views
PAIRS = ["rtt_us:retrans_pct", "rtt_us:inflight_bytes"]
GOAL_S = 1.0


def _host(expr: str) -> str:
    return f"concat('edge-', leftPad(toString({expr}), 4, '0'))"


def _arm(h: str) -> str:
    return f"if({h} % 2 = 0, 'control', 'bbr')"


def _kernel(h: str) -> str:
    return f"if(intDiv({h}, 3) % 2 = 0, '{KERNELS[0]}', '{KERNELS[1]}')"


def _daily_direct(wh: ChdbWarehouse, hosts: int, first_day: int, n_days: int, s0: int, bins: int, cells: int,
                  m_arr: str, s_arr: str, p_arr: str) -> None:
    """Daily rollup rows of ``n_days`` days written directly (one row per host-day-metric-segment,
    counts of a day's 24 hours), for the days whose hourly rows are not generated (--hourly-days)."""
    rows = hosts * n_days
    day = f"toDateTime({s0} + ({first_day} + intDiv(number, {hosts})) * 86400, 'UTC')"
    wh.command(f"""
INSERT INTO cohort_daily
SELECT {day}, '{POP}', '{ROLLOUT}', {_arm('h')} AS arm, {_kernel('h')}, if(arm = 'bbr', 'bbr', 'cubic'),
       if(arm = 'bbr', 1, 0), {_host('h')}, seg, met,
       toUInt64(24 * (200 + (h * 7 + number) % 300)) AS n, toUInt64(n % 11), toUInt64(n % 5), toUInt64(n % 3),
       n * 1000.5, n * 1e6, n * 10.0, n * 400.0, n * 1.0
FROM (SELECT number, number % {hosts} AS h FROM numbers({rows}))
ARRAY JOIN {m_arr} AS met, arrayEnumerate({m_arr}) AS mi
ARRAY JOIN {s_arr} AS seg""", settings={"max_partitions_per_insert_block": 0})
    wh.command(f"""
INSERT INTO cohort_cells_daily
SELECT {day}, '{POP}', '{ROLLOUT}', {_arm('h')} AS arm, {_kernel('h')}, if(arm = 'bbr', 'bbr', 'cubic'),
       if(arm = 'bbr', 1, 0), {_host('h')}, seg, met,
       toInt32(mi * 256 + 1200 + j * 8 + (h % 16)), toUInt64(24 * (1 + (h + j + number) % 40))
FROM (SELECT number, number % {hosts} AS h FROM numbers({rows}))
ARRAY JOIN {m_arr} AS met, arrayEnumerate({m_arr}) AS mi
ARRAY JOIN {s_arr} AS seg
ARRAY JOIN range({bins}) AS j""", settings={"max_partitions_per_insert_block": 0})
    wh.command(f"""
INSERT INTO cohort_heatmap_daily
SELECT {day}, '{POP}', '{ROLLOUT}', {_arm('h')} AS arm, {_kernel('h')}, if(arm = 'bbr', 'bbr', 'cubic'),
       if(arm = 'bbr', 1, 0), {_host('h')}, seg, pair,
       toInt32(100 + c % 8 + h % 4), if(c % 5 = 0, toInt32(-2147483648), toInt32(20 + intDiv(c, 8))),
       toUInt64(24 * (1 + (h + c) % 17))
FROM (SELECT number, number % {hosts} AS h FROM numbers({rows}))
ARRAY JOIN {p_arr} AS pair
ARRAY JOIN ['all', 'bulk'] AS seg
ARRAY JOIN range({cells}) AS c""", settings={"max_partitions_per_insert_block": 0})


def generate(wh: ChdbWarehouse, hosts: int, days: int, end: datetime, bins: int, cells: int, log,
             hourly_days: int = 0) -> dict[str, int]:
    start = end - timedelta(days=days)
    metrics = [m for m, *_ in METRICS]
    m_arr = "[" + ",".join(f"'{m}'" for m in metrics) + "]"
    s_arr = "[" + ",".join(f"'{s}'" for s in SEGMENTS) + "]"
    p_arr = "[" + ",".join(f"'{p}'" for p in PAIRS) + "]"
    s0 = int(start.timestamp())
    hourly = [d for d in range(days) if not hourly_days or d < hourly_days or d >= days - hourly_days]
    middle = [d for d in range(days) if d not in hourly]
    if middle:  # contiguous: written directly at day grain
        _daily_direct(wh, hosts, middle[0], len(middle), s0, bins, cells, m_arr, s_arr, p_arr)
        log(f"  daily rows of days {middle[0] + 1}-{middle[-1] + 1} written directly ({time.strftime('%H:%M:%S')})")
    for d in hourly:
        t0 = s0 + d * 86400
        per_day = hosts * 24
        # one row per host-hour, exploded over metrics and segments with ARRAY JOIN
        wh.command(f"""
INSERT INTO cohort_hourly
SELECT toDateTime({t0} + intDiv(number, {hosts}) * 3600, 'UTC') AS hour, '{POP}', '{ROLLOUT}',
       {_arm('h')} AS arm, {_kernel('h')}, if(arm = 'bbr', 'bbr', 'cubic'), if(arm = 'bbr', 1, 0),
       {_host('h')}, seg, met,
       toUInt64(200 + (h * 7 + number) % 300) AS n, toUInt64(n % 11), toUInt64(n % 5), toUInt64(n % 3),
       n * 1000.5, n * 1e6, n * 10.0, n * 400.0, n * 1.0
FROM (SELECT number, number % {hosts} AS h FROM numbers({per_day}))
ARRAY JOIN {m_arr} AS met, arrayEnumerate({m_arr}) AS mi
ARRAY JOIN {s_arr} AS seg""", settings={"max_partitions_per_insert_block": 0})
        wh.command(f"""
INSERT INTO cohort_cells_hourly
SELECT toDateTime({t0} + intDiv(number, {hosts}) * 3600, 'UTC') AS hour, '{POP}', '{ROLLOUT}',
       {_arm('h')} AS arm, {_kernel('h')}, if(arm = 'bbr', 'bbr', 'cubic'), if(arm = 'bbr', 1, 0),
       {_host('h')}, seg, met,
       toInt32(mi * 256 + 1200 + j * 8 + (h % 16)), toUInt64(1 + (h + j + number) % 40)
FROM (SELECT number, number % {hosts} AS h FROM numbers({per_day}))
ARRAY JOIN {m_arr} AS met, arrayEnumerate({m_arr}) AS mi
ARRAY JOIN {s_arr} AS seg
ARRAY JOIN range({bins}) AS j""", settings={"max_partitions_per_insert_block": 0})
        wh.command(f"""
INSERT INTO cohort_heatmap_hourly
SELECT toDateTime({t0} + intDiv(number, {hosts}) * 3600, 'UTC'), '{POP}', '{ROLLOUT}',
       {_arm('h')} AS arm, {_kernel('h')}, if(arm = 'bbr', 'bbr', 'cubic'), if(arm = 'bbr', 1, 0),
       {_host('h')}, seg, pair,
       toInt32(100 + c % 8 + h % 4), if(c % 5 = 0, toInt32(-2147483648), toInt32(20 + intDiv(c, 8))),
       toUInt64(1 + (h + c) % 17)
FROM (SELECT number, number % {hosts} AS h FROM numbers({per_day}))
ARRAY JOIN {p_arr} AS pair
ARRAY JOIN ['all', 'bulk'] AS seg
ARRAY JOIN range({cells}) AS c""", settings={"max_partitions_per_insert_block": 0})
        # the daily rollups of the day, by the hourly job's own code (what it does after each hour)
        refresh_day(wh, datetime.fromtimestamp(t0, timezone.utc))
        log(f"  generated the hours of day {d + 1}/{days} ({time.strftime('%H:%M:%S')})")
    end_s = int(end.timestamp())
    wh.command(f"""
INSERT INTO assignments (rollout_id, generation, pop, host, arm, cc, qdisc, issued_at_ms, signature, _topic, _partition, _offset)
SELECT '{ROLLOUT}', g, '{POP}', {_host('h')}, if(g = 1, 'control', {_arm('h')}) AS arm, if(arm = 'bbr', 'bbr', 'cubic'),
       NULL, ({s0} + (g - 1) * 86400) * 1000, 'sig', 'bench', 0, number
FROM (SELECT number, number % {hosts} AS h, 1 + intDiv(number, {hosts}) AS g FROM numbers({hosts * 2}))""")
    beats = days * 288
    wh.command(f"""
INSERT INTO agent_status (ts_ms, pop, host, kernel, rollout_id, arm, generation, state, cc_effective, cc_available,
                          qdisc_effective, reason, _topic, _partition, _offset)
SELECT ({s0} + intDiv(number, {hosts}) * 300) * 1000, '{POP}', {_host('h')}, {_kernel('h')}, '{ROLLOUT}',
       {_arm('h')} AS arm, 2, if(number % 997 = 0, 'failed', 'applied'), if(arm = 'bbr', 'bbr', 'cubic'),
       ['reno', 'cubic', 'bbr'], 'fq', '', 'bench', 0, number
FROM (SELECT number, number % {hosts} AS h FROM numbers({hosts * beats}))""")
    looks = days * 24
    for table, cols in (
        ("judge_results", "window_start, window_end, look, looks_planned, pop, rollout_id, treatment_arm, control_arm, "
                          "metric, statistic, segment, role, method, hosts_treatment, hosts_control, value_treatment, "
                          "value_control, estimate, ci_low, ci_high, p_value, severity, outcome, computed_seq"),
    ):
        wh.command(f"""
INSERT INTO {table} ({cols})
SELECT toDateTime({s0}, 'UTC'), toDateTime({s0} + (look + 1) * 3600, 'UTC'), look + 1, {looks}, '{POP}', '{ROLLOUT}',
       'bbr', 'control', met, 'p50', 'all', if(met = 'retrans_pct', 'guardrail', 'info'), 'delta-welch',
       {hosts // 2}, {hosts // 2}, 1.1, 1.0, 0.01 * (look % 7), -0.02, 0.04, 0.2, 'page', 'no_difference', look
FROM (SELECT number AS look FROM numbers({looks})) ARRAY JOIN ['retrans_pct', 'rtt_us', 'goodput_bps'] AS met""")
    wh.command(f"""
INSERT INTO judge_verdicts (window_start, window_end, look, looks_planned, pop, rollout_id, treatment_arm, control_arm,
                            decision, reasons, alert_ids, gates_failed, computed_seq)
SELECT toDateTime({s0}, 'UTC'), toDateTime({s0} + (number + 1) * 3600, 'UTC'), number + 1, {looks}, '{POP}', '{ROLLOUT}',
       'bbr', 'control', 'continue', [], [], [], number
FROM numbers({looks})""")
    wh.command(f"""
INSERT INTO judge_gates (window_start, window_end, pop, rollout_id, gate, arm, host, status, value, threshold, detail,
                         computed_seq)
SELECT toDateTime({s0}, 'UTC'), toDateTime({s0} + (number + 1) * 3600, 'UTC'), '{POP}', '{ROLLOUT}', gate, '', '',
       'pass', 0.97, 0.95, '', number
FROM numbers({looks}) ARRAY JOIN ['host_completeness', 'cc_compliance'] AS gate""")
    wh.command(f"""
INSERT INTO alerts (alert_id, ts_ms, first_seen_ms, rollout_id, pop, kind, metric, statistic, segment, treatment_arm,
                    control_arm, direction, estimate, ci_low, ci_high, p_value, severity, action, window_start,
                    window_end, summary, description, report_url, version)
SELECT concat('a-', toString(intDiv(number, 4))), ({s0} + number * 3600 * 6) * 1000, ({s0} + number * 3600 * 6) * 1000,
       '{ROLLOUT}', '{POP}', 'guardrail', 'retrans_pct', 'ratio', 'all', 'bbr', 'control', 'regression', 2.0, 1.1,
       2.9, 0.002, if(number % 3 = 0, 'page', 'ticket'), 'none', toDateTime({s0}, 'UTC'),
       toDateTime({s0} + number * 3600 * 6, 'UTC'), 'bbr retransmits up', '...', 'https://reports.example/r/1', number % 4
FROM numbers({days * 4})""")
    wh.command(f"""
INSERT INTO dead_letters (ts, _topic, _partition, _offset, schema, reason, raw, raw_bytes)
SELECT toDateTime({end_s} - number * 600, 'UTC'), 'ccab.tcp.v1', 0, number, 'ccab.tcp.v1', 'missing field rtt_us',
       '{{"pop": "{POP}"}}', 15
FROM numbers(1000)""")
    raw_rows = hosts * 1440
    for table, ts_col in (("tcp_samples", "ts"), ("http_requests", "ts")):
        cols = {r[0]: r[1] for r in wh.query(
            f"SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = '{table}' "
            "AND default_kind NOT IN ('MATERIALIZED', 'ALIAS')").rows}
        exprs = {"pop": f"'{POP}'", "rollout_id": f"'{ROLLOUT}'", "host": _host("h"), "arm": _arm("h"),
                 "kernel": _kernel("h"), "cc": "if(h % 2 = 0, 'cubic', 'bbr')"}
        picked = {c: e for c, e in exprs.items() if c in cols}
        time_col = next((c for c in (ts_col, "ts_ms") if c in cols), None)
        if time_col is None:
            continue
        t_type = cols[time_col]
        t_expr = f"({end_s} - 86400 + intDiv(number, {hosts}) * 60)"
        picked[time_col] = f"{t_expr} * 1000" if "Int" in t_type else f"toDateTime64({t_expr}, 3, 'UTC')" \
            if "DateTime64" in t_type else f"toDateTime({t_expr}, 'UTC')"
        for c, t in cols.items():
            if c in picked:
                continue
            if t.startswith(("UInt", "Int", "Nullable(UInt", "Nullable(Int")):
                picked[c] = "toUInt32(1000 + (number * 7919) % 90000)" if "Int" in t and "8" not in t else "1"
        names = ", ".join(picked)
        wh.command(f"INSERT INTO {table} ({names}) SELECT {', '.join(picked.values())} "
                   f"FROM (SELECT number, number % {hosts} AS h FROM numbers({raw_rows}))",
                   settings={"max_partitions_per_insert_block": 0})
    counts = {}
    for table in ("cohort_hourly", "cohort_daily", "cohort_cells_hourly", "cohort_cells_daily", "cohort_heatmap_hourly",
                  "cohort_heatmap_daily", "assignments",
                  "agent_status", "judge_results",
                  "tcp_samples", "http_requests"):
        counts[table] = wh.query(f"SELECT count() FROM {table}").rows[0][0]
    return counts


CPU = {"best": 0.0}  # the CPU seconds (all threads of this process: chdb runs in-process) of the last best run


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(wh: ChdbWarehouse, sql: str, repeats: int) -> tuple[float, int]:
    """Best wall time of ``repeats`` runs and the row count; the CPU seconds of that run in CPU["best"]
    (on a loaded shared machine wall time is mostly waiting for a core; CPU time is the work)."""
    best = float("inf")
    rows = 0
    for _ in range(repeats):
        c = _cpu()
        t = time.perf_counter()
        rows = len(wh.query(sql).rows)
        wall = time.perf_counter() - t
        if wall < best:
            best, CPU["best"] = wall, _cpu() - c
    return best, rows


def _variables() -> dict:
    return {"pop": POP, "rollout": ROLLOUT, "arm": ARMS, "kernel": KERNELS, "metric": "rtt_us", "segment": "all"}


def panels():
    for name, make in DASHBOARDS.items():
        board, _ = make()
        for p in _flatten(board.get("panels", [])):
            for target in p.get("targets", []):
                sql = target.get("rawSql")
                if sql:
                    yield name, p.get("title", "?"), p.get("repeat"), p.get("timeFrom"), sql


def relative_range(time_from: str | None, start: datetime, end: datetime) -> datetime:
    """A panel's own start: Grafana's per-panel relative time ("7d", "24h") before ``end``, else ``start``."""
    if not time_from:
        return start
    n, unit = int(time_from[:-1]), time_from[-1]
    return max(start, end - {"d": timedelta(days=n), "h": timedelta(hours=n), "m": timedelta(minutes=n)}[unit])


def _flatten(items):
    for p in items:
        yield p
        yield from _flatten(p.get("panels", []))


VIEW_ARGS = {
    "cohort_quantiles": "metric = 'rtt_us', segment = 'all'",
    "cohort_cdf": "metric = 'rtt_us', segment = 'all', bins_per_octave = 16",
    "cohort_pdf": "metric = 'rtt_us', segment = 'all', bins_per_octave = 16",
    "cohort_heatmap": f"pair = '{PAIRS[0]}', segment = 'all', bins_per_octave = 2",
    "cohort_goodput_by_rtt_class": "",
    "cohort_network_pdf": "metric = 'rtt_us', segment = 'access:%', bins_per_octave = 16",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=500, help="hosts in the PoP (default 500)")
    ap.add_argument("--days", type=int, default=90, help="days of hourly rollups (default 90)")
    ap.add_argument("--bins", type=int, default=16, help="histogram bins per cohort_hourly row (default 16)")
    ap.add_argument("--cells", type=int, default=8, help="heatmap cells per host-hour-pair-segment (default 8)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per query; the best is printed (default 3)")
    ap.add_argument("--hourly-days", type=int, default=2, metavar="K",
                    help="hourly rollup rows only for the first and last K days (their daily rows computed from "
                         "them by the job's refresh_day); the days between get daily rows directly — the "
                         "readers take whole days from the daily tables, so the hourly rows of those days "
                         "are never read (0: every day's hours, ~22.7M rows at 500 x 90; default 2)")
    ap.add_argument("--workdir", type=Path, default=None, help="warehouse directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the warehouse (with --workdir: reuse it if filled)")
    args = ap.parse_args(argv)
    log = lambda m: print(m, flush=True)  # noqa: E731
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ccab-bench-dashboards-"))
    data_end = datetime(2026, 11, 1, tzinfo=timezone.utc)
    data_start = data_end - timedelta(days=args.days)
    # the measured range is not day-aligned, like "now-90d": its first and last hours are read
    # from the hourly rollups, the whole days between from the daily ones
    start, end = data_start + timedelta(hours=5), data_end - timedelta(hours=3)
    wh = ChdbWarehouse(work / "warehouse")
    try:
        migrate.migrate(wh, log=lambda _m: None)
        install_views(wh)
        if wh.query("SELECT count() FROM cohort_hourly").rows[0][0] == 0:
            log(f"generating {args.days} days x {args.hosts} hosts of rollups in {work} ...")
            t = time.perf_counter()
            counts = generate(wh, args.hosts, args.days, data_end, args.bins, args.cells, log, args.hourly_days)
            wh.command("OPTIMIZE TABLE agent_status FINAL")
            log(f"generated in {time.perf_counter() - t:.0f} s: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
        else:
            log(f"reusing the rollups in {work}")
        log(f"load average: {open('/proc/loadavg').read().split()[:3]}")

        # the physical limit: one full read of the daily rollup columns the panels aggregate
        limit_s, _ = _timed(wh, "SELECT bin, sum(count) FROM cohort_cells_daily WHERE metric = 'rtt_us' AND segment = 'all' "
                                "GROUP BY bin", args.repeats)
        log(f"limit: one scan of cohort_cells_daily for one metric and segment (its cells summed by bin) over {args.days} days: "
            f"{limit_s:.3f} s")
        log(f"range: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC (panels with their own relative time: "
            "that before the end)")
        results: list[tuple[str, float, int, float]] = []
        v = _variables()
        for board, title, repeat, time_from, sql in panels():
            values = dict(v)
            if repeat:
                values[repeat] = ARMS[0]
            p_start = relative_range(time_from, start, end)
            q = expand(sql, values, p_start, end, interval_s=max(60, int((end - p_start).total_seconds()) // 1000))
            try:
                secs, rows = _timed(wh, q, args.repeats)
            except Exception as exc:  # noqa: BLE001 - a failing panel is a result, not the end
                log(f"  FAILED {board}: {title}: {str(exc)[:300]}")
                results.append((f"{board}: {title}", float("nan"), 0, float("nan")))
                continue
            results.append((f"{board}: {title}", secs, rows, CPU["best"]))
        for name in view_files():
            params = ", ".join(x for x in (f"pop = '{POP}'", f"rollout_id = '{ROLLOUT}'", VIEW_ARGS.get(name, ""),
                                           f"t_from = '{start:%Y-%m-%d %H:%M:%S}'", f"t_to = '{end:%Y-%m-%d %H:%M:%S}'")
                               if x)
            try:
                secs, rows = _timed(wh, f"SELECT * FROM {name}({params})", args.repeats)
            except Exception as exc:  # noqa: BLE001
                log(f"  FAILED view {name}: {str(exc)[:300]}")
                results.append((f"view: {name}", float("nan"), 0, float("nan")))
                continue
            results.append((f"view: {name}", secs, rows, CPU["best"]))

        log(f"\n{'panel / view':<70} {'best s':>7} {'cpu s':>6} {'rows':>6}  goal < {GOAL_S:.0f} s")
        missed = []
        for label, secs, rows, cpu in results:
            ok = secs == secs and secs < GOAL_S
            if not ok:
                missed.append(label)
            log(f"{label[:70]:<70} {secs:7.3f} {cpu:6.3f} {rows:6d}  {'met' if ok else 'MISSED'}  "
                f"({secs / limit_s:5.1f}x the scan)")
        cpu_missed = [r[0] for r in results if not r[3] < GOAL_S]
        log(f"CPU time (the work, whatever the load): {len(results) - len(cpu_missed)} of {len(results)} under "
            f"{GOAL_S:.0f} s; slowest {max(r[3] for r in results if r[3] == r[3]):.3f} s; load average now "
            f"{open('/proc/loadavg').read().split()[:3]}")
        slowest = max((r for r in results if r[1] == r[1]), key=lambda r: r[1])
        log(f"\n{len(results) - len(missed)} of {len(results)} panels and views under {GOAL_S:.0f} s "
            f"({args.hosts} hosts, {args.days} days); slowest {slowest[1]:.3f} s ({slowest[0]})")
        log(f"table19 dashboards | {len(results) - len(missed)} of {len(results)} panels and views < {GOAL_S:.0f} s on "
            f"{args.days} days x {args.hosts} hosts; slowest {slowest[1]:.2f} s ({slowest[0]}) | "
            f"{'met' if not missed else 'NOT met'}")
        if missed:
            log("missed: " + "; ".join(missed))
            log("what to change: compare the cpu column (the work) with the wall time (the work plus waiting "
                "for a core); bench/dashboards/README.md lists what is done and what is left")
        return 0
    finally:
        wh.close()
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
