"""``ccab analyze`` (the cohort pipeline without Airflow) and ``ccab dags`` (its DAGs, locally)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta

from ccab.base.errors import fail
from ccab.cli.common import parse_hour, parse_time

ANALYZE_EPILOG = """\
what it does, in order (the same functions the Airflow DAGs call):
  1. recompute every UTC hour of [--from, --to) into the cohort rollups (cohort_hourly,
     cohort_heatmap_hourly, cohort_prefix_hourly), each hour swapped in whole: re-running is
     idempotent, nothing is doubled or dropped
  2. recompute hours of the --lookback-hours before --from whose raw rows changed since (late data)
  3. write per-arm summaries of the window to cohort_arm_summaries, then run the statistical
     judge (host-clustered effects, guardrails, data-quality gates, circuit breakers) and print
     each treatment arm's verdict and the page/ticket alerts (all alerts: ccab alerts)

examples:
  ccab analyze --from 2025-11-20T00:00Z --to 2025-11-21T00:00Z
  ccab analyze --from 2025-11-20T12:00Z --to 2025-11-20T13:00Z --rollout tyo1-bbr-canary
  ccab analyze --from 2025-11-20 --to 2025-11-21 --bulk-min-bytes 4194304   # another bulk filter
  ccab analyze --from 2025-11-20T00:00Z --to 2025-11-20T06:00Z --control bbr1 --look 6 --looks 24

--rollout limits the summary (and the judge) to one rollout; the hours are always recomputed for
every rollout, since an hour is the unit that is swapped in.
"""


def register(sub) -> None:
    p = sub.add_parser("analyze", help="compute cohort rollups and per-arm summaries for a time window",
                       description="Run the cohort pipeline (the functions behind the Airflow DAGs) for "
                                   "[--from, --to): rollups per cohort-hour, late-data recomputation, "
                                   "per-arm summaries.",
                       epilog=ANALYZE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="t_from", required=True, metavar="ISO", help="first UTC hour (inclusive)")
    p.add_argument("--to", dest="t_to", required=True, metavar="ISO", help="end UTC hour (exclusive)")
    p.add_argument("--rollout", default="", metavar="ID", help="summarise (and judge) only this rollout")
    p.add_argument("--bulk-min-bytes", type=int, default=1 << 20, metavar="N",
                   help="bulk filter for goodput and the 'bulk' segment, bytes (default: %(default)s = 1 MiB)")
    p.add_argument("--lookback-hours", type=int, default=24, metavar="H",
                   help="also recompute stale hours this far before --from (default: %(default)s; 0 = off)")
    p.add_argument("--control", default=None, metavar="ARM",
                   help="the arm the others are compared with (default: the rollout plan's control arm "
                        "when the controller started the rollout, else 'control')")
    p.add_argument("--look", type=int, default=1, metavar="K",
                   help="which look of a sequential plan this is (alpha spent so far; default: %(default)s)")
    p.add_argument("--looks", type=int, default=1, metavar="N", help="planned looks (default: %(default)s)")
    p.add_argument("--notify", metavar="URL", default=None,
                   help="POST new page/ticket alerts to this Alertmanager-compatible URL "
                        "(default: $CCAB_ALERT_WEBHOOK_URL, unset = no webhook)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_analyze)

    d = sub.add_parser("dags", help="the Airflow DAGs in dags/, run locally with dag.test()",
                       description="List or run ccab's Airflow DAGs in-process (dag.test()) against a local "
                                   "Airflow home (SQLite, $CCAB_DATA_DIR/airflow unless AIRFLOW_HOME is set).")
    dsub = d.add_subparsers(dest="dags_command", metavar="ACTION", required=True)
    ls = dsub.add_parser("list", help="import every DAG file and list the DAGs (exit 1 on import errors)")
    ls.add_argument("--json", action="store_true",
                    help="print each DAG's schedule, tags, max_active_runs and tasks (retries, pool) as JSON")
    ls.set_defaults(func=run_dags_list)
    t = dsub.add_parser("test", help="run a DAG with dag.test() for each data interval ending in (--from, --to]")
    t.add_argument("dag_ids", nargs="+", metavar="DAG_ID",
                   help="one or more of ccab_cohorts_hourly, ccab_compare, ccab_daily_report (run in this order)")
    t.add_argument("--from", dest="t_from", required=True, metavar="ISO",
                   help="run the intervals that end after this time ...")
    t.add_argument("--to", dest="t_to", required=True, metavar="ISO", help="... and at or before this one")
    t.add_argument("--dry-run", action="store_true", help="only list the data intervals that would run")
    t.add_argument("--json", action="store_true", help="print the runs (or intervals) as JSON")
    t.set_defaults(func=run_dags_test)


_fail = fail


def run_analyze(args: argparse.Namespace) -> int:
    from ccab.base.warehouse import WarehouseError
    from ccab.cohorts.job import CohortJobError, JobConfig, run_window
    from ccab.pipeline import analyze_window
    from ccab.pipeline import open_warehouse as warehouse

    try:
        start, end = parse_hour(args.t_from, "--from"), parse_hour(args.t_to, "--to")
        if end <= start:
            raise ValueError(f"--to ({args.t_to}) must be after --from ({args.t_from})")
        cfg = JobConfig(bulk_min_bytes=args.bulk_min_bytes, lookback=timedelta(hours=args.lookback_hours))
        if not 1 <= args.look <= args.looks:
            raise ValueError(f"--look {args.look} must be between 1 and --looks {args.looks}")
    except ValueError as exc:
        return _fail("analyze", str(exc))
    from ccab.base.config import settings

    judge_options = {"control_arm": args.control, "look": args.look, "looks_planned": args.looks,
                     "notify_url": args.notify or settings().alert_webhook_url}
    progress = None if args.no_progress or args.json else _progress()
    if progress is not None and not sys.stderr.isatty():  # a log: plain lines, never a bar
        from ccab.base.progress import Progress

        progress, plain = None, Progress("analyze", unit="cohort hours")
    else:
        plain = None
    try:
        with warehouse() as wh:
            task = None
            if progress:
                progress.start()
                task = progress.add_task("cohort hours", total=None)

            def on_hour(res, done, total):
                if plain is not None:
                    plain.total = total
                    plain.advance(done - plain.done, note=f"{res.hour:%m-%d %H}:00 {res.reason}")
                if progress:
                    progress.update(task, completed=done, total=total,
                                    description=f"cohort hours ({res.hour:%m-%d %H}:00 {res.reason})")
            try:
                report = run_window(wh, start, end, cfg, lookback=bool(args.lookback_hours), on_hour=on_hour)
            finally:
                if progress:
                    progress.stop()
            compared = analyze_window(wh, start, end, args.rollout, **judge_options)
            rows = _summary_rows(wh, start, end, args.rollout)
    except (CohortJobError, WarehouseError, RuntimeError) as exc:
        return _fail("analyze", str(exc), 1)
    if args.json:
        print(json.dumps({"rollup": {"summary": report.summary(),
                                     "hours": [{"hour": h.hour.isoformat(), "reason": h.reason, "skipped": h.skipped,
                                                "connections": h.connections, "rollup_rows": h.rollup_rows}
                                               for h in report.hours]},
                          "compare": compared.as_dict(), "arms": rows,
                          "judge": compared.judgement.as_dict()},
                         indent=1, default=str))
        return 0
    _print_summary(report, compared, rows)
    from ccab.cli.judge import print_verdicts

    print_verdicts(compared.judgement)
    return 0


_SUMMARY_SQL = """
SELECT rollout_id, pop, arm, any(cc) AS cc, max(hosts) AS hosts,
       sumIf(n, metric = 'retrans_pct') AS connections,
       anyIf(p50, metric = 'retrans_pct') AS retrans_pct_p50,
       anyIf(share_above_50pct, metric = 'retrans_pct') AS retrans_above_50pct_share,
       anyIf(p50_nonzero, metric = 'inflight_bytes_per_sample') AS inflight_bytes_busy_sample_p50,
       anyIf(p50, metric = 'rtt_us') AS rtt_us_p50,
       anyIf(p50, metric = 'goodput_bps') AS goodput_bps_p50,
       anyIf(ratio, metric = 'rwnd_limited_pct') AS rwnd_limited_pct_ratio
