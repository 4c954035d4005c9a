"""Tests of ccab_workshop.kafka.broker: pure rendering (fast), then a real broker's whole life (``kafka``)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ccab import cli
from ccab.cli import kafka as kafka_cli
from ccab_workshop.kafka import broker
from ccab.kafka import topics as kafka_topics
from ccab.kafka.topics import TOPICS, KafkaLocalError


def _properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


# --- pure parts ----------------------------------------------------------------------------------


def test_server_properties_single_node_kraft_on_loopback(tmp_path: Path) -> None:
    props = _properties(broker.render_server_properties(29092, 29093, tmp_path / "data"))

    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:29093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29092,CONTROLLER://127.0.0.1:29093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"
    assert props["num.partitions"] == "6"
    assert "0.0.0.0" not in broker.render_server_properties(29092, 29093, tmp_path)


def test_parse_listener_port_reads_back_the_client_port(tmp_path: Path) -> None:
    text = broker.render_server_properties(31000, 31001, tmp_path)
    assert broker.parse_listener_port(text) == 31000
    assert broker.parse_listener_port("# nothing here\n") is None


def test_pom_lists_kafka_tools_and_an_slf4j_binding() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(broker.render_pom())
    deps = {
        (d.findtext("m:groupId", namespaces=ns), d.findtext("m:artifactId", namespaces=ns)):
            d.findtext("m:version", namespaces=ns)
        for d in root.findall("m:dependencies/m:dependency", ns)
    }
    assert deps[("org.apache.kafka", "kafka_2.13")] == "4.1.1"
    assert deps[("org.apache.kafka", "kafka-tools")] == "4.1.1"
    assert ("org.apache.logging.log4j", "log4j-slf4j-impl") in deps
    assert root.findtext("m:packaging", namespaces=ns) == "pom"


def test_log4j_config_logs_to_a_file_only() -> None:
    text = broker.render_log4j_config()
    assert "${sys:ccab.kafka.log.file}" in text
    assert "Console" not in text


def test_topics_match_the_contracts() -> None:
    assert set(TOPICS) == {"ccab.tcp.v1", "ccab.tcp_conn.v1", "ccab.http.v1", "ccab.assignments.v1", "ccab.agent_status.v1",
                           "ccab.prefix_sets.v1"}
    assert TOPICS["ccab.tcp.v1"].partitions == 6
    assert TOPICS["ccab.http.v1"].partitions == 6
    assert TOPICS["ccab.agent_status.v1"].partitions == 3
    assert TOPICS["ccab.assignments.v1"].config["cleanup.policy"] == "compact"
    assert TOPICS["ccab.prefix_sets.v1"].config["cleanup.policy"] == "compact"  # every chunk of every version kept
    for name in ("ccab.tcp.v1", "ccab.http.v1", "ccab.agent_status.v1"):
        assert TOPICS[name].config["retention.ms"] == str(7 * 24 * 3600 * 1000)


def test_cluster_id_is_16_bytes_urlsafe_base64() -> None:
    for _ in range(100):
        cluster_id = broker.new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_cli_registers_kafka_subcommands() -> None:
    parser = argparse.ArgumentParser()
    kafka_cli.register(parser.add_subparsers())
    args = parser.parse_args(["kafka", "up", "--port", "30000", "--timeout", "5"])
    assert (args.port, args.timeout_s) == (30000, 5.0)
    for action in ("install", "up", "down", "status"):
        assert callable(parser.parse_args(["kafka", action]).func)


# --- I/O without a broker ------------------------------------------------------------------------


@pytest.fixture
def local_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An embedded-Kafka environment with its own data dir and a free port pair."""
    monkeypatch.delenv("CCAB_KAFKA_BROKERS", raising=False)
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CCAB_KAFKA_PORT", str(broker.find_free_port_pair()))
    return tmp_path / "data"


def test_down_without_broker_is_a_no_op(local_env: Path) -> None:
    assert broker.down() is False
    assert broker.is_running() is False


