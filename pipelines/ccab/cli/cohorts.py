"""``ccab cohorts run``: the hourly cohort job alone, on the warehouse or on one shard of it
(``CCAB_CLICKHOUSE_SHARDS``): each shard rolls up its own hosts from its local tables."""

from __future__ import annotations

import argparse
from datetime import timedelta

from ccab.base.errors import UserError

EPILOG = """\
With a shard layout (CCAB_CLICKHOUSE_SHARDS) every row of a host is on one shard, so each shard
rolls up its own hosts: the union of the shards' cohort_hourly / cohort_heatmap_hourly is the
single-node rollup. The prefix RTT classes pool every host of a PoP, so each shard reads the
fleet's tcp_samples for them: merge() over the shard databases in the one-engine layout, the
Distributed table given by --fleet-samples on a cluster of servers.

examples:
  ccab cohorts run --from 2025-11-20T00:00Z --to 2025-11-20T06:00Z            # every shard in turn
  ccab cohorts run --from 2025-11-20T00:00Z --to 2025-11-20T06:00Z --shard 1
  CCAB_CLICKHOUSE_SHARDS=http://ch1:8123/ccab_local,http://ch2:8123/ccab_local \\
    ccab cohorts run --from 2025-11-20 --to 2025-11-21 --shard 0 --fleet-samples ccab.tcp_samples
"""


def register(sub) -> None:
    p = sub.add_parser("cohorts", help="the hourly cohort job alone (per shard on a sharded warehouse)")
    csub = p.add_subparsers(dest="cohorts_command", metavar="ACTION", required=True)
    r = csub.add_parser("run", help="recompute the cohort rollups of [--from, --to) (and stale look-back hours)",
                        description="Recompute every UTC hour of [--from, --to) into the cohort rollups, "
                                    "on the one warehouse or on each shard (or one: --shard).",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--from", dest="t_from", required=True, metavar="ISO", help="first UTC hour (inclusive)")
    r.add_argument("--to", dest="t_to", required=True, metavar="ISO", help="end UTC hour (exclusive)")
    r.add_argument("--shard", type=int, metavar="K", help="run on shard K only (default: every shard in turn)")
    r.add_argument("--fleet-samples", metavar="TABLE",
                   help="with one server per shard: the Distributed tcp_samples table (db.table) the prefix "
                        "RTT classes read (default in the one-engine layout: merge() over the shard databases)")
    r.add_argument("--bulk-min-bytes", type=int, default=1 << 20, metavar="N",
                   help="bulk filter for goodput and the 'bulk' segment, bytes (default: %(default)s)")
    r.add_argument("--lookback-hours", type=int, default=24, metavar="H",
                   help="also recompute stale hours this far before --from (default: %(default)s; 0 = off)")
    r.set_defaults(func=_cmd_run)


def _cmd_run(args) -> int:
    from ccab.base.config import settings
    from ccab.base.schema import migrate
    from ccab.base.warehouse import close_all, connect_shards
    from ccab.cli.common import parse_hour
    from ccab.cohorts.job import JobConfig, fleet_samples, run_window

    try:
        start, end = parse_hour(args.t_from, "--from"), parse_hour(args.t_to, "--to")
    except ValueError as exc:
        raise UserError(str(exc), 2) from None
    if end <= start:
        raise UserError(f"--to ({args.t_to}) must be after --from ({args.t_from})", 2)
    cfg = settings()
    n = cfg.shard_count
    if args.shard is not None and not 0 <= args.shard < n:
        raise UserError(f"--shard {args.shard}: the warehouse has {n} shard(s) (CCAB_CLICKHOUSE_SHARDS), "
                        f"so K is 0..{n - 1}", 2)
    if isinstance(cfg.clickhouse_shards, tuple) and n > 1 and not args.fleet_samples:
        raise UserError("with one server per shard, name the Distributed tcp_samples table the prefix RTT "
                        "classes read: --fleet-samples ccab.tcp_samples", 2)
    shards = connect_shards(cfg)
    try:
        samples = args.fleet_samples or "tcp_samples"
        if isinstance(cfg.clickhouse_shards, int) and not args.fleet_samples:  # every shard on this engine
            samples = fleet_samples("(" + "|".join(wh.database for wh in shards) + ")")
        try:
            job = JobConfig(bulk_min_bytes=args.bulk_min_bytes, lookback=timedelta(hours=args.lookback_hours),
                            prefix_samples=samples)
        except ValueError as exc:
            raise UserError(f"ccab cohorts run: {exc}", 2) from None
        for k, wh in enumerate(shards):
            migrate(wh, log=lambda _m: None)  # every shard: the fleet read needs every shard's tables
        for k, wh in enumerate(shards):
            if args.shard is not None and k != args.shard:
                continue
            report = run_window(wh, start, end, job)
            where = f"shard {k} ({wh.description})" if cfg.clickhouse_shards is not None else wh.description
            print(f"{where}: {report.summary()}")
    finally:
        close_all(shards)
    return 0
