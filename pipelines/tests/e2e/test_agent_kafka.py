"""The real ``ccab-agent`` binary against a real broker, with a network namespace as the host.

Assignments are signed here as the Python controller signs them (``cryptography`` Ed25519 over
``ccab.base.contracts.canonical_json``) with the test-only key of the shared vectors, published to a
fresh compacted topic keyed by host; the test asserts that the namespace's
``net.ipv4.tcp_congestion_control`` flipped and that the agent's ``agent_status/1`` arrived.
It also kills and restarts the agent mid-stream, and stops the broker while the agent runs.

Needs root (network namespaces, sysctl), ``ip`` and Go (the binary is built from this tree);
skipped otherwise.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest
from agents import VECTORS, Agent, agent_args, build_agent, host_namespaces, ns_cc
from ccab.base.contracts import canonical_json

HOST = "edge-pyagent-1"
DEADLINE_S = 60.0

pytestmark = pytest.mark.kafka


# --- helpers ---------------------------------------------------------------------------------------


def sign(record: dict) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = bytes.fromhex((VECTORS / "test_ed25519_seed.hex").read_text().strip())
    key = Ed25519PrivateKey.from_private_bytes(seed)
    signed = dict(record, signature=base64.b64encode(key.sign(canonical_json(record))).decode())
    return json.dumps(signed).encode()


def assignment(generation: int, cc: str, qdisc: str | None = None) -> bytes:
    return sign({"schema": "assignment/1", "rollout_id": "py-lab", "generation": generation, "pop": "lab1",
                 "host": HOST, "arm": f"arm-{cc}", "cc": cc, "qdisc": qdisc,
                 "issued_at_ms": int(time.time() * 1000)})


def publish(bootstrap: str, topic: str, value: bytes) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, key=HOST.encode(), value=value)
    assert p.flush(30) == 0, "assignment not delivered"


def read_all(bootstrap: str, topic: str) -> list[dict]:
    """Every record of topic, read by manual assignment up to the high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=10)
        parts = list(meta.topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out: list[dict] = []
        pos = {p: 0 for p in parts}
        until = time.monotonic() + 20
        while any(pos[p] < ends[p] for p in parts) and time.monotonic() < until:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            pos[m.partition()] = m.offset() + 1
            out.append(json.loads(m.value()))
        return out
    finally:
        c.close()


def wait_status(bootstrap: str, topic: str, what: str, match: Callable[[dict], bool]) -> dict:
    deadline = time.monotonic() + DEADLINE_S
    seen: list[dict] = []
    while time.monotonic() < deadline:
        try:
            seen = read_all(bootstrap, topic)
        except Exception:  # broker restarting: keep polling until the deadline
            seen = []
        for s in seen:
            if match(s):
                return s
        time.sleep(0.3)
    raise AssertionError(f"no agent_status {what} within {DEADLINE_S} s; saw {seen[-5:]}")


def wait_for(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached within {DEADLINE_S} s")


def applied(gen: int) -> Callable[[dict], bool]:
    return lambda s: (s.get("schema") == "agent_status/1" and s["host"] == HOST and s["state"] == "applied"
                      and s["generation"] == gen)


# --- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_bin(tmp_path_factory) -> Path:
    """ccab-agent, built from this tree."""
    return build_agent(tmp_path_factory)


@pytest.fixture
def host_ns():
    """A namespace standing for a host, running cubic."""
    with host_namespaces(f"ccab-pyag-{uuid.uuid4().hex[:6]}") as (name,):
        yield name


# --- the test --------------------------------------------------------------------------------------


def test_agent_applies_from_kafka_survives_restart_and_kafka_down(agent_bin, host_ns, kafka_broker, fresh_topic,
                                                                   tmp_path):
    asg_topic = fresh_topic("ccab.assignments", partitions=3, config={"cleanup.policy": "compact"})
    st_topic = fresh_topic("ccab.agent_status", partitions=3)
    state_file = tmp_path / "state.json"
    # --bpf-cc=false: an algorithm the kernel lacks stays unavailable (step 2), not loaded as BPF
    agent = Agent(agent_bin, [*agent_args(kafka_broker, asg_topic, st_topic, HOST, host_ns, state_file, "500ms"),
                              "--bpf-cc=false"], tmp_path / "agent.log")
    assert ns_cc(host_ns) == "cubic"
    try:
        agent.start()
        # 1. A signed assignment flips the namespace to bbr and an applied status arrives.
        publish(kafka_broker, asg_topic, assignment(1, "bbr"))
        s = wait_status(kafka_broker, st_topic, "applied gen 1", applied(1))
        assert s["cc_effective"] == "bbr" and s["reason"] == "" and "bbr" in s["cc_available"]
        assert ns_cc(host_ns) == "bbr"
        assert json.loads(state_file.read_text())["generation"] == 1

        # 2. Unavailable and tampered assignments are refused; the namespace keeps bbr.
        publish(kafka_broker, asg_topic, assignment(2, "bbr2"))
        s = wait_status(kafka_broker, st_topic, "refused gen 2",
                        lambda s: s["state"] == "refused" and s["generation"] == 2)
        assert "not available" in s["reason"] and s["cc_effective"] == "bbr"
        tampered = json.loads(assignment(3, "reno"))
        tampered["cc"] = "cubic"
        publish(kafka_broker, asg_topic, json.dumps(tampered).encode())
        s = wait_status(kafka_broker, st_topic, "refused gen 3",
                        lambda s: s["state"] == "refused" and s["generation"] == 3)
        assert "forged or tampered" in s["reason"] and ns_cc(host_ns) == "bbr"

        # 3. Agent killed mid-stream; an assignment published while it is down is applied after
        #    the restart (it reads the compacted topic from the beginning, newest record wins).
        agent.kill()
        publish(kafka_broker, asg_topic, assignment(4, "reno"))
        publish(kafka_broker, asg_topic, assignment(5, "cubic"))
        agent.start()
        s = wait_status(kafka_broker, st_topic, "applied gen 5", applied(5))
        assert s["cc_effective"] == "cubic" and ns_cc(host_ns) == "cubic"
        assert not [x for x in read_all(kafka_broker, st_topic) if x["generation"] == 4 and x["state"] == "applied"], \
            "generation 4 was applied: on restart only the newest record should be"

        # 4. Kafka down while the agent runs: it keeps the applied algorithm and stays up; when
        #    the broker is back it resumes and applies the next assignment.
        if os.environ.get("CCAB_KAFKA_BROKERS"):
            return  # an external cluster is not ours to stop
        from ccab_workshop.kafka import broker

        broker.down(progress=lambda _m: None)
        try:
            for _ in range(10):  # the agent keeps running through several heartbeat intervals
                time.sleep(0.5)
                assert agent.proc is not None and agent.proc.poll() is None, "agent exited while Kafka was down"
                assert ns_cc(host_ns) == "cubic", "agent changed the algorithm while Kafka was down"
        finally:
            broker.up(timeout_s=120, progress=lambda _m: None)
        publish(kafka_broker, asg_topic, assignment(6, "bbr"))
        wait_status(kafka_broker, st_topic, "applied gen 6 after Kafka returned", applied(6))
        wait_for("namespace on bbr", lambda: ns_cc(host_ns) == "bbr")
        assert json.loads(state_file.read_text())["generation"] == 6
    finally:
        agent.stop()
        if (tmp_path / "agent.log").exists():
            print((tmp_path / "agent.log").read_text()[-4000:])
