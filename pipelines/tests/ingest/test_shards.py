"""The loader on a shard layout: several shard databases in one real (embedded) ClickHouse engine
and a real Kafka broker. What this does NOT test (no ClickHouse server can run here):
Replicated engines, Keeper/ZooKeeper, Distributed reads or inserts, one server per shard."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from ccab.base import schema as migrate
from ccab.base.contracts import SCHEMAS
from ccab.base.warehouse import ChdbWarehouse, close_all, connect_shards, shard_database
from ccab.ingest.batch import Batch
from ccab.ingest.loader import Loader, load_files
from ccab.ingest.shards import resume_offset, split
from factories import http_request, line, tcp_sample
from test_loader_kafka import _produce, _spawn_loader

#: a cluster's layout (3 shard databases, every shard migrated and loaded) end to end: the system tier
pytestmark = pytest.mark.system

SHARDS = 3


def open_shards(path, n: int = SHARDS) -> list:
    root = ChdbWarehouse(path, shard_database("ccab", 0))
    shards = [root] + [root.on_database(shard_database("ccab", k)) for k in range(1, n)]
    for wh in shards:
        migrate.migrate(wh, log=lambda _m: None)
    return shards


@pytest.fixture
def shards(tmp_path):
    whs = open_shards(tmp_path / "warehouse")
    try:
        yield whs
    finally:
        close_all(whs)


def per_shard(shards, sql: str) -> list[tuple]:
    return [wh.query(sql).rows[0] for wh in shards]


def misplaced(shards, table: str) -> int:
    """Rows on a shard other than the one the Distributed tables' key names."""
    n = len(shards)
    return sum(int(wh.query(f"SELECT countIf(cityHash64(host) % {n} != {k}) FROM {table}").scalar())
               for k, wh in enumerate(shards))


# --------------------------------------------------------------------------- pure rule


def test_resume_at_the_least_advanced_shard_or_the_committed_offset():
    assert resume_offset(-1001, [None, None]) is None  # nothing known: Kafka's reset policy
    assert resume_offset(-1001, [500, 320, 410]) == 320  # a crash between shard inserts
    assert resume_offset(-1001, [500, None]) is None  # a shard that holds nothing: re-read all
    assert resume_offset(400, [500, 320]) == 400  # committed: everything below is on every shard
    assert resume_offset(300, [500, 320]) == 320


def test_split_drops_rows_their_own_shard_already_holds():
    batch = Batch("t", [b"a", b"b", b"c", b"d", b"e"], [0, 0, 0, 1, 1], [10, 11, 12, 5, 6])
    parts = split(batch, [0, 1, 0, 1, 1], {(0, 0): 11, (1, 0): 12, (1, 1): 6}, 2)
    assert (parts[0].payloads, parts[0].offsets) == ([b"c"], [12])  # offset 10 is on shard 0 already
    assert (parts[1].payloads, parts[1].partitions, parts[1].offsets) == ([b"e"], [1], [6])


# --------------------------------------------------------------------------- real engine


def test_files_are_split_by_the_distributed_tables_key(shards, tmp_path):
    recs = [tcp_sample(i, host=f"edge-{i % 40:02d}") for i in range(3000)]
    recs += [http_request(i, host=f"edge-{i % 40:02d}") for i in range(2000)]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(line(r) for r in recs) + b"\n")
    report = load_files(shards[0], [path], batch_rows=700, shards=shards)
    assert report.inserted == {"tcp_samples": 3000, "http_requests": 2000} and not report.dead
    counts = per_shard(shards, "SELECT count() FROM tcp_samples")
    assert sum(c for (c,) in counts) == 3000 and all(c > 0 for (c,) in counts)
    assert misplaced(shards, "tcp_samples") == 0 and misplaced(shards, "http_requests") == 0
    # every host on exactly one shard (what makes per-shard rollups exact)
    hosts = [set(r[0] for r in wh.query("SELECT DISTINCT host FROM http_requests").rows) for wh in shards]
    assert sum(len(h) for h in hosts) == len(set().union(*hosts)) == 40
    assert load_files(shards[0], [path], batch_rows=700, shards=shards).inserted  # same file again:
    assert sum(c for (c,) in per_shard(shards, "SELECT count() FROM tcp_samples")) == 3000  # dedup tokens


