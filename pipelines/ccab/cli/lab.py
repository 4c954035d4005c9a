"""``ccab lab run EXPERIMENT.yaml`` and ``ccab lab report RUN_DIR``."""

from __future__ import annotations

import sys
from pathlib import Path


def _cmd_run(args) -> int:
    from ccab.kafka.topics import KafkaLocalError
    from ccab_workshop.lab import runner, spec
    from ccab_workshop.lab.netns import LabError

    try:
        exp = spec.load(args.experiment, quick=args.quick, scale=args.scale, rtt_ms=args.rtt_ms, path_kind=args.path)
    except (OSError, spec.SpecError) as exc:
        print(f"ccab lab run: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        for c in exp.cases:
            flows = ", ".join(f"{f.id}:{f.cc}/{f.kind}@{f.start_s:g}+{f.duration_s:g}s" for f in c.flows)
            print(f"{c.name}: {c.bottleneck} — {flows}")
        return 0
    try:
        from ccab.base.config import settings

        out = Path(args.out) if args.out else settings().data_dir / "lab"
        run_dir = runner.run(exp, out, repeat=args.repeat, seed=args.seed,
                             keep_topics=args.keep_topics)
    except (LabError, KafkaLocalError) as exc:
        print(f"ccab lab run: {exc}", file=sys.stderr)
        return 1
    print(f"lab: results in {run_dir}")
    if not args.no_report:
        from ccab_workshop.lab import report

        index = report.build(run_dir)
        print(f"lab: report {index}")
    return 0


def _cmd_report(args) -> int:
    from ccab_workshop.lab import report

    run_dir = Path(args.run_dir)
    if not (run_dir / "results.json").exists():
        print(f"ccab lab report: {run_dir}/results.json not found (a `ccab lab run` directory?)", file=sys.stderr)
        return 2
    print(report.build(run_dir, out=Path(args.out) if args.out else None))
    return 0


def _cmd_analyze(args) -> int:
    from ccab_workshop.lab import runner

    print(runner.reanalyze(Path(args.run_dir)))
    return 0


def register(sub) -> None:
    p = sub.add_parser("lab", help="congestion-control experiments in network namespaces (root)",
                       description="Real nginx, real kernels and real sockets behind a shaped bottleneck; "
                                   "records through Kafka into the warehouse (PoP lab). See lab/README.md.")
    lsub = p.add_subparsers(dest="lab_command", metavar="SUBCOMMAND")
    r = lsub.add_parser("run", help="run an experiment YAML (root)")
    r.add_argument("experiment", help="lab/experiments/*.yaml")
    r.add_argument("--repeat", type=int, default=1, help="run every case N times (summaries get 95%% t-intervals)")
    r.add_argument("--seed", type=int, help="seed (default: the YAML's seed)")
    r.add_argument("--out", help="parent of the run directory (default: $CCAB_DATA_DIR/lab)")
    r.add_argument("--quick", action="store_true", help="the YAML's quick: variant (what make lab runs)")
    r.add_argument("--scale", type=float, help="multiply every start and duration by this")
    r.add_argument("--rtt-ms", type=float, help="base RTT of every case in ms (overrides the YAML's rtt_ms; "
                                                 "0 = no delay, tbf path)")
    r.add_argument("--path", choices=["link", "tbf"], help="bottleneck of every case: link (ccab-link: delay, "
                                                           "rate/trace, loss) or tbf (tbf + nftables, no delay)")
    r.add_argument("--dry-run", action="store_true", help="print the cases and exit")
    r.add_argument("--no-report", action="store_true", help="do not build the HTML report")
    r.add_argument("--keep-topics", action="store_true", help="keep the run's Kafka topics")
    r.set_defaults(func=_cmd_run)
    q = lsub.add_parser("report", help="index.html + PNGs of a run directory")
    q.add_argument("run_dir", help="a run directory written by ccab lab run")
    q.add_argument("--out", help="output directory (default: RUN_DIR/report)")
    q.set_defaults(func=_cmd_report)
    z = lsub.add_parser("analyze", help="re-run the cohort job and the analysis SQL of a run directory (results.json)")
    z.add_argument("run_dir", help="a run directory written by ccab lab run")
    z.set_defaults(func=_cmd_analyze)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
