"""``ccab loader`` (the Kafka -> ClickHouse service) and ``ccab load`` (JSONL replay files), both
through :mod:`ccab.ingest.loader`."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from ccab.base.config import settings as current_settings
from ccab.base.schema import migrate
from ccab.base.warehouse import connect
from ccab.ingest.loader import DEFAULT_GROUP, DEFAULT_MAX_RECORD_BYTES, Loader, LoaderMetrics, load_files, parse_topics

log = logging.getLogger("ccab.loader")


def _print_report(inserted: dict[str, int], dead: dict[str, int]) -> None:
    for table, n in sorted(inserted.items()):
        print(f"  {table:20s} {n:>10,} rows inserted")
    if dead:
        print(f"  {'dead_letters':20s} {sum(dead.values()):>10,} records rejected:")
        for why, n in sorted(dead.items(), key=lambda kv: -kv[1]):
            print(f"      {n:>8,}  {why}")


def _cmd_load(args) -> int:
    paths = [Path(p) for p in args.files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"ccab load: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    wh = connect()
    migrate(wh, log=lambda _m: None)  # idempotent: a fresh warehouse just works
    try:
        report = load_files(wh, paths, max_record_bytes=args.max_record_bytes, progress=sys.stderr.isatty())
    finally:
        wh.close()
    print(f"loaded {report.records:,} records from {report.files} file(s) into {current_settings().warehouse_path if not current_settings().clickhouse_url else 'ClickHouse'}:")
    _print_report(report.inserted or {}, report.dead or {})
    if report.dead_total:
        print("  see: ccab query \"SELECT _topic, _offset, reason FROM dead_letters FINAL ORDER BY _offset\"")
    return 1 if args.strict and report.dead_total else 0


def _cmd_loader(args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = current_settings()
    try:
        topics = parse_topics(args.topics)
    except ValueError as exc:
        print(f"ccab loader: {exc}", file=sys.stderr)
        return 2
    wh = connect(cfg)
    migrate(wh, log=log.info)  # idempotent: a fresh warehouse just works
    metrics = LoaderMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
        log.info("metrics on http://127.0.0.1:%d/metrics", args.metrics_port)
    loader = Loader(wh, cfg.bootstrap_servers, topics, group=args.group, batch_rows=args.batch_rows,
                    batch_wait_s=args.batch_wait_s, max_record_bytes=args.max_record_bytes, metrics=metrics,
                    instance_id=args.instance_id)
    signal.signal(signal.SIGTERM, loader.stop)
    signal.signal(signal.SIGINT, loader.stop)
    log.info("loading %s from %s into %s", ",".join(topics), cfg.bootstrap_servers, wh.description)
    try:
        totals = loader.run(max_idle_s=args.exit_when_idle)
    finally:
        wh.close()
    print(f"loader stopped: {totals.inserted:,} rows inserted, {totals.dead_total:,} dead letters")
    return 0


def register(sub) -> None:
    p = sub.add_parser("loader", help="consume the contract topics from Kafka into ClickHouse",
                       description="Consume the contract topics in a consumer group, validate every record, "
                                   "insert in batches, dead-letter what fails. Exactly-once across crashes.")
    p.add_argument("--topics", help="comma-separated topics, each optionally TOPIC=SCHEMA "
                                    "(default: all contract topics with their schemas)")
    p.add_argument("--instance-id", help="static group membership id: a restart with the same id resumes "
                                         "at once, without a rebalance (default: dynamic membership)")
    p.add_argument("--group", default=DEFAULT_GROUP, help="consumer group id (default: %(default)s)")
    p.add_argument("--batch-rows", type=int, default=50_000, help="max records per batch (default: %(default)s)")
    p.add_argument("--batch-wait-s", type=float, default=1.0,
                   help="max seconds a batch waits to fill after its first record (default: %(default)s)")
    p.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES,
                   help="larger records are dead-lettered as oversize (default: %(default)s)")
    p.add_argument("--metrics-port", type=int, default=9464,
                   help="Prometheus /metrics on 127.0.0.1:PORT; 0 disables (default: %(default)s)")
    p.add_argument("--exit-when-idle", type=float, metavar="SECONDS",
                   help="stop after this many seconds without records (batch jobs, demos, tests)")
    p.set_defaults(func=_cmd_loader)

    q = sub.add_parser("load", help="load JSONL replay files through the loader's validation and insert path")
    q.add_argument("files", nargs="+", help="JSONL files, one contract record per line (schema from each record)")
    q.add_argument("--strict", action="store_true", help="exit 1 if any record was dead-lettered")
    q.add_argument("--max-record-bytes", type=int, default=DEFAULT_MAX_RECORD_BYTES,
                   help="larger records are dead-lettered as oversize (default: %(default)s)")
    q.set_defaults(func=_cmd_load)