@pytest.mark.kafka
def test_a_crash_between_shard_inserts_loses_and_doubles_nothing(kafka_broker, fresh_topic, shards):
    """Deterministic version of the SIGKILL test: the loader dies after the first shard's part of
    a batch is in and before the next one; a new consumer group (nothing committed) resumes from
    the shards alone and ends with every record exactly once."""
    topic = fresh_topic("shard-crash", partitions=2)
    n = 6000
    _produce(kafka_broker, topic, [line(tcp_sample(i, host=f"edge-{i % 30:02d}")) for i in range(n)])
    schema = {topic: SCHEMAS["tcp_sample/1"]}
    first = Loader(shards[0], kafka_broker, schema, group=f"a-{topic}", batch_rows=1500, batch_wait_s=0.2,
                   shards=shards)
    real_write = first.shard_writers[1].write
    calls = {"n": 0}

    def dies_on_the_third_batch(s, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("simulated crash between shard 0 and shard 1")
        return real_write(s, batch)

    first.shard_writers[1].write = dies_on_the_third_batch
    with pytest.raises(KeyboardInterrupt):
        first.run(max_idle_s=3)
    partial = [c for (c,) in per_shard(shards, "SELECT count() FROM tcp_samples")]
    assert 0 < sum(partial) < n
    second = Loader(shards[0], kafka_broker, schema, group=f"b-{topic}", batch_rows=1100, batch_wait_s=0.2,
                    shards=shards)
    second.run(max_idle_s=3)
    rows = per_shard(shards, f"SELECT count(), uniqExact(_partition, _offset) FROM tcp_samples WHERE _topic = '{topic}'")
    assert sum(r[0] for r in rows) == sum(r[1] for r in rows) == n
    assert misplaced(shards, "tcp_samples") == 0


@pytest.mark.slow
def test_records_exactly_once_across_shards_through_sigkills(kafka_broker, fresh_topic, tmp_path, local_warehouse,
                                                             monkeypatch):
    """Produce 300,000 records while a loader on 3 shard databases is SIGKILLed 10 times at
    random moments (often between two shards' inserts of one batch) and restarted with other
    batch sizes; afterwards every record is on its shard exactly once."""
    http_topic = fresh_topic("s-http", partitions=4)
    tcp_topic = fresh_topic("s-tcp", partitions=4)
    n_http, n_tcp = 240_000, 60_000
    monkeypatch.setenv("CCAB_CLICKHOUSE_SHARDS", str(SHARDS))
    env = dict(os.environ)  # the test's data dir, served by its warehouse service (local_warehouse)
    close_all(connect_shards())

    http_lines = (line(http_request(i, conn_serial=i, host=f"edge-{i % 64:02d}")) for i in range(n_http))
    tcp_lines = (line(tcp_sample(i, host=f"edge-{i % 64:02d}")) for i in range(n_tcp))
    produced: dict[str, int] = {}
    producer = threading.Thread(target=lambda: produced.update(
        http=_produce(kafka_broker, http_topic, http_lines), tcp=_produce(kafka_broker, tcp_topic, tcp_lines)))
    producer.start()

    topics = f"{http_topic}=http_request/1,{tcp_topic}=tcp_sample/1"
    rng = random.Random(20261126)
    for _ in range(10):
        proc = _spawn_loader(env, topics, "shards-exactly-once", batch_rows=rng.choice([3000, 7000, 13000, 20000]))
        time.sleep(rng.uniform(0.5, 3.5))
        if proc.poll() is not None:
            pytest.fail(f"loader exited by itself: {proc.stderr.read().decode()[-2000:]}")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    producer.join()
    assert produced == {"http": n_http, "tcp": n_tcp}

    final = _spawn_loader(env, topics, "shards-exactly-once", extra=("--exit-when-idle", "8"))
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err.decode()[-3000:]

    whs = connect_shards()
    try:
        http = per_shard(whs, f"SELECT count(), uniqExact(_partition, _offset) FROM http_requests WHERE _topic = '{http_topic}'")
        tcp = per_shard(whs, f"SELECT count(), uniqExact(_partition, _offset) FROM tcp_samples WHERE _topic = '{tcp_topic}'")
        dead = sum(int(wh.query("SELECT count() FROM dead_letters").scalar()) for wh in whs)
        wrong = misplaced(whs, "http_requests") + misplaced(whs, "tcp_samples")
    finally:
        close_all(whs)
    # a row is on one shard only (its host's), so per-shard unique positions add up to the total
    assert sum(c for c, _ in http) == sum(u for _, u in http) == n_http
    assert sum(c for c, _ in tcp) == sum(u for _, u in tcp) == n_tcp
    assert all(c > 0 for c, _ in http) and dead == 0 and wrong == 0
