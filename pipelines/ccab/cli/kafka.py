"""``ccab kafka install|up|down|status``: the local broker (:mod:`ccab_workshop.kafka.broker`) or the
cluster in ``CCAB_KAFKA_BROKERS``."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from ccab.base.config import settings
from ccab_workshop.kafka import cluster
from ccab_workshop.kafka.broker import broker_pid, down, install, local_bootstrap, paths, up
from ccab.kafka.topics import TOPICS, KafkaLocalError, ensure_topics, topic_partitions


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ccab kafka install|up|down|status``."""
    kafka = subparsers.add_parser(
        "kafka",
        help="run or check the local Kafka broker",
        description=(
            "Local single-node Kafka (KRaft) from Maven Central jars, or the cluster in "
            "CCAB_KAFKA_BROKERS. State lives in $CCAB_DATA_DIR/kafka, jars in $CCAB_CACHE_DIR."
        ),
    )
    kafka.set_defaults(func=lambda _args: (kafka.print_help(), 2)[1])
    actions = kafka.add_subparsers(dest="kafka_action", metavar="ACTION")

    install_p = actions.add_parser("install", help="fetch the broker jars with Maven (once)")
    install_p.set_defaults(func=_cli_install)

    up_p = actions.add_parser("up", help="start (or reuse) the broker and create the topics")
    up_p.add_argument("--port", type=int, default=None,
                      help="client port (default: CCAB_KAFKA_PORT or 19092; controller uses port+1)")
    up_p.add_argument("--timeout", type=float, default=60.0, dest="timeout_s", metavar="SECONDS",
                      help="seconds to wait for the broker to answer (default 60)")
    up_p.add_argument("--brokers", type=int, default=1, metavar="N",
                      help="number of brokers: 1 (default) runs the single broker; N > 1 runs an N-node KRaft "
                           "cluster (node i on port+2(i-1), state in $CCAB_DATA_DIR/kafka-cluster); with N >= 3 "
                           "topics get replication 3 and min.insync.replicas=2")
    up_p.set_defaults(func=_cli_up)

    down_p = actions.add_parser("down", help="stop the broker (or cluster) this data dir started")
    down_p.set_defaults(func=_cli_down)

    status_p = actions.add_parser("status", help="show the broker and its topics; exit 1 if unreachable")
    status_p.set_defaults(func=_cli_status)


def _cli(action: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn KafkaLocalError into a message on stderr and exit code 1."""
    def run(args: argparse.Namespace) -> int:
        try:
            return action(args)
        except KafkaLocalError as exc:
            print(f"ccab kafka: error: {exc}", file=sys.stderr)
            return 1
    run.__doc__ = action.__doc__
    return run


@_cli
def _cli_install(args: argparse.Namespace) -> int:
    install()
    return 0


@_cli
def _cli_up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise KafkaLocalError(f"--brokers must be at least 1, got {args.brokers}")
    existing = cluster.configured() if settings().embedded_kafka else None
    if args.brokers > 1 or existing is not None:
        if not settings().embedded_kafka:
            raise KafkaLocalError("CCAB_KAFKA_BROKERS is set: --brokers starts a local cluster; unset it first")
        # a plain `up` in a data dir that has a cluster starts that cluster again
        brokers = args.brokers if args.brokers > 1 or existing is None else len(existing.nodes)
        bootstrap = cluster.up(brokers, port=args.port, timeout_s=max(args.timeout_s, 120.0))
        created = ensure_topics(bootstrap)
        print(f"kafka: created topics: {', '.join(created)}" if created else "kafka: topics already exist")
        print(f"kafka: ready at {bootstrap}")
        return 0
    bootstrap = up(port=args.port, timeout_s=args.timeout_s)
    print(f"kafka: ready at {bootstrap}")
    return 0


@_cli
def _cli_down(args: argparse.Namespace) -> int:
    if settings().embedded_kafka:
        cluster.down()
    down()
    return 0


@_cli
def _cli_status(args: argparse.Namespace) -> int:
    s = settings()
    local_cluster = cluster.configured(s) if s.embedded_kafka else None
    if local_cluster is not None:
        running = [n.node_id for n in local_cluster.nodes if local_cluster.pid(n.node_id)]
        bootstrap = local_cluster.bootstrap
        print(f"mode:      embedded cluster of {len(local_cluster.nodes)} nodes (state in {local_cluster.state_dir})")
        print(f"bootstrap: {bootstrap}")
        print(f"nodes:     {len(running)} running {running}")
        if not running:
            print("cluster:   not running (start it with `ccab kafka up --brokers N`)")
            return 1
    elif s.embedded_kafka:
        p = paths(s)
        pid = broker_pid(p)
        bootstrap = local_bootstrap(s)
        print(f"mode:      embedded (local broker, state in {p.state_dir})")
        print(f"bootstrap: {bootstrap}")
        if pid is None:
            print("broker:    not running (start it with `ccab kafka up`)")
            return 1
        print(f"broker:    running, pid {pid}, log {p.log_file}")
    else:
        bootstrap = s.bootstrap_servers
        print("mode:      external (CCAB_KAFKA_BROKERS)")
        print(f"bootstrap: {bootstrap}")
    try:
        partitions = topic_partitions(bootstrap, timeout_s=5.0)
    except KafkaLocalError as exc:
        print(f"reachable: no ({exc})")
        return 1
    print("reachable: yes")
    print(f"topics:    {len(partitions)}")
    for name in sorted(partitions):
        marker = "" if name in TOPICS else "  (not a ccab topic)"
        count = partitions[name]
        print(f"  {name:<28} {count:>3} partition{'' if count == 1 else 's'}{marker}")
    for name in TOPICS:
        if name not in partitions:
            print(f"  {name:<28} missing (run `ccab kafka up`)")
    return 0
