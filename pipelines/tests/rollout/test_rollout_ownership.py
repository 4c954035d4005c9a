"""Rollout truth in one place (issue 28), through `ccab rollout` processes on a real broker:

- two deployments (two ``$CCAB_DATA_DIR``) on one Kafka cannot take the same host: the second
  `start` is refused naming the rollout whose signed record each host runs (it used to re-flip them);
- a ``state.json`` older than the topic shows for its rollout is refused by `step` (it used to be
  trusted), and a `rollback` takes the hosts' newest records from the topic and sends every host
  back to control (it used to publish for the hosts the old state knew and leave the others on bbr).

The agents are a stand-in that answers ``applied`` for every record on the assignments topic (the
real agents' tests: test_rollout_kafka.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from factories import base_plan
from paths import REPO, VECTORS


def _ccab(env, *args):
    return subprocess.run([sys.executable, "-m", "ccab.cli", *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def topics(fresh_topic):
    return (fresh_topic("ccab.assignments", partitions=1, config={"cleanup.policy": "compact"}),
            fresh_topic("ccab.agent_status", partitions=1))


def _env(data_dir: Path, kafka_broker: str) -> dict:
    env = dict(os.environ, CCAB_DATA_DIR=str(data_dir), CCAB_KAFKA_BROKERS=kafka_broker,
               CCAB_ROLLOUT_KEY=str(VECTORS / "test_ed25519_seed.hex"))
    for k in ("CCAB_CLICKHOUSE_URL", "CCAB_ALERT_WEBHOOK_URL"):
        env.pop(k, None)
    return env


def _newest(kafka_broker: str, topic: str) -> dict[str, dict]:
    from ccab.rollout.publish import read_assignments

    out: dict[str, dict] = {}
    for r in read_assignments(kafka_broker, topic, 20):
        if r["generation"] >= out.get(r["host"], {}).get("generation", -1):
            out[r["host"]] = r
    return out


def _agents_apply(kafka_broker: str, topics: tuple[str, str]) -> None:
    """Every host answers `applied` to its newest record (what an agent does)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kafka_broker})
    for h, r in _newest(kafka_broker, topics[0]).items():
        p.produce(topics[1], key=h.encode(), value=json.dumps(
            {"schema": "agent_status/1", "ts_ms": r["issued_at_ms"], "pop": r["pop"], "host": h, "kernel": "6.1",
             "rollout_id": r["rollout_id"], "arm": r["arm"], "generation": r["generation"], "state": "applied",
             "cc_effective": r["cc"], "cc_available": ["cubic", "bbr"], "qdisc_effective": None,
             "reason": ""}).encode())
    assert p.flush(30) == 0


def _plan(tmp_path: Path, rid: str, **over) -> Path:
    raw = base_plan(rollout_id=rid, **over)
    raw["arms"] = raw["arms"][:2]  # control and b1 (bbr)
    path = tmp_path / f"{rid}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_two_deployments_on_one_kafka_cannot_take_the_same_host(tmp_path, kafka_broker, topics):
    kt = ["--assignments-topic", topics[0], "--status-topic", topics[1], "--kafka-timeout", "10"]
    first, second = f"east-{uuid.uuid4().hex[:5]}", f"west-{uuid.uuid4().hex[:5]}"
    a = _ccab(_env(tmp_path / "deploy-a", kafka_broker), "rollout", "start", str(_plan(tmp_path, first)), *kt)
    assert a.returncode == 0, a.stdout + a.stderr
    before = _newest(kafka_broker, topics[0])
    assert before and {r["rollout_id"] for r in before.values()} == {first}

    b = _ccab(_env(tmp_path / "deploy-b", kafka_broker), "rollout", "start", str(_plan(tmp_path, second)), *kt)
    assert b.returncode == 3, b.stdout + b.stderr
    line = b.stderr.strip().splitlines()[-1]
    assert line.startswith(f"ccab rollout: rollout {second} overlaps: ") and f"belong to rollout {first}" in line, line
    assert "another deployment" in line and f"--take-over {first}" in line
    assert _newest(kafka_broker, topics[0]) == before  # nothing re-flipped
    assert not (tmp_path / "deploy-b" / "rollouts" / second / "state.json").exists()

    # a plan on other hosts starts beside it
    other = _plan(tmp_path, f"{second}-p3", pops=["p3"], inventory={"hosts": {"p3": [f"h3-{i:02d}" for i in range(8)]}})
    c = _ccab(_env(tmp_path / "deploy-b", kafka_broker), "rollout", "start", str(other), *kt)
    assert c.returncode == 0, c.stdout + c.stderr


