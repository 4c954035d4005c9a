"""Is Kafka there? One bounded check every command that needs Kafka runs first, so a broker that
is down is one clear line after at most ``timeout_s`` seconds, not a hang or a stream of
librdkafka ``FAIL`` lines.

:func:`check_reachable` first opens a TCP connection to each bootstrap address (cheap, no Kafka
client, no log noise); when one answers it asks that cluster for its metadata through a client
whose own log is summarised (:mod:`ccab.base.kafkalog`). Either failure raises
:class:`KafkaUnreachable` with what to do. Callers (``ccab loader``, ``ccab sim --to-kafka``,
``ccab rollout status``...) turn it into their one-line error."""

from __future__ import annotations

import socket
import time

from ccab.base.kafkalog import librdkafka_logger
from ccab.kafka.topics import KafkaLocalError

DEFAULT_TIMEOUT_S = 5.0


class KafkaUnreachable(KafkaLocalError):
    """No broker at the bootstrap addresses answered in time."""


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        item = item.split("://", 1)[-1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise KafkaUnreachable(f"Kafka address {item!r} is not HOST:PORT (check CCAB_KAFKA_BROKERS)")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise KafkaUnreachable("no Kafka address given (check CCAB_KAFKA_BROKERS)")
    return out


def _hint(local: bool) -> str:
    return ("start the local broker with `ccab kafka up`" if local
            else "check CCAB_KAFKA_BROKERS and that the cluster is up")


def check_reachable(bootstrap: str, timeout_s: float = DEFAULT_TIMEOUT_S, local: bool = True) -> None:
    """Return when a broker at ``bootstrap`` answers a metadata request within ``timeout_s``
    seconds in all; raise :class:`KafkaUnreachable` naming the addresses and what to do."""
    deadline = time.monotonic() + timeout_s
    reasons = []
    for host, port in _addresses(bootstrap):
        try:
            with socket.create_connection((host, port), timeout=max(0.2, deadline - time.monotonic())):
                break
        except OSError as exc:
            reasons.append(f"{host}:{port} {exc.strerror or type(exc).__name__}".lower())
    else:
        raise KafkaUnreachable(f"Kafka is unreachable at {bootstrap} ({'; '.join(reasons)}): {_hint(local)}")
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": librdkafka_logger("reach"),
                         "socket.connection.setup.timeout.ms": max(1000, int(timeout_s * 1000))})
    try:
        admin.list_topics(timeout=max(0.5, deadline - time.monotonic()))
    except KafkaException as exc:
        raise KafkaUnreachable(f"Kafka at {bootstrap} accepts connections but did not answer within "
                               f"{timeout_s:g} s ({exc.args[0].str() if exc.args else exc}): {_hint(local)}") from None
