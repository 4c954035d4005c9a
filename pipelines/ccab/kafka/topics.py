"""The Kafka topics of the contracts and how they are created: partition counts, retention,
compaction (:data:`TOPICS`), plus the admin helpers every Kafka user shares (:func:`ensure_topics`,
:func:`topic_partitions`). Works against any cluster; the local broker is :mod:`ccab_workshop.kafka.broker`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Mapping

from ccab.base.contracts import (TOPIC_AGENT_STATUS, TOPIC_ASSIGNMENTS, TOPIC_HTTP, TOPIC_PREFIX_SETS, TOPIC_TCP,
                                 TOPIC_TCP_CONN)

__all__ = ["TopicSpec", "TOPICS", "TOPIC_TCP", "TOPIC_TCP_CONN", "TOPIC_HTTP", "TOPIC_ASSIGNMENTS", "TOPIC_AGENT_STATUS",
           "KafkaLocalError", "ensure_topics", "replication_config", "topic_partitions", "admin_client"]

# --- topics --------------------------------------------------------------------------------------

RETENTION_7_DAYS_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    """How a topic is created: partition count and topic-level configs (Kafka config names)."""

    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)


# The topics of contracts/CONTRACTS.md. Producers compress with zstd; ``compression.type=producer``
# keeps their batches as they are. Assignments are compacted: the latest record per host wins.
TOPICS: dict[str, TopicSpec] = {
    TOPIC_TCP: TopicSpec(
        partitions=6,
        config={"retention.ms": str(RETENTION_7_DAYS_MS), "compression.type": "producer"},
    ),
    TOPIC_TCP_CONN: TopicSpec(
        partitions=6,
        config={"retention.ms": str(RETENTION_7_DAYS_MS), "compression.type": "producer"},
    ),
    TOPIC_HTTP: TopicSpec(
        partitions=6,
        config={"retention.ms": str(RETENTION_7_DAYS_MS), "compression.type": "producer"},
    ),
    # an assignment is < 1 KiB; the broker refuses anything over 64 KiB, so no producer can park a
    # record on the topic that the agents (16 KiB limit) would have to read past
    TOPIC_ASSIGNMENTS: TopicSpec(partitions=1, config={"cleanup.policy": "compact", "max.message.bytes": "65536"}),
    # prefix_set/1 chunks, key name/version/chunk: compaction keeps every chunk of every version. A
    # chunk is <= 16 KiB (the agents refuse larger ones); the limit here is on a producer's batch of them
    TOPIC_PREFIX_SETS: TopicSpec(partitions=1, config={"cleanup.policy": "compact", "max.message.bytes": "1048576"}),
    TOPIC_AGENT_STATUS: TopicSpec(partitions=3, config={"retention.ms": str(RETENTION_7_DAYS_MS)}),
}


class KafkaLocalError(RuntimeError):
    """Something about the local broker (or the configured cluster) failed; the message says
    what failed and what to do about it."""


# librdkafka logs connection failures while a broker starts; route them through Python logging
# (silent unless the application configured logging) instead of raw stderr.
_RDKAFKA_LOGGER = logging.getLogger("ccab.kafka.broker.librdkafka")
_RDKAFKA_LOGGER.addHandler(logging.NullHandler())


def admin_client(bootstrap: str):
    """A confluent_kafka AdminClient that reconnects quickly and logs through Python logging."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
            "logger": _RDKAFKA_LOGGER,
        }
    )


def topic_partitions(bootstrap: str, timeout_s: float = 10.0) -> dict[str, int]:
    """Partition count of every non-internal topic at ``bootstrap``."""
    from confluent_kafka import KafkaException

    try:
        metadata = admin_client(bootstrap).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaLocalError(f"could not list topics at {bootstrap}: {exc}") from None
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if not name.startswith("__") and topic.error is None
    }


def replication_config(brokers: int) -> tuple[int, dict[str, str]]:
    """(replication factor, topic configs) of a new topic on a cluster of ``brokers`` brokers: from
    three brokers on, 3 replicas and ``min.insync.replicas=2`` -- with ``acks=all`` producers an
    acknowledged record is then on two brokers, and losing one broker loses and blocks nothing.
    Below three: -1 (the cluster's ``default.replication.factor``) and no override."""
    if brokers >= 3:
        return 3, {"min.insync.replicas": "2"}
    return -1, {}


def ensure_topics(
    bootstrap_servers: str,
    topics: Mapping[str, TopicSpec] | None = None,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create the topics in ``topics`` (default :data:`TOPICS`) that do not exist yet and wait
    until they show up in metadata. Existing topics are left alone (even if their settings
    differ). Returns the names created, in order."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    topics = TOPICS if topics is None else topics
    admin = admin_client(bootstrap_servers)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaLocalError(
            f"could not list topics at {bootstrap_servers}: {exc}; is the broker up (ccab kafka up)?"
        ) from None
    existing = set(metadata.topics)
    missing = [name for name in topics if name not in existing]
    if not missing:
        return []
    replication, extra = replication_config(len(metadata.brokers))
    new_topics = [
        NewTopic(name, num_partitions=topics[name].partitions, replication_factor=replication,
                 config={**extra, **topics[name].config})
        for name in missing
    ]
    futures = admin.create_topics(new_topics, operation_timeout=timeout_s, request_timeout=timeout_s)
    created = []
    for name in missing:
        try:
            futures[name].result()
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # someone else created it meanwhile: fine
            raise KafkaLocalError(
                f"could not create topic {name} at {bootstrap_servers}: {error.str()}"
            ) from None
        created.append(name)
    _wait_topics_visible(admin, bootstrap_servers, created, timeout_s)
    return created


def _wait_topics_visible(admin, bootstrap: str, names: list[str], timeout_s: float) -> None:
    """Wait until every topic in ``names`` has all its partitions with a leader in metadata."""
    deadline = time.monotonic() + timeout_s
    while names:
        metadata = admin.list_topics(timeout=max(0.5, deadline - time.monotonic()))
        pending = [
            name for name in names
            if name not in metadata.topics
            or metadata.topics[name].error is not None
            or not metadata.topics[name].partitions
            or any(part.leader < 0 for part in metadata.topics[name].partitions.values())
        ]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise KafkaLocalError(
                f"topics {', '.join(pending)} were created at {bootstrap} but have no leader "
                f"after {timeout_s:.0f} s; check the broker log"
            )
        time.sleep(0.2)
