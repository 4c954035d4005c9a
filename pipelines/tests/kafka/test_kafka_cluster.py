"""A real 3-broker KRaft cluster (``ccab_workshop.kafka.cluster``, the same jars as the single broker)
losing a broker under load.

- ``test_cluster_topics_are_replicated``: ``ccab kafka up --brokers 3`` creates the contract
  topics with 3 replicas and ``min.insync.replicas=2``.
- ``test_leader_loss_while_collector_produces_and_loader_consumes``: the real collector tails a
  growing log into the cluster and the real loader consumes into chdb at the same time; the broker
  leading the partition the collector writes to is SIGKILLed, later restarted. Every line is in
  the warehouse exactly once.
- ``test_agent_and_controller_through_a_broker_loss``: real agents (network namespaces, root) and
  the real controller CLI keep working while the broker leading the assignments partition is dead,
  and after it comes back.

One cluster for the module (three JVMs with 256 MiB heaps start in ~20 s here); marked ``kafka``
and ``slow``; ``make test`` runs it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest
from paths import REPO, VECTORS

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CCAB = [sys.executable, "-m", "ccab.cli"]


def wait_until(what: str, cond, timeout: float = 60, every: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A 3-node cluster started the way ``ccab kafka up --brokers 3`` starts it."""
    if not shutil.which("java"):
        pytest.skip("java is not installed: cannot run Kafka")
    from ccab_workshop.kafka import cluster as kafka_cluster

    env = pytest.MonkeyPatch()
    env.delenv("CCAB_KAFKA_BROKERS", raising=False)
    data = tmp_path_factory.mktemp("kafka-cluster")
    env.setenv("CCAB_DATA_DIR", str(data))
    port = _free_port_run(6)
    env.setenv("CCAB_KAFKA_PORT", str(port))
    try:
        p = subprocess.run([*CCAB, "kafka", "up", "--brokers", "3"], capture_output=True, text=True, cwd=REPO,
                           timeout=300, env=dict(os.environ))
        assert p.returncode == 0, p.stdout + p.stderr
        c = kafka_cluster.configured()
        assert c is not None and len(c.nodes) == 3
        yield c
    finally:
        try:
            subprocess.run([*CCAB, "kafka", "down"], capture_output=True, text=True, cwd=REPO, timeout=120,
                           env=dict(os.environ))
        finally:
            env.undo()


def _free_port_run(n: int) -> int:
    from ccab_workshop.kafka.broker import _port_is_free, find_free_port_pair

    for _ in range(50):
        p = find_free_port_pair()
        if p + n < 65535 and all(_port_is_free(p + i) for i in range(n)):
            return p
    raise AssertionError("no run of free ports")


def _topic(cluster, prefix: str, partitions: int, config: dict | None = None) -> str:
    from ccab.kafka.topics import TopicSpec, ensure_topics

    name = f"{prefix}.{uuid.uuid4().hex[:10]}"
    ensure_topics(cluster.bootstrap, {name: TopicSpec(partitions=partitions, config=config or {})})
    return name


def _restart(cluster, node_id: int) -> None:
    cluster.start_node(node_id)
    cluster.wait_brokers(3, timeout_s=120)


# --- topics ----------------------------------------------------------------------------------------


