"""Kafka I/O of the controller: produce signed ``assignment/1`` records (key = host) and read the
assignments and ``agent_status/1`` topics back.

- The producer is idempotent (``enable.idempotence``, ``acks=all``) and :meth:`Publisher.publish`
  returns only when the broker acknowledged every record, or raises :class:`KafkaUnavailable`
  naming what failed (it never half-succeeds silently: the caller's intent stays pending).
- Readers assign every partition by hand and read from the low to the high watermark taken at
  the start (no consumer group, no committed offsets): a full, repeatable snapshot.
"""

from __future__ import annotations

import json
from typing import Callable, Iterable

from ccab.base.contracts import TOPIC_AGENT_STATUS, TOPIC_ASSIGNMENTS
from ccab.base.kafkalog import librdkafka_logger
from ccab.rollout.signing import verify


def wire(rec: dict) -> bytes:
    """The Kafka value of a record as the publisher writes it (what the agents' size limit applies to:
    the signature included, non-ASCII escaped)."""
    return json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()


class KafkaUnavailable(RuntimeError):
    """The broker could not be reached or did not acknowledge; the message says which step."""


class Publisher:
    def __init__(self, bootstrap: str, topic: str = TOPIC_ASSIGNMENTS, timeout_s: float = 15.0):
        from confluent_kafka import Producer

        self.bootstrap, self.topic, self.timeout_s = bootstrap, topic, timeout_s
        self._p = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": int(timeout_s * 1000),
            "socket.connection.setup.timeout.ms": int(min(timeout_s, 10) * 1000),
            "logger": librdkafka_logger("rollout"),
        })

    def publish(self, records: Iterable[dict], on_delivered: Callable[[dict], None] | None = None,
                key: Callable[[dict], str] = lambda r: r["host"]) -> int:
        """Produce ``records`` (each keyed by ``key``: its host) and wait for all acknowledgements."""
        errors: list[str] = []
        n = 0

        def done(rec: dict):
            def cb(err, _msg):
                if err is not None:
                    errors.append(f"{key(rec)}: {err.str()}")
                elif on_delivered is not None:
                    on_delivered(rec)
            return cb

        for rec in records:
            value = wire(rec)
            try:
                self._p.produce(self.topic, key=key(rec).encode(), value=value, on_delivery=done(rec))
            except BufferError as exc:
                raise KafkaUnavailable(f"producer queue full for {self.topic}: {exc}") from None
            n += 1
            self._p.poll(0)
        left = self._p.flush(self.timeout_s + 5)
        if left:
            raise KafkaUnavailable(f"{left} record(s) not acknowledged by {self.bootstrap} "
                                   f"within {self.timeout_s:.0f}s (is the broker up? `ccab kafka status`)")
        if errors:
            raise KafkaUnavailable(f"publishing to {self.topic} at {self.bootstrap} failed: " + "; ".join(errors[:5]))
        return n


def read_topic(bootstrap: str, topic: str, timeout_s: float = 15.0) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every message in ``topic`` from the low to the high watermark, in
    partition/offset order. Raises :class:`KafkaUnavailable` if the broker does not answer."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ccab-rollout-reader", "enable.auto.commit": False,
                  "enable.partition.eof": False, "logger": librdkafka_logger("rollout"),
                  "socket.connection.setup.timeout.ms": int(min(timeout_s, 10) * 1000)})
    try:
        try:
            md = c.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap} to read {topic}: {exc}") from None
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None:
            raise KafkaUnavailable(f"topic {topic} not available at {bootstrap}: {tmd.error if tmd else 'missing'}"
                                   " (run `ccab kafka up`)")
        ends: dict[int, int] = {}
        tps = []
        for p in sorted(tmd.partitions):
            lo, hi = _watermarks(c, topic, p, bootstrap, timeout_s)
            if hi > lo:
                ends[p] = hi
                tps.append(TopicPartition(topic, p, lo))
        out: dict[int, list] = {p: [] for p in ends}
        if not tps:
            return []
        c.assign(tps)
        remaining = dict(ends)
        import time

        deadline = time.monotonic() + timeout_s + 30
        while remaining:
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"reading {topic} at {bootstrap} did not reach the high watermark")
            for m in c.consume(500, 1.0):
                if m.error():
                    continue
                p = m.partition()
                if p not in remaining:
                    continue
                out[p].append((m.key(), m.value()))
                if m.offset() + 1 >= remaining[p]:
                    del remaining[p]
        return [kv for p in sorted(out) for kv in out[p]]
    finally:
        c.close()


#: errors of a partition whose leader is being elected (a broker that just started)
_ELECTING = (6, 5, 3)  # NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PART


