"""``ccab report --rollout ID``: write the canary report folder (thin I/O shell)."""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

from ccab.base.errors import fail

EPILOG = """\
examples:
  ccab report --rollout tyo1-bbr-canary
  ccab report --rollout tyo1-bbr-canary --pop tyo1 --out /tmp/canary-report
  ccab report --rollout tyo1-bbr-canary --from 2025-11-20T00:00Z --to 2025-11-20T06:00Z --json

The report shows the judge's newest window of the rollout (inside --from/--to when given): run
`ccab analyze` first. Default folder: $CCAB_DATA_DIR/reports/<rollout>/ (the alerts' report_url).
"""


def register(sub) -> None:
    p = sub.add_parser("report", help="write a rollout's canary report (index.html + PNGs)",
                       description="Write a self-contained canary report of one rollout: decision per treatment "
                                   "arm and its evidence, data-quality gates, effects with intervals, per-arm "
                                   "PDFs/CDFs, RTT heatmaps and a per-host breakdown.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rollout", required=True, metavar="ID", help="rollout id")
    p.add_argument("--pop", default="", help="one PoP (default: every PoP of the rollout)")
    p.add_argument("--from", dest="t_from", metavar="ISO", help="window start (UTC hour)")
    p.add_argument("--to", dest="t_to", metavar="ISO", help="window end, exclusive (UTC hour)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="output folder (default: $CCAB_DATA_DIR/reports/<rollout>/)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


_fail = partial(fail, "report")


def run(args: argparse.Namespace) -> int:
    from ccab.base.warehouse import WarehouseError
    from ccab.cli.common import parse_window
    from ccab.pipeline import open_warehouse as warehouse
    from ccab.report.build import build_report

    try:
        t_from, t_to = parse_window(args.t_from, args.t_to)
    except ValueError as exc:
        return _fail(str(exc))
    if t_from and t_to and t_from >= t_to:
        return _fail("--from must be before --to")
    if args.out is None:
        from ccab.base.contracts import rollout_id_problem

        problem = rollout_id_problem(args.rollout)
        if problem:
            return _fail(f"--rollout {args.rollout!r:.80} cannot name a report folder: {problem}; pass --out DIR")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        return _fail(f"--out {args.out} is a file: give a folder (it is created if missing)")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)  # a path that cannot be a folder: one line from ccab's error path
    try:
        with warehouse() as wh:
            res = build_report(wh, args.rollout, args.out, args.pop, t_from, t_to)
    except WarehouseError as exc:
        return _fail(str(exc), 1)
    if res is None:
        return _fail(f"no assignments, rollups or judge results for rollout {args.rollout!r}"
                     + (f" in PoP {args.pop!r}" if args.pop else "") + ": check the id (`ccab rollout list`), "
                     "or load its data and run `ccab analyze` first", 1)
    if args.json:
        print(json.dumps(res.as_dict(), indent=1))
    elif res.pending:
        print(f"{args.rollout}: not rolled up yet: {res.pending}")
        print(res.index)
    else:
        for key, decision in res.as_dict()["decisions"].items():
            print(f"{key}: {decision}")
        print(res.index)
    return 0
