"""The loader against a real Kafka broker and the real (embedded) ClickHouse engine."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from ccab.base import schema as migrate
from ccab.base.contracts import SCHEMAS
from ccab.base.warehouse import connect
from ccab.ingest.loader import Loader, LoaderMetrics, parse_topics
from factories import http_request, line, tcp_sample

pytestmark = pytest.mark.kafka


def _produce(bootstrap: str, topic: str, lines, key_of=lambda i: b"k%d" % (i % 8)) -> int:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "compression.type": "zstd", "enable.idempotence": True,
                  "queue.buffering.max.messages": 500000})
    n = 0
    for i, value in enumerate(lines):
        while True:
            try:
                p.produce(topic, value=value, key=key_of(i))
                break
            except BufferError:
                p.poll(0.05)
        n += 1
        if n % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return n


def test_parse_topics():
    assert set(parse_topics(None)) == {"ccab.tcp.v1", "ccab.tcp_conn.v1", "ccab.http.v1", "ccab.assignments.v1",
                                       "ccab.agent_status.v1"}
    assert parse_topics("x=http_request/1,ccab.tcp.v1") == {"x": SCHEMAS["http_request/1"], "ccab.tcp.v1": SCHEMAS["tcp_sample/1"]}
    with pytest.raises(ValueError, match="not a contract topic"):
        parse_topics("whatever")
    with pytest.raises(ValueError, match="unknown schema"):
        parse_topics("x=nope/1")


def test_loader_loads_valid_records_dead_letters_bad_ones_and_exposes_metrics(kafka_broker, fresh_topic, warehouse):
    topic = fresh_topic("http", partitions=3)
    good = [line(http_request(i)) for i in range(3000)]
    bad = [b"not json", line(http_request(1, status="teapot")), line({"schema": "http_request/1"})]
    _produce(kafka_broker, topic, good[:1500] + bad + good[1500:])
    metrics = LoaderMetrics()
    loader = Loader(warehouse, kafka_broker, {topic: SCHEMAS["http_request/1"]}, group=f"g-{topic}",
                    batch_rows=1000, batch_wait_s=0.2, metrics=metrics)
    totals = loader.run(max_idle_s=3)
    assert totals.inserted == 3000 and totals.dead_total == 3
    assert warehouse.query("SELECT count(), uniqExact(_partition, _offset) FROM http_requests").rows[0] == (3000, 3000)
    reasons = sorted(r[0] for r in warehouse.query("SELECT reason FROM dead_letters FINAL").rows)
    assert reasons[0].startswith("bad JSON") and reasons[1].startswith("field status") and reasons[2].startswith("missing required field")
    assert metrics.registry.get_sample_value("ccab_loader_rows_inserted_total", {"table": "http_requests"}) == 3000
    assert metrics.registry.get_sample_value("ccab_loader_records_consumed_total", {"topic": topic}) == 3003
    assert metrics.registry.get_sample_value("ccab_loader_dead_letters_total", {"topic": topic, "reason": "bad_json"}) == 1

    # a second loader in the same group finds nothing new (offsets were committed)
    again = Loader(warehouse, kafka_broker, {topic: SCHEMAS["http_request/1"]}, group=f"g-{topic}", batch_wait_s=0.2)
    assert again.run(max_idle_s=2).inserted == 0


def test_resume_from_the_warehouse_when_offsets_were_not_committed(kafka_broker, fresh_topic, warehouse):
    """Rows inserted but never committed (a crash between the two) are not inserted again,
    even by a new consumer group that has no committed offsets at all."""
    topic = fresh_topic("tcp", partitions=2)
    _produce(kafka_broker, topic, [line(tcp_sample(i)) for i in range(2000)])
    Loader(warehouse, kafka_broker, {topic: SCHEMAS["tcp_sample/1"]}, group=f"a-{topic}", batch_wait_s=0.2).run(max_idle_s=2)
    _produce(kafka_broker, topic, [line(tcp_sample(i)) for i in range(2000, 2500)])
    second = Loader(warehouse, kafka_broker, {topic: SCHEMAS["tcp_sample/1"]}, group=f"b-{topic}", batch_wait_s=0.2)
    assert second.run(max_idle_s=2).inserted == 500
    assert warehouse.query("SELECT count(), uniqExact(sock_id) FROM tcp_samples").rows[0] == (2500, 2500)


class _CommitFailsOnce:
    """The loader's real consumer, whose first offset commit fails the way it does when the broker
    goes away between the insert and the commit (seen in the soak: the loader crashed with
    ``KafkaException ... Commit failed: Local: Waiting for coordinator``)."""

    def __init__(self, consumer):
        self._c, self.failed = consumer, 0

    def commit(self, *a, **k):
        from confluent_kafka import KafkaError, KafkaException

        if not self.failed:
            self.failed += 1
            raise KafkaException(KafkaError(KafkaError._WAIT_COORD, "Commit failed: Local: Waiting for coordinator"))
        return self._c.commit(*a, **k)

    def __getattr__(self, name):
        return getattr(self._c, name)


def test_a_commit_that_fails_after_the_insert_does_not_stop_the_loader(kafka_broker, fresh_topic, warehouse):
    """Issue 28 (found by the soak): a failed offset commit after a successful insert loses
    nothing (a restart resumes after the warehouse's max(_offset)); the loader goes on loading,
    counts it in ccab_loader_commit_errors_total, and the next batch's commit covers it."""
    topic = fresh_topic("commit", partitions=1)
    _produce(kafka_broker, topic, [line(http_request(i)) for i in range(300)])
    metrics = LoaderMetrics()
    loader = Loader(warehouse, kafka_broker, {topic: SCHEMAS["http_request/1"]}, group=f"g-{topic}",
                    batch_rows=100, batch_wait_s=0.2, metrics=metrics)
    loader.consumer = _CommitFailsOnce(loader.consumer)
    totals = loader.run(max_idle_s=3)
    assert loader.consumer.failed == 1
    assert totals.inserted == 300
    assert warehouse.query("SELECT count(), uniqExact(_offset) FROM http_requests").rows[0] == (300, 300)
    assert metrics.registry.get_sample_value("ccab_loader_commit_errors_total") == 1
    again = Loader(warehouse, kafka_broker, {topic: SCHEMAS["http_request/1"]}, group=f"g-{topic}", batch_wait_s=0.2)
    assert again.run(max_idle_s=2).inserted == 0  # the later commits covered the failed one


def _spawn_loader(env, topics: str, group: str, extra=(), batch_rows: int = 20000):
    return subprocess.Popen(
        [sys.executable, "-m", "ccab.cli", "loader", "--topics", topics, "--group", group, "--instance-id", "loader-1",
         "--metrics-port", "0", "--batch-rows", str(batch_rows), "--batch-wait-s", "0.3", *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_one_million_records_exactly_once_through_20_sigkills(kafka_broker, fresh_topic, tmp_path, local_warehouse):
    """The issue's acceptance test: produce 1,000,000 records while the loader is SIGKILLed at
    random moments 20 times and restarted; afterwards the tables hold exactly 1,000,000 rows."""
    http_topic = fresh_topic("x-http", partitions=6)
    tcp_topic = fresh_topic("x-tcp", partitions=6)
    n_http, n_tcp = 900_000, 100_000
    env = dict(os.environ)  # the test's data dir, served by its warehouse service (local_warehouse)
    wh = connect()
    migrate.migrate(wh, log=lambda _m: None)
    wh.close()

    http_lines = (line(http_request(i, conn_serial=i)) for i in range(n_http))
    tcp_lines = (line(tcp_sample(i)) for i in range(n_tcp))
    produced: dict[str, int] = {}
    producer = threading.Thread(target=lambda: produced.update(
        http=_produce(kafka_broker, http_topic, http_lines), tcp=_produce(kafka_broker, tcp_topic, tcp_lines)))
    producer.start()

    topics = f"{http_topic}=http_request/1,{tcp_topic}=tcp_sample/1"
    rng = random.Random(20261122)
    kills = 0
    while kills < 20:
        # different batch boundaries on every restart, so dedup tokens alone could not hide a
        # double insert: only the resume-from-warehouse logic keeps this exact
        proc = _spawn_loader(env, topics, "exactly-once", batch_rows=rng.choice([7000, 13000, 20000, 31000]))
        time.sleep(rng.uniform(0.5, 4.0))
        if proc.poll() is not None:
            pytest.fail(f"loader exited by itself: {proc.stderr.read().decode()[-2000:]}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    producer.join()
    assert produced == {"http": n_http, "tcp": n_tcp}

    final = _spawn_loader(env, topics, "exactly-once", extra=("--exit-when-idle", "8"))
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err.decode()[-3000:]

    wh = connect()
    try:
        http = wh.query(f"SELECT count(), uniqExact(_partition, _offset) FROM http_requests WHERE _topic = '{http_topic}'").rows[0]
        tcp = wh.query(f"SELECT count(), uniqExact(_partition, _offset) FROM tcp_samples WHERE _topic = '{tcp_topic}'").rows[0]
        dead = wh.query("SELECT count() FROM dead_letters").scalar()
    finally:
        wh.close()
    assert http == (n_http, n_http)
    assert tcp == (n_tcp, n_tcp)
    assert http[0] + tcp[0] == 1_000_000 and dead == 0


def test_loader_cli_serves_prometheus_metrics(kafka_broker, fresh_topic, tmp_path, local_warehouse):
    topic = fresh_topic("m", partitions=1)
    _produce(kafka_broker, topic, [line(http_request(i)) for i in range(100)])
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ)  # local_warehouse: the data dir and its warehouse service
    proc = subprocess.Popen([sys.executable, "-m", "ccab.cli", "loader", "--topics", f"{topic}=http_request/1",
                             "--group", "m", "--metrics-port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        body = ""
        for _ in range(60):
            time.sleep(0.5)
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
            if 'ccab_loader_rows_inserted_total{table="http_requests"} 100.0' in body:
                break
        assert 'ccab_loader_rows_inserted_total{table="http_requests"} 100.0' in body
        assert "ccab_loader_batch_seconds_bucket" in body and "ccab_loader_lag_records" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0  # graceful stop on SIGTERM


def test_a_batch_that_keeps_failing_while_the_warehouse_answers_is_split_not_retried_for_ever(
        kafka_broker, fresh_topic, warehouse, monkeypatch):
    """Issue 29: a batch failed the same way every 2 s for ever (the topic stalled). Now, after
    3 failures while the warehouse answers, it is split down to the record that fails (a dead
    letter naming the error) and the rest loads. The failure is injected into the writer for
    the batches holding one record (an error no path expects); broker and warehouse are real."""
    import ccab.ingest.loader as loader_mod
    from ccab.ingest.batch import BatchWriter

    monkeypatch.setattr(loader_mod, "RETRY_S", 0.05)
    topic = fresh_topic("poison", partitions=1)
    poison = line(http_request(99_999, method="POISON"))
    _produce(kafka_broker, topic, [line(http_request(i)) for i in range(150)] + [poison]
             + [line(http_request(i)) for i in range(150, 300)])
    real_write = BatchWriter.write
    calls = []

    def write(self, schema, batch):
        calls.append(len(batch))
        if poison in batch.payloads:
            raise RuntimeError("unexpected failure on this record")
        return real_write(self, schema, batch)

    monkeypatch.setattr(BatchWriter, "write", write)
    metrics = LoaderMetrics()
    loader = Loader(warehouse, kafka_broker, {topic: SCHEMAS["http_request/1"]}, group=f"g-{topic}",
                    batch_rows=1000, batch_wait_s=0.5, metrics=metrics)
    totals = loader.run(max_idle_s=3)
    assert totals.inserted == 300 and totals.dead_total == 1, totals
    [(offset, reason)] = warehouse.query("SELECT _offset, reason FROM dead_letters FINAL").rows
    assert int(offset) == 150 and "unexpected failure on this record" in reason, reason
    assert warehouse.query("SELECT count() FROM http_requests WHERE method = 'POISON'").scalar() == 0
    # bounded: 3 tries of the whole batch, then one write per half on the way down to the record
    assert len(calls) <= 3 + 2 * 10, calls


class _HoldFirstInsert:
    """The real warehouse, except that the first insert into ``table`` waits for ``release``."""

    def __init__(self, wh, table: str):
        self.wh, self.table = wh, table
        self.holding = threading.Event()
        self.release = threading.Event()
        self.held = False

    def _hold(self, sql: str) -> None:
        if not self.held and self.table in sql:
            self.held = True
            self.holding.set()
            assert self.release.wait(120), "the test never released the first insert"

    def insert_raw(self, table, data, fmt="JSONEachRow", settings=None):
        self._hold(table)
        return self.wh.insert_raw(table, data, fmt, settings)

    def command_input(self, sql, data, fmt, structure, params=None, settings=None):
        self._hold(sql)
        return self.wh.command_input(sql, data, fmt, structure, params=params, settings=settings)

    def command(self, sql, params=None, settings=None):
        if sql.lstrip().upper().startswith("INSERT"):
            self._hold(sql)
        return self.wh.command(sql, params=params, settings=settings)

    def __getattr__(self, name):
        return getattr(self.wh, name)


def test_the_next_batch_is_consumed_while_one_is_written_and_offsets_follow_the_inserts(
        kafka_broker, fresh_topic, warehouse):
    """One batch in flight: while the first batch's insert is held, the loader has already consumed
    the second batch, and nothing is committed; once released, every record is in once and the
    group's committed offsets are the end of the topic."""
    from confluent_kafka import Consumer, TopicPartition

    topic = fresh_topic("tcp", partitions=1)
    _produce(kafka_broker, topic, [line(tcp_sample(i)) for i in range(3000)])
    group = f"g-{topic}"
    wh = _HoldFirstInsert(warehouse, "tcp_samples")
    loader = Loader(wh, kafka_broker, {topic: SCHEMAS["tcp_sample/1"]}, group=group, batch_rows=1000,
                    batch_wait_s=0.2)
    result: dict = {}
    runner = threading.Thread(target=lambda: result.setdefault("totals", loader.run(max_idle_s=3)), daemon=True)
    runner.start()
    assert wh.holding.wait(120), "the loader never inserted"

    def position() -> int:  # the next offset the loader's consumer hands out: what it has consumed
        return loader.consumer.position([TopicPartition(topic, 0)])[0].offset

    probe = Consumer({"bootstrap.servers": kafka_broker, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 120  # waiting for an event, not timing it
        while position() < 2000:  # the second batch (offsets 1000-1999) taken while the first is held
            assert time.monotonic() < deadline, "the loader did not consume the next batch while one was written"
            time.sleep(0.05)
        assert [tp.offset for tp in probe.committed([TopicPartition(topic, 0)], timeout=30)] == [-1001]  # nothing yet
        wh.release.set()
        runner.join(120)
        assert not runner.is_alive()
        assert result["totals"].inserted == 3000
        assert warehouse.query("SELECT count(), uniqExact(_offset) FROM tcp_samples").rows[0] == (3000, 3000)
        assert [tp.offset for tp in probe.committed([TopicPartition(topic, 0)], timeout=30)] == [3000]
    finally:
        wh.release.set()
        probe.close()