def test_down_never_signals_a_process_that_is_not_our_broker(local_env: Path) -> None:
    pid_file = local_env / "kafka" / "broker.pid"
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(f"{os.getpid()}\n")  # this pytest process: alive, but not kafka.Kafka

    assert broker.down() is False  # we are still here
    assert not pid_file.exists()        # the stale pid file is gone


def test_install_without_maven_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CCAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn here
    with pytest.raises(KafkaLocalError, match="mvn not found"):
        broker.install(progress=lambda _m: None)


def test_status_exits_1_when_not_running(local_env: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["kafka", "status"]) == 1
    assert "not running" in capsys.readouterr().out


# --- a real broker -------------------------------------------------------------------------------


def _round_trip(bootstrap: str, topic: str) -> None:
    """Produce one zstd-compressed record and consume it back through a consumer group."""
    from confluent_kafka import Consumer, Producer

    value = json.dumps({"schema": "test/1", "id": uuid.uuid4().hex}).encode()
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "acks": "all"})
    producer.produce(topic, key=b"host-1", value=value, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"test-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            if message.value() == value:
                assert message.key() == b"host-1"
                return
        pytest.fail(f"the produced record did not come back from {topic} within 60 s")
    finally:
        consumer.close()


def _topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # keep it alive until the result is in
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()}


@pytest.mark.kafka
def test_broker_lifecycle(local_env: Path, capsys: pytest.CaptureFixture) -> None:
    port = int(os.environ["CCAB_KAFKA_PORT"])
    bootstrap = f"127.0.0.1:{port}"
    try:
        # up, through the CLI
        assert cli.main(["kafka", "up", "--timeout", "120"]) == 0
        assert broker.is_running()
        pid = broker.broker_pid()
        assert pid is not None and (local_env / "kafka" / "broker.pid").exists()
        assert (local_env / "kafka" / "data" / "meta.properties").exists()

        # the topics, with their partition counts and configs
        partitions = kafka_topics.topic_partitions(bootstrap)
        for name, spec in TOPICS.items():
            assert partitions[name] == spec.partitions, name
        assert _topic_config(bootstrap, "ccab.assignments.v1")["cleanup.policy"] == "compact"
        tcp_config = _topic_config(bootstrap, "ccab.tcp.v1")
        assert tcp_config["compression.type"] == "producer"
        assert tcp_config["retention.ms"] == str(7 * 24 * 3600 * 1000)

        _round_trip(bootstrap, "ccab.tcp.v1")

        # up again: same broker, nothing created
        capsys.readouterr()
        assert broker.up(timeout_s=30) == bootstrap
        assert broker.broker_pid() == pid
        assert "already running" in capsys.readouterr().out
        assert kafka_topics.ensure_topics(bootstrap) == []

        # status
        assert cli.main(["kafka", "status"]) == 0
        out = capsys.readouterr().out
        assert "reachable: yes" in out and "ccab.assignments.v1" in out

        # down, through the CLI; then down again is fine
        assert cli.main(["kafka", "down"]) == 0
        assert not broker.is_running()
        assert not (local_env / "kafka" / "broker.pid").exists()
        assert not Path(f"/proc/{pid}").exists() or b"kafka.Kafka" not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert broker.down() is False
        assert cli.main(["kafka", "status"]) == 1
    finally:
        broker.down(progress=lambda _m: None)


def test_session_broker_and_fresh_topics(kafka_broker: str, fresh_topic) -> None:
    partitions = kafka_topics.topic_partitions(kafka_broker)
    assert all(name in partitions for name in TOPICS)

    first, second = fresh_topic("roundtrip", partitions=4), fresh_topic("roundtrip", partitions=1)
    assert first != second
    partitions = kafka_topics.topic_partitions(kafka_broker)
    assert (partitions[first], partitions[second]) == (4, 1)
    _round_trip(kafka_broker, first)
