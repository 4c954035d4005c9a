"""``ccab sim``: simulate a PoP from a scenario into JSONL files or Kafka (thin I/O shell)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

from ccab.base.errors import fail
from ccab_workshop.sim.scenario import ScenarioError

EPILOG = """\
units: --hours in hours of simulated time; --connections is the total number of TCP connections
over the whole run (overrides traffic.connections_per_host_per_hour, keeping the diurnal shape and
host weights); records carry the contract units (_us, _ms, _bytes, _bps).

outputs in --out DIR:
  ccab.tcp.v1.jsonl, ccab.http.v1.jsonl   tcp_sample/1 and http_request/1 records (unless --to-kafka)
  truth.json                              planted effects, host and prefix parameters, realised stats
  networks.csv                            synthetic prefix metadata (ccab networks load networks.csv)
  ss/<host>/<tick_ts_ms>.txt              with --raw: `ss -tinHOe state established` snapshots
  nginx/<host>/access.log                 with --raw: nginx lines in the ccab JSON log_format

examples:
  ccab sim tiny --out /tmp/sim-tiny --raw
  ccab sim canary-tyo1 --out .ccab/sim/canary --plot docs/sim/canary-tyo1-pdfs.png
  ccab sim canary-tyo1 --out .ccab/sim/canary --to-kafka      # then: ccab loader --exit-when-idle 10
  ccab sim scenarios/aa.yaml --out /tmp/aa --connections 10000000 --workers 2
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sim",
        help="simulate an edge PoP with planted congestion-control effects",
        description="Generate tcp_sample/1 and http_request/1 records (and optionally raw ss/nginx "
                    "text) for a simulated PoP described by a scenario file. Deterministic for a seed.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO",
                   help="a scenario YAML file, or the NAME of a shipped one (scenarios/NAME.yaml: "
                        "canary-tyo1, aa, regression-bbr2-shallow, tiny)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="output directory (created; previous sim outputs in it are replaced)")
    p.add_argument("--seed", type=int, help="random seed (default: the scenario's `seed`)")
    p.add_argument("--hours", type=float, help="simulated duration in hours (default: `duration_h`)")
    p.add_argument("--connections", type=int, metavar="N",
                   help="total connections over the run (default: from connections_per_host_per_hour)")
    p.add_argument("--to-kafka", action="store_true",
                   help="produce to Kafka (topics ccab.tcp.v1, ccab.http.v1; brokers from "
                        "CCAB_KAFKA_BROKERS or the local broker) instead of writing JSONL")
    p.add_argument("--jsonl", action="store_true", help="with --to-kafka: also write the JSONL files")
    p.add_argument("--raw", action="store_true", help="also write raw ss snapshots and nginx access logs per host")
    p.add_argument("--plot", type=Path, metavar="PNG", help="write per-arm PDFs (retrans %%, in flight, RTT, goodput)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="generator processes (default: %(default)s); output does not depend on it")
    p.add_argument("--chunk-size", type=int, default=50_000, metavar="N",
                   help="connections per chunk, bounds memory (default: %(default)s)")
    p.add_argument("--check-expect", action="store_true",
                   help="exit 3 if a realised statistic misses the scenario's `expect` ranges")
    p.add_argument("--pre-period-h", type=float, metavar="H",
                   help="hours of pre-period written first: the same hosts before the rollout, no arm, no "
                        "rollout id (default: the scenario's `pre_period_h`, at most the run's hours; 0 = none). "
                        "With --connections N it gets N x H / hours connections")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--start", metavar="ISO", help="simulated start time (default: the scenario's `start`)")
    p.add_argument("--arm-map", type=Path, metavar="FILE",
                   help="JSON {host: arm}: run these hosts on these arms (the rollout's simulated actuator "
                        "writes it: $CCAB_DATA_DIR/sim-actuator/arm-map.json)")
    p.add_argument("--pop", metavar="POP",
                   help="simulate this PoP instead of the scenario's `pop` (host names follow it)")
    p.add_argument("--plan", type=Path, metavar="PLAN",
                   help="a rollout plan: run the PoP's hosts on the arms the plan's design gives them at "
                        "--stage (e.g. a plan whose stage has `fractions:` to vary the treated share across "
                        "PoPs); the plan's inventory for the PoP must be the simulated hosts")
    p.add_argument("--stage", metavar="NAME|N",
                   help="with --plan: the stage, by name or 1-based number (default: the last)")
    p.set_defaults(func=run)


_fail = partial(fail, "sim")


def run(args: argparse.Namespace) -> int:
    from ccab_workshop.sim.scenario import load_scenario

    try:
        start = arm_of = None
        if getattr(args, "start", None):
            from ccab.cli.common import parse_time

            try:
                start = parse_time(args.start, "--start")
            except ValueError as exc:
                raise ScenarioError([str(exc)]) from None
        if getattr(args, "arm_map", None):
            try:
                arm_of = json.loads(args.arm_map.read_text())
            except (OSError, ValueError) as exc:
                raise ScenarioError([f"--arm-map: cannot read {args.arm_map}: {exc}"]) from None
            if not isinstance(arm_of, dict):
                raise ScenarioError([f"--arm-map: {args.arm_map} must hold a JSON object host -> arm"])
        sc = load_scenario(args.scenario).with_overrides(pop=getattr(args, "pop", None))
        if getattr(args, "plan", None):
            if arm_of:
                raise ScenarioError(["--plan: not with --arm-map (both say which host runs which arm)"])
            arm_of = _plan_arms(args.plan, getattr(args, "stage", None), sc)
        elif getattr(args, "stage", None):
            raise ScenarioError(["--stage: only with --plan"])
        sc = sc.with_overrides(seed=args.seed, hours=args.hours, start=start, arm_of=arm_of)
    except ScenarioError as exc:
        return _fail(str(exc))
    if args.connections is not None and args.connections < 1:
        return _fail(f"--connections: must be >= 1, got {args.connections}")
    if args.chunk_size < 100:
        return _fail(f"--chunk-size: must be >= 100, got {args.chunk_size}")
    if args.workers < 1:
        return _fail(f"--workers: must be >= 1, got {args.workers}")
    if args.pre_period_h is not None and args.pre_period_h < 0:
        return _fail(f"--pre-period-h: must be >= 0, got {args.pre_period_h}")
    return simulate(sc, args)


def _plan_arms(path: Path, stage: str | None, sc) -> dict[str, str]:
    """host -> arm the plan's design gives the scenario's PoP at ``stage`` (what the controller
    would assign), checked against the simulated hosts and the scenario's arms."""
    from ccab.rollout.design import stage_arms
    from ccab.rollout.plan import PlanError, load_plan
    from ccab_workshop.sim.scenario import host_names_of

    try:
        plan = load_plan(path)
    except PlanError as exc:
        raise ScenarioError([f"--plan: {p}" for p in exc.problems]) from None
    names = [s.name for s in plan.stages]
    if stage is None:
        index = len(names) - 1
    elif stage in names:
        index = names.index(stage)
    elif stage.isdigit() and 1 <= int(stage) <= len(names):
        index = int(stage) - 1
    else:
        raise ScenarioError([f"--stage: {stage!r} is not a stage of {path} (stages: {', '.join(names)}; or 1..{len(names)})"])
    if sc.pop not in plan.pops:
        raise ScenarioError([f"--plan: PoP {sc.pop!r} is not in the plan's pops ({', '.join(plan.pops)}); give --pop"])
    sim_hosts, plan_hosts = set(host_names_of(sc)), set(plan.hosts_of(sc.pop))
    if sim_hosts != plan_hosts:
        raise ScenarioError([f"--plan: the plan's inventory for {sc.pop} ({len(plan_hosts)} hosts) is not the simulated "
                             f"hosts ({len(sim_hosts)}: {', '.join(sorted(sim_hosts)[:3])}, ...); list them in "
                             f"inventory.hosts.{sc.pop}"])
    arms = {a.name for a in sc.arms}
    missing = sorted({a.name for a in plan.arms} - arms)
    if missing:
        raise ScenarioError([f"--plan: arm(s) {', '.join(missing)} of the plan are not arms of the scenario "
                             f"({', '.join(sorted(arms))})"])
    if plan.control_arm != sc.arms[0].name:
        raise ScenarioError([f"--plan: control_arm {plan.control_arm!r} must be the scenario's first arm "
                             f"({sc.arms[0].name!r})"])
    want = stage_arms(plan, index)
    return {h: want[h] for h in sorted(plan_hosts)}


def _write_networks(sc, world, path: Path) -> None:
    """The synthetic prefix metadata of the run's client prefixes (`ccab networks load` reads it)."""
    import csv

    from ccab_workshop.sim.population import prefix_metadata_rows

    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["network", "asn", "as_name", "country", "access"])
        w.writerows(prefix_metadata_rows(sc, world.prefixes))
    tmp.replace(path)


def simulate(sc, args: argparse.Namespace) -> int:
    from ccab_workshop.sim.generator import HTTP_TOPIC, TCP_TOPIC, iter_chunks, records
    from ccab_workshop.sim.sinks import JsonlSink, KafkaSink, RawWriter, SinkError, TeeSink
    from ccab_workshop.sim.stats import Summary
    from ccab_workshop.sim.truth import build_truth
    from ccab_workshop.sim.world import build_pre_world, build_world

    out: Path = args.out
    if out.exists() and not out.is_dir():
        return _fail(f"--out {out} is a file, not a folder: give a folder (it is created if missing)")
    out.mkdir(parents=True, exist_ok=True)
    for stale in [out / "truth.json", out / f"{TCP_TOPIC}.jsonl", out / f"{HTTP_TOPIC}.jsonl"]:
        stale.unlink(missing_ok=True)
    world = build_world(sc, total_connections=args.connections, chunk_target=args.chunk_size, raw=args.raw)
    sinks = []
    try:
        if args.to_kafka:
            from ccab.base.config import settings
            from ccab.kafka.reach import KafkaUnreachable, check_reachable

            cfg = settings()
            try:
                check_reachable(cfg.bootstrap_servers, local=cfg.embedded_kafka)
            except KafkaUnreachable as exc:
                return _fail(str(exc), 1)
            sinks.append(KafkaSink(cfg.bootstrap_servers))
        if not args.to_kafka or args.jsonl:
            sinks.append(JsonlSink(out))
    except Exception as exc:  # noqa: BLE001 - a broken Kafka config is a user error
        return _fail(f"cannot open sink: {exc}", 1)
    sink = sinks[0] if len(sinks) == 1 else TeeSink(sinks)
    raw = RawWriter(out, world.hosts.names) if args.raw else None
    summary = Summary(len(sc.arms), len(world.segments))
    total = world.plan.total
    t0 = time.perf_counter()
    n_records = 0
    progress = _progress(args.no_progress)
    task = progress.add_task(f"sim {sc.name}", total=total, records=0) if progress else None
    # the scenario's pre-period is never longer than the run (a 3-hour test run gets 3 hours of it)
    pre_h = min(sc.pre_period_h, sc.duration_h) if args.pre_period_h is None else args.pre_period_h
    pre_connections = 0
    try:
        if progress:
            progress.start()
        if pre_h > 0:  # the hosts before the rollout: same host effects, no arm (ccab_workshop.sim.world.build_pre_world)
            pre_world = build_pre_world(sc, pre_h, chunk_target=args.chunk_size, total_connections=(
                max(1, round(args.connections * pre_h / sc.duration_h)) if args.connections else None))
            for chunk in iter_chunks(pre_world, args.workers):
                n_records += sink.write(records(pre_world, chunk))
                pre_connections += chunk.n_connections
        for chunk in iter_chunks(world, args.workers):
            n_records += sink.write(records(world, chunk))
            if raw is not None:
                raw.write_ss(chunk.ss)
                raw.write_nginx(chunk.nginx)
            summary.merge(chunk.summary)
            if progress:
                progress.update(task, advance=chunk.n_connections, records=n_records)
    finally:
        if progress:
            progress.stop()
    try:
        sink.close()
    except SinkError as exc:
        return _fail(str(exc), 1)
    elapsed = time.perf_counter() - t0
    truth = build_truth(world, summary, seed=sc.seed, total_connections=total)
    truth["run"] = {"elapsed_s": round(elapsed, 3), "connections_per_s": round(total / elapsed, 1),
                    "records_per_s": round(n_records / elapsed, 1), "workers": args.workers,
                    "sinks": ["kafka"] * bool(args.to_kafka) + ["jsonl"] * bool(not args.to_kafka or args.jsonl),
                    "raw": bool(args.raw)}
    truth["pre_period"] = {"hours": pre_h, "connections": pre_connections}
    tmp = out / "truth.json.tmp"
    tmp.write_text(json.dumps(truth, indent=1) + "\n")
    tmp.replace(out / "truth.json")
    _write_networks(sc, world, out / "networks.csv")
    if args.plot:
        from ccab_workshop.sim.plot import plot_pdfs

        labels = [f"{a.name} ({a.cc})" for a in sc.arms]
        plot_pdfs(summary, [a.name for a in sc.arms], labels, f"ccab sim {sc.name} (seed {sc.seed})", args.plot)
    _report(truth, total, n_records, elapsed, args)
    bad = [e for e in truth["expectations"] if e["ok"] is False]
    if args.check_expect and bad:
        return _fail(f"{len(bad)} expectation(s) missed; see {out / 'truth.json'}", 3)
    return 0


def _progress(disabled: bool):
    """A bar on a terminal; in a log file or a pipe, plain lines (see :class:`_PlainProgress`)."""
    if disabled:
        return None
    if not sys.stderr.isatty():
        return _PlainProgress()
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("" if speed is None else f"{speed:,.0f} conn/s")

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("connections"), RateColumn(), TextColumn("{task.fields[records]:,} records"),
                    TimeElapsedColumn(), TimeRemainingColumn(), transient=False)