FROM cohort_arm_summaries FINAL
WHERE window_start = {a:DateTime('UTC')} AND window_end = {b:DateTime('UTC')} AND segment = 'all'
  AND ({r:String} = '' OR rollout_id = {r:String})
GROUP BY rollout_id, pop, arm
ORDER BY rollout_id, pop, arm != 'control', arm
"""


def _summary_rows(wh, start: datetime, end: datetime, rollout: str) -> list[dict]:
    from ccab.base.chtime import sql_time

    return wh.query(_SUMMARY_SQL, params={"a": sql_time(start), "b": sql_time(end), "r": rollout}).dicts()


def _print_summary(report, compared, rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console.width = 170
    console.print(f"rollups {report.start:%Y-%m-%d %H:%M}–{report.end:%Y-%m-%d %H:%M} UTC: {report.summary()}")
    for h in report.hours:
        if h.reason != "requested":
            console.print(f"  recomputed {h.hour:%Y-%m-%d %H}:00 ({h.reason})")
    console.print(f"per-arm summaries: {compared.summaries.summary_rows:,} rows in cohort_arm_summaries")
    if not rows:
        console.print("no rollup rows in this window (was anything loaded? `ccab query \"SELECT count() FROM tcp_samples\"`)")
        return
    t = Table(title="per arm, segment 'all' (quantiles from the rollup histograms)")
    for col in ("rollout", "arm", "cc", "hosts", "connections", "retrans % p50", "> 50% retrans",
                "in flight KiB p50 (busy samples)", "RTT ms p50", "goodput Mbit/s p50", "rwnd-limited %"):
        t.add_column(col, justify="left" if col in ("rollout", "arm", "cc") else "right")

    def f(v, fmt, scale=1.0):
        return "–" if v is None or v != v else format(v / scale, fmt)

    from rich.markup import escape

    from ccab.cli.common import printable

    def text(v) -> str:  # a stored value: no control characters, no rich markup
        return escape(printable(v))

    for r in rows:
        t.add_row(text(f"{r['pop']}/{r['rollout_id']}"), text(r["arm"]), text(r["cc"]), str(r["hosts"]),
                  f"{r['connections']:,}",
                  f(r["retrans_pct_p50"], ".2f"), f(r["retrans_above_50pct_share"], ".2%"),
                  f(r["inflight_bytes_busy_sample_p50"], ",.1f", 1024), f(r["rtt_us_p50"], ".1f", 1000),
                  f(r["goodput_bps_p50"], ".1f", 1e6), f(r["rwnd_limited_pct_ratio"], ".2f"))
    console.print(t)


def _progress():
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), transient=True, console=Console(stderr=True))


def run_dags_list(args: argparse.Namespace) -> int:
    from ccab_workshop import dags_local as airflow_local

    airflow_local.configure()
    bag = airflow_local.dag_bag()
    for path, err in sorted(bag.import_errors.items()):
        print(f"IMPORT ERROR {path}: {err}", file=sys.stderr)
    if args.json:
        print(json.dumps({"import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
                          "dags": [airflow_local.describe(dag) for _, dag in sorted(bag.dags.items())]}))
    else:
        for dag_id, dag in sorted(bag.dags.items()):
            print(f"{dag_id:24s} {airflow_local.describe_schedule(dag):40s} tags={','.join(sorted(dag.tags))}")
    return 1 if bag.import_errors else 0


def _stop_on_ctrl_c(command: str, where) -> None:
    """Ctrl-C stops the process at once with one line: Airflow's task runner would otherwise catch
    the KeyboardInterrupt as a task failure (a traceback), retry the task, and go on with the next
    interval. Nothing is half-written: ClickHouse inserts are atomic per part, and an hour's rollup
    is rebuilt whole when re-run."""
    import os
    import signal

    def stop(_signum, _frame):
        sys.stdout.flush()
        os.write(2, (f"ccab {command}: interrupted (Ctrl-C) {where()}; later runs not started "
                     f"(re-run the interrupted interval)\n").encode())
        os._exit(130)

    signal.signal(signal.SIGINT, stop)


def run_dags_test(args: argparse.Namespace) -> int:
    from ccab_workshop import dags_local as airflow_local

    try:
        start, end = parse_time(args.t_from, "--from"), parse_time(args.t_to, "--to")
    except ValueError as exc:
        return _fail("dags test", str(exc))
    if end <= start:
        return _fail("dags test", f"--to ({args.t_to}) must be after --from ({args.t_from})")
    airflow_local.configure()
    show = (lambda _m: None) if args.json else print
    current = {"run": "before the first run"}

    def log(message: str) -> None:
        if " dag.test " in message:
            current["run"] = message.split(" dag.test ", 1)[1]
        show(message)

    if not args.dry_run:
        _stop_on_ctrl_c("dags test", lambda: f"during {current['run']}")
    found: dict[str, list] = {}
    runs = []
    try:
        for dag_id in args.dag_ids:
            if args.dry_run:
                found[dag_id] = airflow_local.dag_intervals(dag_id, start, end)
            else:
                runs += airflow_local.test_intervals(dag_id, start, end, log=log)
    except airflow_local.AirflowLocalError as exc:
        return _fail("dags test", str(exc), 1)
    if args.dry_run:
        if args.json:
            print(json.dumps({d: [[s.isoformat(), e.isoformat()] for s, e in iv] for d, iv in found.items()}))
        else:
            for dag_id, iv in found.items():
                for s, e in iv:
                    print(f"{dag_id} [{s:%Y-%m-%d %H:%M}, {e:%Y-%m-%d %H:%M})")
        return 0
    if args.json:
        print(json.dumps([{"dag_id": r.dag_id, "start": r.start.isoformat(), "end": r.end.isoformat(),
                           "state": r.state, "seconds": round(r.seconds, 2)} for r in runs]))
    else:
        for r in runs:
            print(f"{r.dag_id} [{r.start:%Y-%m-%d %H:%M}, {r.end:%Y-%m-%d %H:%M}) {r.state} ({r.seconds:.1f}s)")
    if not runs:
        return _fail("dags test", f"no data interval of {', '.join(args.dag_ids)} ends in ({args.t_from}, {args.t_to}]: "
                                  "widen the window (ccab dags test ... --dry-run lists the intervals)", 1)
    failed = [r for r in runs if r.state != "success"]
    if failed:
        return _fail("dags test", f"{len(failed)} of {len(runs)} run(s) did not succeed "
                                  f"(first: {failed[0].dag_id} [{failed[0].start:%Y-%m-%d %H:%M}) {failed[0].state}); "
                                  "the task logs are above", 1)
    return 0
