"""Where generated records go: JSONL files or Kafka, and the raw collector inputs.

A sink consumes an iterator of ``(topic, key, line)`` (``line`` = one JSON record, bytes, no
newline) and does not know how the records were made. ``write`` returns the number of records
it accepted; ``close`` flushes and raises :class:`SinkError` if any record was lost.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import IO, Iterable, Protocol

from ccab.base.kafkalog import librdkafka_logger

Record = tuple[str, bytes, bytes]


class SinkError(RuntimeError):
    """Records could not be delivered; the message says how many and why."""


class Sink(Protocol):
    def write(self, records: Iterable[Record]) -> int: ...

    def close(self) -> None: ...


class JsonlSink:
    """One ``<topic>.jsonl`` file per topic in ``out_dir`` (plain text, one record per line)."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[bytes]] = {}
        self.written = 0

    def path(self, topic: str) -> Path:
        return self.out_dir / f"{topic}.jsonl"

    def write(self, records: Iterable[Record]) -> int:
        n = 0
        files = self._files
        for topic, _key, line in records:
            f = files.get(topic)
            if f is None:
                f = files[topic] = open(self.path(topic), "wb", buffering=1 << 20)
            f.write(line)
            f.write(b"\n")
            n += 1
        self.written += n
        return n

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


class KafkaSink:
    """Produce with ``confluent_kafka.Producer`` (zstd, batched); key = host.

    Delivery errors are counted by the delivery callback (only errors are reported, to keep the
    hot path cheap); ``close`` flushes and raises :class:`SinkError` when any record failed or
    is still queued after ``flush_timeout_s``.
    """

    def __init__(self, bootstrap_servers: str, *, linger_ms: int = 50, flush_timeout_s: float = 120.0,
                 topics: dict[str, str] | None = None, extra_config: dict | None = None):
        from confluent_kafka import Producer  # imported here: a JSONL run needs no Kafka client

        self.topics = dict(topics or {})  # record topic -> topic produced to (tests, staging)
        self.failed = 0
        self.first_errors: list[str] = []
        self.flush_timeout_s = flush_timeout_s
        self.written = 0
        config = {
            "bootstrap.servers": bootstrap_servers,
            "linger.ms": linger_ms,
            "batch.size": 1_000_000,
            "batch.num.messages": 20_000,
            "compression.type": "zstd",
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "acks": "all",
            "enable.idempotence": True,
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
            # a broker that goes away fails the queued records within a minute (counted, reported
            # by close) instead of blocking the producer's full queue for ever
            "message.timeout.ms": 60_000,
            "logger": librdkafka_logger("sim"),
        }
        config.update(extra_config or {})
        self._producer = Producer(config)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.failed += 1
            if len(self.first_errors) < 5:
                self.first_errors.append(f"{msg.topic()}: {err}")

    def write(self, records: Iterable[Record]) -> int:
        produce = self._producer.produce
        poll = self._producer.poll
        rename = self.topics
        n = 0
        for topic, key, line in records:
            topic = rename.get(topic, topic)
            while True:
                try:
                    produce(topic, line, key)
                    break
                except BufferError:  # local queue full: let librdkafka send, then retry
                    poll(0.2)
            n += 1
            if n % 20_000 == 0:
                poll(0)
        self.written += n
        return n

    def close(self) -> None:
        remaining = self._producer.flush(self.flush_timeout_s)
        if self.failed or remaining:
            raise SinkError(f"kafka: {self.failed} record(s) failed, {remaining} still queued after "
                            f"{self.flush_timeout_s:g}s; first errors: {'; '.join(self.first_errors) or '-'}")


class TeeSink:
    """Send every record to several sinks."""

    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks

    def write(self, records: Iterable[Record]) -> int:
        batch = list(records)
        n = 0
        for s in self.sinks:
            n = s.write(batch)
        return n

    def close(self) -> None:
        errors = []
        for s in self.sinks:
            try:
                s.close()
            except SinkError as exc:
                errors.append(str(exc))
        if errors:
            raise SinkError("; ".join(errors))


class RawWriter:
    """Raw collector inputs under ``out_dir``: ``ss/<host>/<tick_ts_ms>.txt`` (one
    ``ss -tinHOe`` snapshot per file, appended to when a tick's sockets come from several
    chunks) and ``nginx/<host>/access.log``."""

    def __init__(self, out_dir: Path, host_names: list[str]):
        self.out_dir = Path(out_dir)
        self.host_names = host_names
        for sub in ("ss", "nginx"):
            d = self.out_dir / sub
            if d.exists():
                shutil.rmtree(d)
        for name in host_names:
            (self.out_dir / "ss" / name).mkdir(parents=True, exist_ok=True)
            (self.out_dir / "nginx" / name).mkdir(parents=True, exist_ok=True)
        self.ss_files = 0

    def write_ss(self, groups: list[tuple[int, int, str]]) -> None:
        for host, tick_ms, text in groups:
            p = self.out_dir / "ss" / self.host_names[host] / f"{tick_ms}.txt"
            if not p.exists():
                self.ss_files += 1
            with open(p, "a") as f:
                f.write(text)

    def write_nginx(self, groups: list[tuple[int, str]]) -> None:
        for host, text in groups:
            with open(self.out_dir / "nginx" / self.host_names[host] / "access.log", "a") as f:
                f.write(text)
