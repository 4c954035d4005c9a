"""Kafka -> ClickHouse loader (``ccab loader``) and replay-file loading (``ccab load``).

Exactly-once, without transactions:

- A batch is inserted atomically (one block) into the raw table, each row carrying its source
  ``_topic/_partition/_offset`` (see :mod:`ccab.ingest.batch`).
- Offsets are committed to Kafka only after the insert succeeded.
- One batch is written while the next is consumed (a writer thread, one batch in flight): the
  warehouse's insert (another process: the warehouse service or a server) overlaps the loader's
  Kafka and Python work. Offsets are committed in order, by the consuming thread, once their
  batch is in; a rebalance first waits for the batch in flight and commits it.
- When partitions are assigned, the loader starts each one at
  ``max(committed offset, max(_offset) in the warehouse + 1)``: a batch that was inserted but not
  committed (SIGKILL between the two) is never inserted again, whatever batch boundaries the new
  process chooses. Identical retries inside one process are also dropped by the batch's
  ``insert_deduplication_token``.

With a shard layout (``shards=[...]``, ``CCAB_CLICKHOUSE_SHARDS``) each batch is split by shard
and each part goes into its shard's tables; a partition resumes by the per-shard rule of
:mod:`ccab.ingest.shards` (exactly once per shard).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ccab.base.contracts import SCHEMA_BY_NAME, SCHEMA_BY_TOPIC, SCHEMAS, Schema
from ccab.base.kafkalog import librdkafka_logger
from ccab.base.progress import Progress
from ccab.base.warehouse import Warehouse
from ccab.ingest.batch import (DEFAULT_MAX_RECORD_BYTES, MAX_BATCH_BYTES, MAX_BATCH_ROWS, Batch, BatchResult,
                               BatchWriter, Record, record_schema)
from ccab.ingest.shards import resume_offset, shard_numbers, split

log = logging.getLogger("ccab.ingest.loader")

DEFAULT_GROUP = "ccab-loader"


# --------------------------------------------------------------------------- metrics


class LoaderMetrics:
    """Prometheus metrics of one loader process (own registry, so tests can make several)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.consumed = Counter("ccab_loader_records_consumed_total", "Records read from Kafka or files",
                                ["topic"], registry=self.registry)
        self.inserted = Counter("ccab_loader_rows_inserted_total", "Rows inserted into raw tables",
                                ["table"], registry=self.registry)
        self.dead = Counter("ccab_loader_dead_letters_total", "Records sent to dead_letters",
                            ["topic", "reason"], registry=self.registry)
        self.lag = Gauge("ccab_loader_lag_records", "High watermark minus committed position",
                         ["topic", "partition"], registry=self.registry)
        self.batch_seconds = Histogram("ccab_loader_batch_seconds", "Time to validate and insert one batch",
                                       registry=self.registry,
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.insert_errors = Counter("ccab_loader_insert_errors_total", "Batches whose insert failed (retried)",
                                     registry=self.registry)
        self.commit_errors = Counter("ccab_loader_commit_errors_total",
                                     "Offset commits that failed after the insert (Kafka away; the next commits "
                                     "again, a restart resumes from the warehouse)", registry=self.registry)
        self.warehouse_ready = Gauge("ccab_loader_warehouse_ready",
                                     "1 once the loader reached the warehouse; 0 while it waits for it at start "
                                     "(the local warehouse service restarting)", registry=self.registry)

    def serve(self, port: int) -> None:
        from prometheus_client import start_http_server

        start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def record(self, topic: str, table: str, res: BatchResult) -> None:
        self.inserted.labels(table).inc(res.inserted)
        for reason, n in res.dead.items():
            self.dead.labels(topic, _reason_kind(reason)).inc(n)


def _reason_kind(reason: str) -> str:
    """Low-cardinality label for a dead-letter reason (the full reason is in the table)."""
    if "outside the plausible time window" in reason or "out of range" in reason:
        return "out_of_range"
    for prefix, kind in (("oversize", "oversize"), ("bad JSON", "bad_json"), ("unknown schema", "unknown_schema"),
                         ("duplicate key", "duplicate_key"), ("refused", "refused"),
                         ("missing required field", "missing_field"), ("wrong type", "wrong_type"),
                         ("field ", "wrong_type"), ("invalid value", "invalid_value")):
        if reason.startswith(prefix):
            return kind
    return "other"


# --------------------------------------------------------------------------- replay files


@dataclass
class LoadReport:
    files: int = 0
    records: int = 0
    inserted: dict[str, int] | None = None
    dead: dict[str, int] | None = None

    @property
    def dead_total(self) -> int:
        return sum((self.dead or {}).values())


def load_files(wh: Warehouse, paths: list[Path], max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
               batch_rows: int = 50_000, progress: bool = False, metrics: LoaderMetrics | None = None,
               shards: list[Warehouse] | None = None) -> LoadReport:
    """Load JSONL replay files through the same validation and insert path as the loader.

    Each line's schema is its top-level ``schema`` member (:func:`ccab.ingest.batch.record_schema`,
    the same definition the Kafka path checks against its topic); positions are ``file:<name>``/0/line number,
    so loading the same file twice inserts nothing the second time (same dedup tokens).
    ``shards``: one warehouse per shard (``wh`` is then ignored): each batch is split by
    ``cityHash64(host) % len(shards)`` as the Kafka loader does; unknown records go to shard 0.
    """
    writers = [BatchWriter(s, max_record_bytes) for s in shards] if shards else [BatchWriter(wh, max_record_bytes)]
    writer = writers[0]
    inserted: dict[str, int] = defaultdict(int)
    dead: dict[str, int] = defaultdict(int)
    total = 0
    with Progress("load", total=sum(p.stat().st_size for p in paths), unit="bytes", enabled=progress) as prog:
        for path in paths:
            topic = f"file:{path.name}"
            pending: dict[str, Batch] = {}
            pending_bytes: dict[str, int] = defaultdict(int)
            unknown: list[tuple[Record, str]] = []

            def flush(name: str) -> None:
                batch = pending.pop(name, None)
                pending_bytes.pop(name, None)
                if not batch:
                    return
                parts = [batch] if len(writers) == 1 else split(
                    batch, shard_numbers(writers[0].wh, batch.payloads, len(writers)), {}, len(writers))
                for part_writer, part in zip(writers, parts):
                    if not part.payloads:
                        continue
                    res = part_writer.write(SCHEMA_BY_NAME[name], part)
                    inserted[SCHEMA_BY_NAME[name].table] += res.inserted
                    for why, n in res.dead.items():
                        dead[why] += n
                    if metrics:
                        metrics.record(topic, SCHEMA_BY_NAME[name].table, res)

            with path.open("rb") as fh:
                for lineno, line in enumerate(fh, start=1):
                    total += 1
                    prog.advance(len(line))
                    if not line.strip():
                        continue  # blank lines are not records
                    body = line.rstrip(b"\r\n")
                    name, why = record_schema(body)
                    if name not in SCHEMA_BY_NAME:
                        unknown.append((Record(body, topic, 0, lineno),
                                        why or f"unknown schema {name!r:.80}"))
                        continue
                    batch = pending.get(name)
                    if batch is None:
                        batch = pending[name] = Batch(topic, [], [], [], hash_content=True)
                    batch.payloads.append(body)
                    batch.partitions.append(0)
                    batch.offsets.append(lineno)
                    pending_bytes[name] += len(line)
                    if len(batch) >= min(batch_rows, MAX_BATCH_ROWS) or pending_bytes[name] >= MAX_BATCH_BYTES:
                        flush(name)
            for name in list(pending):
                flush(name)
            if unknown:
                writer.write_dead_letters("", unknown)
                for _, why in unknown:
                    dead[why] += 1
    return LoadReport(len(paths), total, dict(inserted), dict(dead))




# --------------------------------------------------------------------------- Kafka loop


def warehouse_positions(wh: Warehouse, topic: str, schema: Schema) -> dict[int, int]:
    """Next offset to read per partition of ``topic``, as the warehouse knows it."""
    rows = wh.query(
        f"SELECT _partition, max(_offset) FROM {schema.table} WHERE _topic = {{t:String}} GROUP BY _partition",
        params={"t": topic},
    ).rows
    return {int(p): int(o) + 1 for p, o in rows}


ASSIGN_TIMEOUT_S = 30.0
# A batch that fails this many times while the warehouse answers is split (Loader._write_bounded).
MAX_BATCH_ATTEMPTS = 3
RETRY_S = 2.0


class NoPartitions(RuntimeError):
    """The consumer group assigned nothing in time (Kafka unreachable, or no group coordinator)."""


class Loader:
    """Consumes the contract topics in a consumer group and writes them to the warehouse."""

    def __init__(self, wh: Warehouse, bootstrap: str, topics: dict[str, Schema], group: str = DEFAULT_GROUP,
                 batch_rows: int = 50_000, batch_wait_s: float = 1.0,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, metrics: LoaderMetrics | None = None,
                 instance_id: str | None = None, shards: list[Warehouse] | None = None):
        """``shards``: one warehouse per shard in shard order (``wh`` is then ignored): batches are
        split by ``cityHash64(host) % len(shards)``. None: the one warehouse ``wh``."""
        from confluent_kafka import Consumer

        self.wh = shards[0] if shards else wh
        self.shards = shards
        self.shard_writers = [BatchWriter(s, max_record_bytes) for s in shards] if shards else []
        # (topic, shard, partition) -> next offset after the largest that shard holds (read on assign)
        self._floors: dict[str, dict[tuple[int, int], int]] = {}
        self.topics = topics  # topic -> the schema its records must have
        self.batch_rows = min(batch_rows, MAX_BATCH_ROWS)
        self.batch_wait_s = batch_wait_s
        self.writer = BatchWriter(self.wh, max_record_bytes)
        self.metrics = metrics or LoaderMetrics()
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20,
            "queued.max.messages.kbytes": 256 << 10,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
            "max.poll.interval.ms": 300_000,
            "logger": librdkafka_logger("loader"),  # one line per distinct problem, not a FAIL per retry
            # Static membership: a restarted loader with the same id takes its partitions back at
            # once instead of waiting out the dead member's session.
            **({"group.instance.id": instance_id} if instance_id else {}),
        })
        self._stop = False
        self._errors_seen: set[str] = set()
        self._assigned = False  # idle time counts only once the group gave us partitions
        self._last_lag_check = 0.0
        self.totals = BatchResult()
        # the batch being written (by the writer thread) and the offsets to commit once it is in
        self._inflight: tuple[Future, dict[tuple[str, int], int]] | None = None
        self._writer_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ccab-loader-write")

    def stop(self, *_sig) -> None:
        self._stop = True

    def _on_revoke(self, consumer, partitions) -> None:
        """Partitions leave: the batch in flight goes in and its offsets are committed first."""
        self._finish_inflight()

    def _on_assign(self, consumer, partitions) -> None:
        from confluent_kafka import OFFSET_INVALID

        self._finish_inflight()  # the warehouse positions below must include the batch in flight
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(partitions, timeout=30)}
        if self.shards:
            self._assign_sharded(consumer, partitions, committed)
            return
        by_topic: dict[str, dict[int, int]] = {}
        for tp in partitions:
            if tp.topic not in by_topic:
                by_topic[tp.topic] = warehouse_positions(self.wh, tp.topic, self.topics[tp.topic])
            in_wh = by_topic[tp.topic].get(tp.partition)
            kafka = committed.get((tp.topic, tp.partition), OFFSET_INVALID)
            if in_wh is not None and (kafka < 0 or in_wh > kafka):
                tp.offset = in_wh
                log.info("resume %s[%d] at %d from the warehouse (kafka committed %s)", tp.topic, tp.partition, in_wh, kafka)
            elif kafka >= 0:
                tp.offset = kafka
        consumer.assign(partitions)
        self._assigned = True

    def _assign_sharded(self, consumer, partitions, committed: dict) -> None:
        """The per-shard rule (:mod:`ccab.ingest.shards`): read each shard's next offset per
        partition, resume at the minimum (or the committed offset, if later), and remember each
        shard's own floor to drop re-read rows it already holds."""
        from confluent_kafka import OFFSET_INVALID

        for topic in {tp.topic for tp in partitions}:
            per_shard = [warehouse_positions(s, topic, self.topics[topic]) for s in self.shards]
            floors = self._floors.setdefault(topic, {})
            for k, positions in enumerate(per_shard):
                floors.update({(k, p): o for p, o in positions.items()})
            for tp in partitions:
                if tp.topic != topic:
                    continue
                kafka = committed.get((tp.topic, tp.partition), OFFSET_INVALID)
                at = resume_offset(kafka, [positions.get(tp.partition) for positions in per_shard])
                if at is not None:
                    tp.offset = at
                    if at != kafka:
                        log.info("resume %s[%d] at %d from the shards (kafka committed %s)", tp.topic, tp.partition,
                                 at, kafka)
        consumer.assign(partitions)
        self._assigned = True

    def run(self, max_idle_s: float | None = None, max_records: int | None = None,
            progress=None) -> BatchResult:
        """Consume until stopped (SIGTERM/SIGINT), or idle for ``max_idle_s`` seconds, or
        ``max_records`` consumed (tests and the demo use the last two). With ``max_idle_s``, a
        group that assigns no partition within ``max(max_idle_s, ASSIGN_TIMEOUT_S)`` seconds
        (the broker went away) raises :class:`NoPartitions` instead of waiting for ever.
        ``progress`` (a :class:`ccab.base.progress.Progress`) advances by the records consumed."""
        self.consumer.subscribe(list(self.topics), on_assign=self._on_assign, on_revoke=self._on_revoke)
        idle_since = time.monotonic()
        started = idle_since
        consumed = 0
        try:
            while not self._stop:
                batch = self._collect()
                if not batch:
                    self._finish_inflight()  # an idle topic gets its last offsets committed at once
                    if not self._assigned:
                        idle_since = time.monotonic()
                        if max_idle_s is not None and idle_since - started > max(max_idle_s, ASSIGN_TIMEOUT_S):
                            raise NoPartitions(
                                f"no partition assigned after {idle_since - started:.0f} s: Kafka is unreachable "
                                "or the consumer group cannot form (is the broker up? ccab kafka status)")
                    elif max_idle_s is not None and time.monotonic() - idle_since > max_idle_s:
                        break
                    self._update_lag()
                    continue
                idle_since = time.monotonic()
                self._submit(batch)
                consumed += len(batch)
                if progress is not None:
                    progress.advance(len(batch))
                self._update_lag()
                if max_records is not None and consumed >= max_records:
                    break
            self._finish_inflight()
        finally:
            try:
                if self._inflight is not None:  # leaving on an error: the batch in flight still goes in
                    self._inflight[0].exception()
            finally:
                self._writer_thread.shutdown(wait=True)
                self.consumer.close()
        return self.totals

    def _collect(self) -> list:
        """Up to batch_rows messages, waiting at most batch_wait_s after the first."""
        msgs: list = []
        size = 0
        deadline = None
        while len(msgs) < self.batch_rows and size < MAX_BATCH_BYTES and not self._stop:
            timeout = 0.5 if deadline is None else max(0.0, deadline - time.monotonic())
            got = self.consumer.consume(num_messages=min(50_000, self.batch_rows - len(msgs)), timeout=timeout)
            for m in got:
                err = m.error()
                if err is not None:
                    if err.code() != err._PARTITION_EOF and err.str() not in self._errors_seen:
                        self._errors_seen.add(err.str())  # once per distinct error, not per retry
                        log.warning("kafka: %s", err.str())
                    continue
                msgs.append(m)
                size += len(m.value() or b"")
            if deadline is None:
                if not msgs:
                    return msgs
                deadline = time.monotonic() + self.batch_wait_s
            elif time.monotonic() >= deadline:
                break
        return msgs

    def _submit(self, msgs: list) -> None:
        """Hand ``msgs`` to the writer thread, once the batch before it is in and committed."""
        by_topic, next_offsets = self._batches(msgs)
        self._finish_inflight()
        self._inflight = (self._writer_thread.submit(self._insert, by_topic), next_offsets)

    def _finish_inflight(self) -> None:
        """Wait for the batch in flight (re-raising its error) and commit its offsets."""
        from confluent_kafka import KafkaException, TopicPartition

        if self._inflight is None:
            return
        future, next_offsets = self._inflight
        self._inflight = None
        future.result()
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in next_offsets.items()],
                                 asynchronous=False)
        except KafkaException as exc:
            # The rows are in the warehouse and a restart resumes after its max(_offset): a commit
            # that fails (the broker went away) loses nothing; the next batch's commit covers it.
            self.metrics.commit_errors.inc()
            log.warning("kafka: offset commit failed, the next batch commits again: %s", exc)

    def _batches(self, msgs: list) -> tuple[dict[str, Batch], dict[tuple[str, int], int]]:
        """``msgs`` as one batch per topic, and the offsets to commit once they are in."""
        topics = {m.topic() for m in msgs}
        if len(topics) == 1:  # the usual case: one batch, built column by column
            topic = topics.pop()
            by_topic = {topic: Batch(topic, [m.value() or b"" for m in msgs], [m.partition() for m in msgs],
                                     [m.offset() for m in msgs])}
        else:
            by_topic = {t: Batch(t, [], [], []) for t in topics}
            for m in msgs:
                b = by_topic[m.topic()]
                b.payloads.append(m.value() or b"")
                b.partitions.append(m.partition())
                b.offsets.append(m.offset())
        # Kafka hands out each partition in offset order: the last one seen is the highest.
        next_offsets = {(t, p): o + 1 for t, b in by_topic.items() for p, o in zip(b.partitions, b.offsets)}
        return by_topic, next_offsets

    def _insert(self, by_topic: dict[str, Batch]) -> None:
        """The writer thread's job: each topic's batch into the warehouse (retried, split)."""
        start = time.monotonic()
        for topic, batch in by_topic.items():
            self.metrics.consumed.labels(topic).inc(len(batch))
            schema = self.topics[topic]
            res = self._write_bounded(schema, batch)
            self.metrics.record(topic, schema.table, res)
            self.totals.add(res)
        self.metrics.batch_seconds.observe(time.monotonic() - start)

    def _write_bounded(self, schema: Schema, batch: Batch, attempts: int = MAX_BATCH_ATTEMPTS) -> BatchResult:
        """Write ``batch``, retrying while the warehouse does not answer (an outage: the same
        batch, same dedup tokens, every ``RETRY_S``, for as long as it lasts). A batch that fails
        ``attempts`` times while the warehouse answers is never retried as is again: it is
        split in halves, each written on its own (and split again if it fails), down to single
        records; a single record that still fails is a dead letter with the error as its reason.
        So one record no path expected costs O(log n) extra writes and never stalls the topic."""
        failures = 0
        while True:
            try:
                return self._write_sharded(schema, batch) if self.shards else self.writer.write(schema, batch)
            except Exception as exc:  # noqa: BLE001 - whatever failed, the batch is retried or split
                self.metrics.insert_errors.inc()
                if self._stop:
                    raise
                failures += 1
                if failures >= attempts and self.writer.healthy():
                    log.error("insert into %s failed %d times while the warehouse answers (%s): splitting "
                              "the batch of %d", schema.table, failures, str(exc).split("\n", 1)[0][:200], len(batch))
                    return self._split(schema, batch, exc)
                log.error("insert into %s failed (attempt %d), retrying in %g s: %s", schema.table, failures,
                          RETRY_S, exc)
                time.sleep(RETRY_S)

    def _split(self, schema: Schema, batch: Batch, exc: Exception) -> BatchResult:
        if len(batch) == 1:
            res = BatchResult()
            why = f"refused {MAX_BATCH_ATTEMPTS} times while the warehouse answers: {str(exc).splitlines()[0][:200]}"
            self.writer.write_dead_letters(schema.name, [(batch.record(0), why)])
            res.dead[why] += 1
            return res
        mid = len(batch) // 2
        total = BatchResult()
        for part in (batch.part(0, mid), batch.part(mid, len(batch))):
            total.add(self._write_bounded(schema, part, attempts=1))  # the warehouse answers: split at once
        return total

    def _write_sharded(self, schema: Schema, batch: Batch) -> BatchResult:
        """Each shard's part of ``batch`` into that shard (one atomic insert each). A retry after
        a failure re-sends only the parts not yet in (the floors moved past the rest)."""
        assert self.shards is not None
        floors = self._floors.setdefault(batch.topic, {})
        parts = split(batch, shard_numbers(self.shards[0], batch.payloads, len(self.shards)), floors,
                      len(self.shards))
        total = BatchResult()
        for k, part in enumerate(parts):
            if not part.payloads:
                continue
            total.add(self.shard_writers[k].write(schema, part))
            for p, o in zip(part.partitions, part.offsets):  # in offset order: the last is the largest
                floors[(k, p)] = o + 1
        return total

    def _update_lag(self) -> None:
        now = time.monotonic()
        if now - self._last_lag_check < 5:
            return
        self._last_lag_check = now
        try:
            for tp in self.consumer.position(self.consumer.assignment()):
                if tp.offset < 0:
                    continue
                _, high = self.consumer.get_watermark_offsets(tp, timeout=2, cached=True)
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, high - tp.offset))
        except Exception as exc:  # metrics must never stop loading
            log.debug("lag update failed: %s", exc)


def parse_topics(spec: str | None) -> dict[str, Schema]:
    """``None`` -> every contract topic; else ``topic[=schema],...`` (schema defaults to the
    contract schema of that topic name)."""
    if not spec:
        return dict(SCHEMA_BY_TOPIC)
    out: dict[str, Schema] = {}
    for item in spec.split(","):
        topic, _, schema_name = item.strip().partition("=")
        if schema_name:
            if schema_name not in SCHEMAS:
                raise ValueError(f"--topics: unknown schema {schema_name!r} for topic {topic!r}; known: {', '.join(SCHEMAS)}")
            out[topic] = SCHEMAS[schema_name]
        elif topic in SCHEMA_BY_TOPIC:
            out[topic] = SCHEMA_BY_TOPIC[topic]
        else:
            raise ValueError(f"--topics: {topic!r} is not a contract topic; name its schema: {topic}=tcp_sample/1")
    return out