class _PlainProgress:
    """The rich bar's interface, printing a timestamped line at every 10 % instead."""

    def __init__(self):
        from ccab.base.progress import Progress

        self._p = Progress("sim", unit="connections")

    def add_task(self, description, total, **_fields):
        self._p.desc, self._p.total = description, total
        return 0

    def start(self):
        pass

    def stop(self):
        pass

    def update(self, _task, advance=0, records=0, **_fields):
        self._p.advance(advance, note=f"{records:,} records")


def _report(truth: dict, total: int, n_records: int, elapsed: float, args) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    if not console.is_terminal:
        console.width = 160
    t = Table(title=f"{truth['scenario']['name']}: {total:,} connections, {n_records:,} records in "
                    f"{elapsed:.1f}s ({total / elapsed:,.0f} conn/s, {n_records / elapsed:,.0f} records/s)")
    for col in ("arm", "cc", "bulk conns", "retrans% p50", "high-loss share", "inflight p50",
                "rtt ms p50", "goodput Mbps p10/p50/p90", "rwnd-limited share"):
        t.add_column(col, justify="right" if col not in ("arm", "cc") else "left")

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    for a in truth["arms"]:
        r = a["realised"]["all"]
        t.add_row(a["name"], a["cc"], f"{r['bulk_connections']:,}", f(r["retrans_pct_p50"], ".2f"),
                  f(r["high_loss_share"], ".4f"), f(r["inflight_bytes_p50"], ",.0f"), f(r["rtt_ms_p50"], ".1f"),
                  "/".join(f(r[k], ".1f") for k in ("goodput_mbps_p10", "goodput_mbps_p50", "goodput_mbps_p90")),
                  f(r["rwnd_limited_share"], ".3f"))
    console.print(t)
    for e in truth["expectations"]:
        mark = "[green]ok[/]" if e["ok"] else ("[yellow]n/a[/]" if e["ok"] is None else "[red]MISSED[/]")
        what = e["stat"] + (f" {e['arm']}/{e['vs']}" if e["vs"] else f" {e['arm']}")
        seg = {k: v for k, v in e["where"].items() if v}
        console.print(f"  {mark} {what} {seg or ''} = {f(e['realised'], '.3g')} in {e['range']}  {e['note']}")
    console.print(f"  outputs in {args.out}")
