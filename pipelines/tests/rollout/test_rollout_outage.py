"""Operators during a Kafka outage (issue 28): with `ccab controller run` up and the broker down,
`ccab rollout halt|rollback` records the operator's action and says it is published when Kafka is
back (it used to be refused with `another controller holds …/lock`), and the service publishes it
when the broker returns.

A private broker (`ccab kafka up/down` in its own data dir: this test stops it), the service and the
operator's commands as `ccab` processes, nothing mocked."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid

import pytest
import yaml
from alertmanager_fixture import wait_until
from factories import base_plan
from paths import REPO, VECTORS


pytestmark = pytest.mark.kafka  # a private broker, stopped and started again: the system tier


def _port_pair() -> int:
    from ccab_workshop.kafka.broker import find_free_port_pair

    return find_free_port_pair()


def _ccab(env, *args, check=None, timeout=600):
    p = subprocess.run([sys.executable, "-m", "ccab.cli", *args], env=env, cwd=REPO, capture_output=True, text=True,
                       timeout=timeout)
    if check is not None:
        assert p.returncode == check, f"ccab {' '.join(args)} -> {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p


@pytest.fixture
def broker(tmp_path):
    """(env of the broker's own data dir, bootstrap); stopped at the end."""
    env = dict(os.environ, CCAB_DATA_DIR=str(tmp_path / "kafka"), CCAB_KAFKA_PORT=str(_port_pair()))
    env.pop("CCAB_KAFKA_BROKERS", None)
    _ccab(env, "kafka", "up", "--timeout", "240", check=0)
    try:
        yield env, f"127.0.0.1:{env['CCAB_KAFKA_PORT']}"
    finally:
        _ccab(env, "kafka", "down")


def _newest(bootstrap: str, rid: str) -> dict[str, dict]:
    from ccab.rollout.publish import read_assignments

    out: dict[str, dict] = {}
    for r in read_assignments(bootstrap, timeout_s=10):
        if r.get("rollout_id") == rid and r["generation"] >= out.get(r["host"], {}).get("generation", -1):
            out[r["host"]] = r
    return out


def test_rollback_during_a_kafka_outage_is_recorded_and_published_when_kafka_is_back(tmp_path, broker, warehouse_env):
    kenv, bootstrap = broker
    rid = f"outage-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, CCAB_DATA_DIR=str(tmp_path / "data"), CCAB_KAFKA_BROKERS=bootstrap,
               CCAB_ROLLOUT_KEY=str(VECTORS / "test_ed25519_seed.hex"))
    env.pop("CCAB_ALERT_WEBHOOK_URL", None)  # the warehouse: warehouse_env's database on the session's service
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(base_plan(rollout_id=rid, stages=[{"name": "s1", "hosts": 2}])))
    _ccab(env, "rollout", "start", str(plan), check=0)
    treated = {h for h, r in _newest(bootstrap, rid).items() if r["arm"] != "control"}
    assert treated

    svc = subprocess.Popen([sys.executable, "-m", "ccab.cli", "controller", "run", "--interval", "1", "--metrics-addr",
                            "", "--kafka-timeout", "3", "--rollups", "existing"], env=env, cwd=REPO,
                           stdout=open(tmp_path / "service.log", "w"), stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "leader" in (tmp_path / "service.log").read_text(), what="the service leads", timeout_s=300)
        _ccab(kenv, "kafka", "down", check=0)  # the outage

        halt = _ccab(env, "rollout", "halt", rid, "--arm", "b1", "--reason", "INC-9 during the outage",
                     "--kafka-timeout", "3")
        assert halt.returncode == 0, halt.stdout + halt.stderr
        assert "another controller holds" not in halt.stdout + halt.stderr
        assert "Kafka is back" in halt.stdout, halt.stdout
        rollback = _ccab(env, "rollout", "rollback", rid, "--reason", "INC-9 roll everything back",
                         "--kafka-timeout", "3")
        assert rollback.returncode == 0, rollback.stdout + rollback.stderr
        assert "another controller holds" not in rollback.stdout + rollback.stderr
        assert "Kafka is back" in rollback.stdout, rollback.stdout
        # the decision reaches the state while Kafka is still down — directly, or (when the service's
        # tick held the rollout longer than --lock-wait) as a request its next tick applies first
        wait_until(lambda: f"rollout {rid}: rolled_back" in _ccab(env, "rollout", "status", rid, "--offline",
                                                                     check=0).stdout,
                   what="the rollback in the rollout's state before Kafka is back", timeout_s=180)

        _ccab(kenv, "kafka", "up", "--timeout", "240", check=0)  # Kafka is back: the service publishes what was recorded
        newest = wait_until(lambda: (n := _newest(bootstrap, rid)) and all(
            n[h]["arm"] == "control" for h in treated) and n, what="every treated host's newest record on control",
            timeout_s=300)
        assert all(r["arm"] == "control" for r in newest.values())
    finally:
        svc.send_signal(signal.SIGTERM)
        try:
            svc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            svc.kill()
    audit = _ccab(env, "rollout", "status", rid, "--offline", "--audit", "40", check=0).stdout
    assert "halt_arm (operator)" in audit and "rollback (operator)" in audit, audit
