"""``ccab plot heatmap|pdf|cdf``: render the analysts' views to PNG (thin I/O shell)."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from ccab.base.errors import fail
from ccab.base.vocabulary import BY_NAME, PAIRS

EPILOG = """\
examples:
  ccab plot heatmap --rollout tyo1-bbr-canary --segment bulk --out rtt-retrans.png
  ccab plot heatmap --pair rtt_us:inflight_bytes --from 2025-11-20T00:00Z --to 2025-11-21T00:00Z --out inflight.png
  ccab plot pdf --metric retrans_pct --out retrans-pdf.png
  ccab plot pdf --metric retrans_pct --arm control --arm bbr2 --out retrans-pdf.png
  ccab plot cdf --metric goodput_bps --segment rtt:50-100ms --out goodput-cdf.png
  ccab plot heatmap --segment access:mobile --out mobile-heatmap.png   # access_type:mobile works too
  ccab plot speed --rollout tyo1-bbr-canary --from 2025-11-20T00:00Z --to 2025-11-21T00:00Z --out speed.png

The data are the cohort rollups (run `ccab analyze` or the ccab_cohorts_hourly DAG first);
--from/--to default to every hour the rollups hold. `speed` reads the nginx requests: client
prefixes banded by their median goodput in the --pre-hours before --from (never the window's own
outcomes), goodput of the window per band x arm (view cohort_goodput_by_client_speed).
"""


def register(sub) -> None:
    p = sub.add_parser("plot", help="render cohort heatmaps, PDFs and CDFs to PNG",
                       description="Render the analysts' views (sql/views/) of the cohort rollups to PNG, "
                                   "one panel or line per arm, log axes where values span decades.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = p.add_subparsers(dest="plot_kind", metavar="KIND", required=True)
    for kind, helptext in (("heatmap", "connections per (x, y) cell, e.g. RTT x retransmit %%"),
                           ("pdf", "probability density of one metric per arm (log x)"),
                           ("cdf", "cumulative distribution of one metric per arm (log x)"),
                           ("speed", "goodput p10/p50/p90 per client-speed band x arm (bands from the pre-period)")):
        k = kinds.add_parser(kind, help=helptext)
        k.add_argument("--from", dest="t_from", metavar="ISO", help="window start (UTC hour)")
        k.add_argument("--to", dest="t_to", metavar="ISO", help="window end, exclusive (UTC hour)")
        k.add_argument("--pop", default="", help="one PoP (default: all)")
        k.add_argument("--rollout", default="", metavar="ID", help="one rollout (default: all)")
        k.add_argument("--arm", action="append", default=[], metavar="ARM",
                       help="only this arm (repeat for several; default: every arm)")
        k.add_argument("--kernel", default="", metavar="VERSION",
                       help="only the arms of hosts running this kernel, e.g. 6.1.0 (default: any)")
        k.add_argument("--segment", default="all",
                       help="segment: all, bulk (connections >= 1 MiB), rtt:0-20ms, size:4-16MiB, the client's "
                            "network access:mobile|fixed|satellite|hosting|unknown, country:JP, asn:<n>|other "
                            "(ccab networks load) ... (default: all)")
        k.add_argument("--out", type=Path, required=True, metavar="PNG", help="output file")
        if kind == "speed":
            k.add_argument("--pre-hours", type=int, default=24, metavar="H",
                           help="the pre-period that bands the client prefixes: the H hours before --from "
                                "(default: %(default)s)")
        elif kind == "heatmap":
            k.add_argument("--pair", default=PAIRS[0], choices=PAIRS, help="x:y metrics (default: %(default)s)")
            k.add_argument("--bins-per-octave", type=int, default=4, choices=(1, 2, 4, 8),
                           help="cells per factor of 2 (default: %(default)s)")
        if kind in ("pdf", "cdf"):
            k.add_argument("--metric", required=True, choices=sorted(BY_NAME), metavar="METRIC",
                           help="one of: " + ", ".join(sorted(BY_NAME)))
            if kind == "pdf":
                k.add_argument("--bins-per-octave", type=int, default=8, choices=(1, 2, 4, 8, 16, 32, 64, 128),
                               help="bins per factor of 2 (default: %(default)s)")
        k.set_defaults(func=run)


_fail = partial(fail, "plot")


def run(args: argparse.Namespace) -> int:
    from ccab.base.warehouse import WarehouseError
    from ccab.cli.common import parse_window
    from ccab.cohorts.job import rollup_span
    from ccab.pipeline import open_warehouse as warehouse
    from ccab.plots import data, render

    try:
        t_from, t_to = parse_window(args.t_from, args.t_to)
    except ValueError as exc:
        return _fail(str(exc))
    if args.segment.startswith("access_type:"):
        args.segment = "access:" + args.segment.removeprefix("access_type:")
    if args.plot_kind == "speed" and args.pre_hours < 1:
        return _fail(f"--pre-hours: must be >= 1, got {args.pre_hours}")
    try:
        with warehouse() as wh:
            if t_from is None or t_to is None:
                span = rollup_span(wh)
                if span is None:
                    return _fail("the cohort rollups are empty: run `ccab analyze --from ISO --to ISO` first", 1)
                t_from, t_to = t_from or span[0], t_to or span[1]
                if t_from >= t_to:
                    return _fail(f"--from must be before --to (the window is {t_from:%Y-%m-%dT%H:%MZ} .. "
                                 f"{t_to:%Y-%m-%dT%H:%MZ}: the other end is the rollups' own)")
            sel = data.Selection(t_from, t_to, args.pop, args.rollout, args.segment)
            arms = _arms(wh, args) if (args.arm or args.kernel) else None
            if args.plot_kind == "heatmap":
                rows = _only(data.heatmap_rows(wh, sel, args.pair, args.bins_per_octave), arms)
                if rows:
                    fig = render.heatmap_figure(rows, args.pair, f"{args.pair} per connection\n{sel.label()}",
                                                args.bins_per_octave)
            elif args.plot_kind == "speed":
                from datetime import timedelta

                pre_to = t_from
                rows = _only(data.speed_rows(wh, sel, pre_to - timedelta(hours=args.pre_hours), pre_to), arms)
                if rows:
                    fig = render.speed_figure(rows, f"goodput by client speed\n{sel.label()}; bands from the "
                                                    f"{args.pre_hours} h before")
            elif args.plot_kind == "pdf":
                rows = _only(data.pdf_rows(wh, sel, args.metric, args.bins_per_octave), arms)
                if rows:
                    fig = render.pdf_figure(rows, args.metric, f"PDF of {args.metric}\n{sel.label()}",
                                            args.bins_per_octave)
            else:
                rows = _only(data.cdf_rows(wh, sel, args.metric), arms)
                if rows:
                    fig = render.cdf_figure(rows, args.metric, f"CDF of {args.metric}\n{sel.label()}")
    except WarehouseError as exc:
        return _fail(str(exc), 1)
    if not rows:
        return _fail(f"nothing matched the selection ({sel.label()}"
                     + (f", arms {', '.join(sorted(arms))}" if arms else "") + "): no PNG written; check "
                     "--from/--to, --pop, --rollout, --segment, --arm and --kernel (the data: ccab query "
                     "\"SELECT pop, rollout_id, arm, kernel, min(hour), max(hour) FROM cohort_hourly GROUP BY ALL\")", 1)
    path = render.save_png(fig, args.out)
    print(f"wrote {path} ({len(rows)} rows)")
    return 0


def _arms(wh, args) -> set[str]:
    """The arms --arm and --kernel select (an unknown one selects nothing)."""
    arms = set(args.arm) if args.arm else {r[0] for r in wh.query("SELECT DISTINCT arm FROM cohort_hourly").rows}
    if args.kernel:
        arms &= {r[0] for r in wh.query("SELECT DISTINCT arm FROM cohort_hourly WHERE kernel = {k:String}",
                                        params={"k": args.kernel}).rows}
    return arms


def _only(rows: list[dict], arms: set[str] | None) -> list[dict]:
    return rows if arms is None else [r for r in rows if r.get("arm") in arms]
