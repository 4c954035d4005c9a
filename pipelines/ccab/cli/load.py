"""``ccab loader`` (the Kafka -> ClickHouse service) and ``ccab load`` (JSONL replay files), both
through :mod:`ccab.ingest.loader`."""

from __future__ import annotations

import logging
import math
import signal
import sys
from pathlib import Path

from ccab.base.config import settings as current_settings
from ccab.base.errors import UserError
from ccab.base.progress import Progress
from ccab.base.schema import migrate
from ccab.base.warehouse import close_all, connect, connect_shards
from ccab.ingest.loader import (DEFAULT_GROUP, DEFAULT_MAX_RECORD_BYTES, Loader, LoaderMetrics, NoPartitions, load_files,
                                parse_topics)
from ccab.kafka.reach import KafkaUnreachable, check_reachable

#: the loader's own /metrics port: collector 9464, agent 9465, controller 9466, lab link 9467
#: (deploy/prometheus/README.md), so all of them can run on one host
DEFAULT_METRICS_PORT = 9468

log = logging.getLogger("ccab.loader")


def _row_counts(wh) -> dict[str, int]:
    from ccab.base.contracts import SCHEMAS

    tables = sorted({s.table for s in SCHEMAS.values()})
    return {t: int(wh.query(f"SELECT count() FROM {t}").rows[0][0]) for t in tables}


def _sum_counts(warehouses) -> dict[str, int]:
    out: dict[str, int] = {}
    for wh in warehouses:
        for table, n in _row_counts(wh).items():
            out[table] = out.get(table, 0) + n
    return out


def _print_report(inserted: dict[str, int], dead: dict[str, int], landed: dict[str, int] | None = None) -> None:
    """Per table: the rows that really landed (the table's growth) and, when the dedup tokens
    dropped some (a file loaded before), how many were already there."""
    for table, n in sorted(inserted.items()):
        if landed is None or table not in landed:
            print(f"  {table:20s} {n:>10,} rows inserted")
            continue
        new = landed[table]
        dup = max(0, n - new)
        print(f"  {table:20s} {new:>10,} rows inserted" + (f" ({dup:,} already loaded: skipped as duplicates)" if dup else ""))
    if dead:
        print(f"  {'dead_letters':20s} {sum(dead.values()):>10,} records rejected:")
        for why, n in sorted(dead.items(), key=lambda kv: -kv[1]):
            print(f"      {n:>8,}  {why}")


def _cmd_load(args) -> int:
    paths = [Path(p) for p in args.files]
    folders = [str(p) for p in paths if p.is_dir()]
    if folders:
        raise UserError(f"{', '.join(folders)} is a folder: give the JSONL files in it, e.g. ccab load {folders[0]}/*.jsonl")
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"ccab load: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    shards = connect_shards() if current_settings().clickhouse_shards is not None else None
    wh = shards[0] if shards else connect()
    try:
        for target in shards or [wh]:
            migrate(target, log=lambda _m: None)  # idempotent: a fresh warehouse just works
        before = _sum_counts(shards or [wh])
        report = load_files(wh, paths, max_record_bytes=args.max_record_bytes, progress=True, shards=shards)
        after = _sum_counts(shards or [wh])
    finally:
        close_all(shards or [wh])
    landed = {t: after[t] - before.get(t, 0) for t in after}
    print(f"read {report.records:,} records from {report.files} file(s) into {current_settings().warehouse_path if not current_settings().clickhouse_url else 'ClickHouse'}:")
    _print_report(report.inserted or {}, report.dead or {}, landed)
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
    try:
        check_reachable(cfg.bootstrap_servers, args.kafka_timeout, local=cfg.embedded_kafka)
    except KafkaUnreachable as exc:
        raise UserError(str(exc), 1) from None
    metrics = LoaderMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port)
        log.info("metrics on http://127.0.0.1:%d/metrics", args.metrics_port)
    # a service: a warehouse service that is down (restarting) is waited for, said once a minute
    shards = connect_shards(cfg) if cfg.clickhouse_shards is not None else None
    wh = shards[0] if shards else connect(cfg, wait_s=math.inf, say=log.warning)
    metrics.warehouse_ready.set(1)
    for target in shards or [wh]:
        migrate(target, log=log.info)  # idempotent: a fresh warehouse (or shard) just works
    loader = Loader(wh, cfg.bootstrap_servers, topics, group=args.group, batch_rows=args.batch_rows,
                    batch_wait_s=args.batch_wait_s, max_record_bytes=args.max_record_bytes, metrics=metrics,
                    instance_id=args.instance_id, shards=shards)
    signal.signal(signal.SIGTERM, loader.stop)
    signal.signal(signal.SIGINT, loader.stop)
    log.info("loading %s from %s into %s", ",".join(topics), cfg.bootstrap_servers,
             f"{len(shards)} shards: " + ", ".join(s.description for s in shards) if shards else wh.description)
    try:
        with Progress("loader", unit="records consumed") as progress:
            totals = loader.run(max_idle_s=args.exit_when_idle, progress=progress)
    except NoPartitions as exc:
        raise UserError(str(exc), 1) from None
    finally:
        close_all(shards or [wh])
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
    p.add_argument("--kafka-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="give up with a one-line error when Kafka does not answer within this many seconds "
                        "at start (default: %(default)s)")
    p.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT,
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