def _watermarks(c, topic: str, partition: int, bootstrap: str, timeout_s: float) -> tuple[int, int]:
    """The partition's (low, high) watermarks; a retriable error (a leader being elected, as on a
    broker that just started) is retried until ``timeout_s``, then :class:`KafkaUnavailable`."""
    import time

    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            transient = err is not None and (err.retriable() or err.code() in _ELECTING)
            if not (transient and time.monotonic() < deadline):
                raise KafkaUnavailable(f"cannot read offsets of {topic}[{partition}] at {bootstrap}: {exc}") from None
            time.sleep(0.5)


def read_assignments(bootstrap: str, topic: str = TOPIC_ASSIGNMENTS, timeout_s: float = 15.0) -> list[dict]:
    """Every assignment record still on the topic, in offset order (compaction may have removed
    older ones; the last per host is always there). What is not a JSON object (garbage, or JSON
    such as ``[1, 2, 3]`` a hostile producer wrote) is skipped: it is no record of any host."""
    out = []
    for _k, v in read_topic(bootstrap, topic, timeout_s):
        if v is None:
            continue
        try:
            rec = json.loads(v)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


#: the agents' generation rule (contracts/CONTRACTS.md, assignment/1): generations are integers in
#: [0, 2^53 - 1] and an agent refuses a record more than MAX_GENERATION_JUMP ahead of what it applied
MAX_GENERATION = 2**53 - 1
MAX_GENERATION_JUMP = 1_000_000


def valid_generation(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_GENERATION


def latest_assignments(records: list[dict], key=None, known: dict[str, int] | None = None,
                       applied: dict[str, int] | None = None,
                       refused: set[tuple[str, int]] | None = None) -> dict[str, dict]:
    """host -> the record with the highest generation that the agents would accept.

    A record counts only with an integer generation in range, a valid signature when ``key`` (the
    controller's public key) is given, and — for hosts in ``known`` (host -> the generation the
    controller last sent) — at most MAX_GENERATION_JUMP ahead of it; with the agents' answers
    (:func:`agent_generations`), not one the host's agent refused, nor one more than
    MAX_GENERATION_JUMP ahead of what it applied (the agent refuses those). So a forged, null or
    huge generation on the topic never drags the controller's next generation (a rollback
    included) to where every agent would refuse it."""
    known, applied, refused = known or {}, applied or {}, refused or set()
    latest: dict[str, dict] = {}
    for r in records:
        h, gen = r.get("host"), r.get("generation")
        if not isinstance(h, str) or not valid_generation(gen):
            continue
        if h in known and gen > known[h] + MAX_GENERATION_JUMP:
            continue
        if (h, gen) in refused or (h in applied and gen > applied[h] + MAX_GENERATION_JUMP):
            continue
        if key is not None and verify(r, key) is not None:
            continue
        if h not in latest or gen >= latest[h]["generation"]:
            latest[h] = r
    return latest


def agent_generations(statuses: list[dict]) -> tuple[dict[str, int], set[tuple[str, int]]]:
    """What the agents report, ``statuses`` in topic order (one host's answers share a partition):
    host -> the generation it runs now (its newest ``applied`` answer or heartbeat, which carries
    the applied generation), and the (host, generation) pairs it refused."""
    applied: dict[str, int] = {}
    refused: set[tuple[str, int]] = set()
    for s in statuses:
        h, gen = s.get("host"), s.get("generation")
        if not isinstance(h, str) or not valid_generation(gen):
            continue
        if s.get("state") in ("applied", "heartbeat"):
            applied[h] = gen
        elif s.get("state") == "refused":
            refused.add((h, gen))
    return applied, refused


def next_generation(own: int, on_topic: int, applied: int | None) -> int:
    """The generation of the controller's next record for a host: one more than the highest of its
    own last one, the newest acceptable one on the topic and the one the agent applied — never
    beyond what the agent can apply (``applied + MAX_GENERATION_JUMP``, and ``MAX_GENERATION``).
    ``on_topic`` must already exclude records the agent refused or would refuse
    (:func:`latest_assignments` with ``applied``/``refused``); ``applied`` None: no answer known."""
    nxt = max(own, on_topic, applied or 0) + 1
    ceiling = MAX_GENERATION if applied is None else min(MAX_GENERATION, applied + MAX_GENERATION_JUMP)
    return min(nxt, ceiling)


def read_agent_status(bootstrap: str, topic: str = TOPIC_AGENT_STATUS, timeout_s: float = 15.0) -> list[dict]:
    out = []
    for _k, v in read_topic(bootstrap, topic, timeout_s):
        try:
            rec = json.loads(v)
        except (TypeError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("schema") == "agent_status/1":
            out.append(rec)
    return out