def test_cluster_topics_are_replicated(cluster):
    from ccab.kafka.topics import TOPICS, admin_client
    from confluent_kafka.admin import ConfigResource

    admin = admin_client(cluster.bootstrap)
    md = admin.list_topics(timeout=10)
    assert sorted(md.brokers) == [1, 2, 3]
    for name in TOPICS:
        parts = md.topics[name].partitions
        assert parts and all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in parts.values()), name
    res = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in TOPICS]
    for name, fut in zip(TOPICS, admin.describe_configs(res).values()):
        assert fut.result(timeout=30)["min.insync.replicas"].value == "2", name
    p = subprocess.run([*CCAB, "kafka", "status"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert p.returncode == 0 and "3 running" in p.stdout, p.stdout + p.stderr


# --- collector -> cluster -> loader, leader killed -------------------------------------------------


class LineWriter(threading.Thread):
    """Appends nginx JSON lines (unique connection ids) at a steady rate."""

    def __init__(self, path: Path, per_s: int = 1000):
        super().__init__(daemon=True)
        self.path, self.per_s = path, per_s
        self.n = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        with open(self.path, "a", buffering=1) as f:
            while not self.stop_event.is_set():
                now = time.time()
                for _ in range(self.per_s // 10):
                    f.write(json.dumps({
                        "msec": round(now, 3), "remote_addr": "192.0.2.10", "connection": self.n,
                        "connection_requests": 1, "request_method": "GET", "status": 200, "bytes_sent": 1200,
                        "body_bytes_sent": 1000, "request_time": 0.004, "tcpinfo_rtt": "900",
                        "tcpinfo_rttvar": "300", "tcpinfo_snd_cwnd": "10", "tcpinfo_rcv_space": "14600"}) + "\n")
                    self.n += 1
                time.sleep(0.1)

    def finish(self) -> int:
        self.stop_event.set()
        self.join(10)
        return self.n


def _metrics(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _sum(m: dict[str, float], name: str) -> float:
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def test_leader_loss_while_collector_produces_and_loader_consumes(cluster, collector_bin, warehouse, tmp_path):
    from ccab.base.contracts import SCHEMAS
    from ccab.ingest.loader import Loader
    from ccab_workshop.lab.edge import free_port

    http_topic = _topic(cluster, "cl-http", 3)
    tcp_topic = _topic(cluster, "cl-tcp", 1)
    log = tmp_path / "access.log"
    log.touch()
    metrics_port = free_port()
    cmd = [str(collector_bin), "run", "--metrics-addr", f"127.0.0.1:{metrics_port}",
           "--kafka-brokers", cluster.bootstrap, "--topic-http", http_topic, "--topic-tcp", tcp_topic,
           "--state-dir", str(tmp_path / "state"), "--nginx-paths", str(log), "--nginx-format", "json",
           "--nginx-checkpoint-interval", "1s", "--host", "edge-cluster", "--pop", "lab1",
           "--rollout-state-file", str(tmp_path / "none.json"), "--kafka-shutdown-timeout", "10s"]
    col_log = tmp_path / "collector.log"
    col = subprocess.Popen(cmd, stdout=col_log.open("ab"), stderr=subprocess.STDOUT)
    loader = Loader(warehouse, cluster.bootstrap, {http_topic: SCHEMAS["http_request/1"]}, group=f"g-{http_topic}",
                    batch_wait_s=0.2)
    loaded: list = []
    loader_thread = threading.Thread(target=lambda: loaded.append(loader.run()), daemon=True)
    writer = LineWriter(log)

    def in_wh() -> int:
        return warehouse.query(f"SELECT count() FROM http_requests WHERE _topic = '{http_topic}'").rows[0][0]

    try:
        wait_until("collector metrics", lambda: _try(lambda: _metrics(metrics_port)) is not None, timeout=30)
        loader_thread.start()
        writer.start()
        wait_until("rows flowing into the warehouse", lambda: in_wh() > 500, timeout=60)
        # the collector keys every record by its host: one partition holds them all
        ends = _end_offsets(cluster.bootstrap, http_topic)
        partition = max(ends, key=ends.get)
        victim = cluster.leader(http_topic, partition)
        assert victim in (1, 2, 3)
        before = in_wh()
        cluster.kill_node(victim, signal.SIGKILL)
        wait_until("a new leader", lambda: cluster.leader(http_topic, partition) not in (-1, victim), timeout=60)
        wait_until("rows keep flowing with a broker dead", lambda: in_wh() > before + 2000, timeout=90)
        _restart(cluster, victim)
        wait_until("the restarted broker back in sync",
                   lambda: sorted(cluster.in_sync(http_topic, partition)) == [1, 2, 3], timeout=90)
        time.sleep(2)
        n = writer.finish()
        wait_until("the collector delivered everything", lambda: (lambda m: m.get("ccab_collector_inflight_records") == 0
                   and m.get("ccab_collector_spool_mode") == 0
                   and m.get("ccab_collector_checkpoint_lag_bytes") == 0)(_metrics(metrics_port)), timeout=90)
        m = _metrics(metrics_port)
        wait_until("the loader caught up", lambda: in_wh() >= n, timeout=90)
        time.sleep(2)  # a duplicate would arrive after the last original
    finally:
        writer.stop_event.set()
        loader.stop()
        loader_thread.join(60)
        if col.poll() is None:
            col.send_signal(signal.SIGTERM)
            col.wait(60)
    assert col.returncode == 0, col_log.read_text()[-3000:]
    rows = warehouse.query(f"SELECT conn_serial FROM http_requests WHERE _topic = '{http_topic}'").rows
    got = [r[0] for r in rows]
    print(f"\n{n} lines; broker {victim} (leader of partition {partition}) SIGKILLed and restarted; "
          f"{len(got)} rows, {len(set(got))} distinct")
    assert loaded and loaded[0].dead_total == 0
    assert len(got) == n and set(got) == set(range(n)), \
        f"{n} lines, {len(got)} rows, {len(set(got))} distinct: {n - len(set(got))} lost, {len(got) - len(set(got))} twice"
    assert _sum(m, "ccab_collector_records_dropped_total") == 0


def _try(fn):
    try:
        return fn()
    except OSError:
        return None


def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


# --- agent and controller through a broker loss ----------------------------------------------------


def test_agent_and_controller_through_a_broker_loss(cluster, tmp_path_factory, tmp_path, warehouse_service):
    import yaml
    from agents import Agent, agent_args, build_agent, host_namespaces, ns_cc, stop_all
    from ccab.rollout.publish import read_topic

    agent_bin = build_agent(tmp_path_factory)
    a_topic = _topic(cluster, "cl-assign", 1, {"cleanup.policy": "compact"})
    s_topic = _topic(cluster, "cl-status", 3)
    env = dict(os.environ, CCAB_DATA_DIR=str(tmp_path / "data"), CCAB_KAFKA_BROKERS=cluster.bootstrap,
               CCAB_ROLLOUT_KEY=str(VECTORS / "test_ed25519_seed.hex"),
               CCAB_CLICKHOUSE_URL=f"{warehouse_service}/t_{uuid.uuid4().hex[:12]}")

    def ccab(*args: str) -> str:
        p = subprocess.run([*CCAB, *args], env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
        assert p.returncode == 0, f"ccab {' '.join(args)} -> {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        return p.stdout

    tag = uuid.uuid4().hex[:5]
    rid = f"cl-{tag}"
    with host_namespaces(*(f"kc{tag}-{i}" for i in range(4))) as hosts:
        plan = tmp_path / "plan.yaml"
        plan.write_text(yaml.safe_dump({
            "rollout_id": rid, "pops": ["lab1"], "inventory": {"hosts": {"lab1": hosts}},
            "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr", "cc": "bbr", "bbr_version": 1}],
            "control_arm": "control", "design": {"seed": 11},
            "stages": [{"name": "half", "hosts": 2, "min_duration_minutes": 60, "looks": 1, "min_applied": 1.0}],
            "limits": {"max_hosts_per_pop_per_step": 2, "min_control_hosts": 2},
            "guardrails": [{"metric": "rtt_us", "statistic": "p50", "margin": 0.10, "severity": "page"}],
            "policy": {"rollback": "rollback_all", "halt": "rollback_all"},
        }))
        agents = [Agent(agent_bin, agent_args(cluster.bootstrap, a_topic, s_topic, h, h, tmp_path / f"{h}.json", "1s"),
                        tmp_path / f"{h}.log") for h in hosts]
        kt = ["--assignments-topic", a_topic, "--status-topic", s_topic, "--kafka-timeout", "30"]
        try:
            for a in agents:
                a.start()
            ccab("rollout", "start", str(plan), *kt)
            wait_until("two hosts on bbr", lambda: sorted(ns_cc(h) for h in hosts) == ["bbr", "bbr", "cubic", "cubic"],
                       timeout=60)
            victim = cluster.leader(a_topic, 0)
            cluster.kill_node(victim, signal.SIGKILL)
            wait_until("a new assignments leader", lambda: cluster.leader(a_topic, 0) not in (-1, victim), timeout=60)
            # with a broker dead: the controller publishes, the agents apply it and report
            ccab("rollout", "halt", rid, "--arm", "bbr", "--reason", "cluster test", *kt)
            wait_until("every host back on cubic (broker dead)", lambda: {ns_cc(h) for h in hosts} == {"cubic"},
                       timeout=90)
            _restart(cluster, victim)
            wait_until("assignments replicated again", lambda: sorted(cluster.in_sync(a_topic, 0)) == [1, 2, 3],
                       timeout=90)
            ccab("rollout", "step", rid, *kt)  # through the restarted cluster: nothing to do, nothing twice
            statuses_before = len(read_topic(cluster.bootstrap, s_topic, 30))
            time.sleep(3)  # 1 s heartbeats: each agent reports again through the restarted cluster
            statuses_after = len(read_topic(cluster.bootstrap, s_topic, 30))
            assert {ns_cc(h) for h in hosts} == {"cubic"}
        finally:
            stop_all(agents)
    records = [json.loads(v) for _k, v in read_topic(cluster.bootstrap, a_topic, 30)]
    assert all(n == 1 for n in Counter((r["host"], r["generation"]) for r in records).values()), records
    assert len(records) == len(hosts) + 2  # 4 enrolments, then the 2 treated hosts back to control
    assert statuses_after > statuses_before


# --- pure parts and the CLI's refusals (no JVM) ------------------------------------------------------


def test_cluster_properties_and_replication(tmp_path):
    from ccab_workshop.kafka.cluster import Cluster, render_cluster_properties, replication_for
    from ccab.kafka.topics import replication_config

    c = Cluster(tmp_path, 3, 20000)
    assert c.bootstrap == "127.0.0.1:20000,127.0.0.1:20002,127.0.0.1:20004"
    text = render_cluster_properties(c.node(2), c.nodes)
    assert "node.id=2\n" in text
    assert "controller.quorum.voters=1@127.0.0.1:20001,2@127.0.0.1:20003,3@127.0.0.1:20005\n" in text
    assert "listeners=PLAINTEXT://127.0.0.1:20002,CONTROLLER://127.0.0.1:20003\n" in text
    assert "default.replication.factor=3\n" in text and "min.insync.replicas=2\n" in text
    assert "unclean.leader.election.enable=false" in text
    assert replication_for(1) == (1, 1) and replication_for(3) == (3, 2) and replication_for(5) == (3, 2)
    assert replication_config(1) == (-1, {}) and replication_config(3) == (3, {"min.insync.replicas": "2"})


def test_cli_refuses_zero_brokers(tmp_path):
    env = dict(os.environ, CCAB_DATA_DIR=str(tmp_path))
    env.pop("CCAB_KAFKA_BROKERS", None)
    p = subprocess.run([*CCAB, "kafka", "up", "--brokers", "0"], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=120)
    assert p.returncode == 1 and "--brokers must be at least 1" in p.stderr and "Traceback" not in p.stderr, p.stderr
