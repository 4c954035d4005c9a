"""ccab sim output goes through the rest of the pipeline: the loader accepts every record into
the warehouse (ClickHouse-side validation, no dead letters), and the Kafka sink delivers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ccab.cli import main
from ccab_workshop.sim.generator import CONN_TOPIC, HTTP_TOPIC, TCP_TOPIC, iter_chunks, pool_context, records
from ccab_workshop.sim.scenario import load_scenario
from ccab_workshop.sim.sinks import KafkaSink
from ccab_workshop.sim.world import build_world


def test_generator_workers_are_never_forked_from_the_caller():
    """CI hung 15 minutes in the next test: its open chdb warehouse (threads) plus a pool of
    ``fork()``ed workers, one of which inherited a held lock and never finished. Workers come
    from a fork server instead; this pins that choice."""
    assert pool_context().get_start_method() in ("forkserver", "spawn")


def test_generated_records_load_without_dead_letters(warehouse, tmp_path: Path):
    # default --workers (2): the generator's pool runs beside this process's open warehouse
    from ccab.ingest.loader import load_files

    out = tmp_path / "sim"
    assert main(["sim", "tiny", "--out", str(out), "--no-progress", "--connections", "1500"]) == 0
    files = [out / f"{TCP_TOPIC}.jsonl", out / f"{CONN_TOPIC}.jsonl", out / f"{HTTP_TOPIC}.jsonl"]
    lines = {f.name: len(f.read_text().splitlines()) for f in files}
    report = load_files(warehouse, files)
    assert report.dead_total == 0, report.dead
    assert report.records == sum(lines.values())
    assert sum((report.inserted or {}).values()) == sum(lines.values())


def test_kafka_sink_delivers_every_record_keyed_by_host(kafka_broker: str, fresh_topic):
    from confluent_kafka import Consumer

    topics = {TCP_TOPIC: fresh_topic("sim-tcp"), CONN_TOPIC: fresh_topic("sim-conn"), HTTP_TOPIC: fresh_topic("sim-http")}
    sc = load_scenario("tiny")
    world = build_world(sc, total_connections=800)
    sink = KafkaSink(kafka_broker, topics=topics, linger_ms=5)
    expected: dict[str, int] = {TCP_TOPIC: 0, CONN_TOPIC: 0, HTTP_TOPIC: 0}
    for chunk in iter_chunks(world, workers=1):
        recs = list(records(world, chunk))
        for topic, _k, _v in recs:
            expected[topic] += 1
        sink.write(recs)
    sink.close()

    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": "sim-test", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(list(topics.values()))
    got = {t: 0 for t in topics.values()}
    hosts = set(world.hosts.names)
    try:
        idle = 0
        while sum(got.values()) < sum(expected.values()) and idle < 30:
            msgs = consumer.consume(10_000, timeout=1.0)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                assert m.error() is None
                assert m.key().decode() in hosts
                rec = json.loads(m.value())
                assert rec["host"] == m.key().decode()
                got[m.topic()] += 1
    finally:
        consumer.close()
    assert got == {topics[t]: n for t, n in expected.items()}


def test_kafka_sink_reports_undeliverable_records():
    sink = KafkaSink("127.0.0.1:9", flush_timeout_s=2.0, extra_config={"message.timeout.ms": 1000, "log_level": 0})
    sink.write([(TCP_TOPIC, b"edge-x", b"{}")])
    from ccab_workshop.sim.sinks import SinkError

    with pytest.raises(SinkError, match="failed|queued"):
        sink.close()