def test_a_stale_state_file_is_refused_and_a_rollback_reaches_every_host(tmp_path, kafka_broker, topics):
    kt = ["--assignments-topic", topics[0], "--status-topic", topics[1], "--kafka-timeout", "10"]
    rid = f"stale-{uuid.uuid4().hex[:5]}"
    env = _env(tmp_path / "data", kafka_broker)
    state_file = tmp_path / "data" / "rollouts" / rid / "state.json"
    assert _ccab(env, "rollout", "start", str(_plan(tmp_path, rid)), *kt).returncode == 0
    _agents_apply(kafka_broker, topics)
    backup = state_file.read_text()  # stage 0: 1 host per PoP on bbr
    p = _ccab(env, "rollout", "promote", rid, "--reason", "looks fine", *kt)
    assert p.returncode == 0, p.stdout + p.stderr
    for _ in range(3):  # stage 1 (30 % per PoP), batch after batch as the agents apply
        _agents_apply(kafka_broker, topics)
        assert _ccab(env, "rollout", "step", rid, "--rollups", "existing", *kt).returncode == 0
    _agents_apply(kafka_broker, topics)
    on_bbr = {h for h, r in _newest(kafka_broker, topics[0]).items() if r["arm"] != "control"}
    old_bbr = {h for h, v in json.loads(backup)["hosts"].items() if v["arm"] != "control"}
    assert len(on_bbr) > len(old_bbr)

    state_file.write_text(backup)  # an older state.json of the same rollout is put back
    s = _ccab(env, "rollout", "step", rid, "--rollups", "existing", *kt)
    assert s.returncode == 3, s.stdout + s.stderr
    line = s.stderr.strip().splitlines()[-1]
    assert line.startswith(f"ccab rollout: the state of rollout {rid} ({state_file}) is older than {topics[0]} "
                           "shows for it: "), line
    assert "stage 1 on the topic vs 0 here" in line, line
    assert json.loads(state_file.read_text())["stage"] == 0  # refused: nothing written
    status = _ccab(env, "rollout", "status", rid, *kt)
    assert status.returncode == 0 and "STALE STATE" in status.stdout and "stage 1 on the topic vs 0 here" in \
        status.stdout, status.stdout + status.stderr

    r = _ccab(env, "rollout", "rollback", rid, "--reason", "INC-8", *kt)
    assert r.returncode == 0, r.stdout + r.stderr
    newest = _newest(kafka_broker, topics[0])
    assert on_bbr and all(newest[h]["arm"] == "control" for h in on_bbr), \
        {h: newest[h]["arm"] for h in on_bbr}
    st = json.loads(state_file.read_text())
    assert st["status"] == "rolled_back" and all(v["arm"] == "control" for v in st["hosts"].values())
    assert all(st["hosts"][h]["generation"] == newest[h]["generation"] for h in st["hosts"])
    audit = [json.loads(x) for x in (state_file.parent / "audit.jsonl").read_text().splitlines()]
    assert [e for e in audit if e["event"] == "state_adopted"]


def test_json_that_is_not_an_object_on_the_assignments_topic_never_stops_the_controller(tmp_path, kafka_broker, topics):
    """Issue 28, found by the soak: a hostile record that parses as JSON but is not an object
    (``[1, 2, 3]``, ``42``, ``"x"``, ``null``) on the assignments topic made every later tick of
    every rollout fail (``AttributeError: 'list' object has no attribute 'get'``): no breaker, no
    look, no rollback for the rest of the soak. Such records are skipped like unparsable ones."""
    from confluent_kafka import Producer

    kt = ["--assignments-topic", topics[0], "--status-topic", topics[1], "--kafka-timeout", "10"]
    rid = f"hostile-{uuid.uuid4().hex[:5]}"
    env = _env(tmp_path / "deploy", kafka_broker)
    a = _ccab(env, "rollout", "start", str(_plan(tmp_path, rid)), *kt)
    assert a.returncode == 0, a.stdout + a.stderr
    _agents_apply(kafka_broker, topics)
    p = Producer({"bootstrap.servers": kafka_broker})
    for value in (b"[1, 2, 3]", b"42", b'"x"', b"null", b"\xff not json"):
        p.produce(topics[0], key=b"hostile", value=value)
    assert p.flush(30) == 0
    step = _ccab(env, "rollout", "step", rid, *kt)
    assert step.returncode == 0, step.stdout + step.stderr
    back = _ccab(env, "rollout", "rollback", rid, "--reason", "hostile records on the topic", *kt)
    assert back.returncode == 0, back.stdout + back.stderr
