"""Issue 28: "the embedded warehouse is one process at a time". With the controller service up,
analysts' commands failed with ``Cannot lock file``, ``ccab power`` with ``unexpected error:
WarehouseError``, ``rollout halt`` with ``another controller holds …/lock``, and the controller's
audit log showed ``breaker_failed … cannot open the embedded warehouse``.

Everything here is real and runs beside each other the way a deployment does: the warehouse
service of the test's data dir (CCAB_CLICKHOUSE_URL unset, ``ccab warehouse up``), the broker,
``ccab controller run`` as a process, and ``ccab`` commands as processes. A long analyst query
runs while the controller starts, so its first breaker evaluation meets it (on the code before
the service, that evaluation could not open the warehouse)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from paths import REPO, VECTORS

CCAB = [sys.executable, "-m", "ccab.cli"]
HOSTS = [f"edge-lab1-{i:02d}" for i in range(1, 9)]
#: ~6 s in the engine (20 blocks of one row, 0.3 s each): an analyst's long query
LONG_QUERY = "SELECT sum(sleepEachRow(0.3)) FROM numbers(20) SETTINGS max_block_size = 1"


def ccab(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CCAB, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.kafka
def test_commands_power_halt_and_breakers_beside_the_controller_service(local_warehouse, kafka_broker,
                                                                        fresh_topic, tmp_path):
    a_topic = fresh_topic("ccab.assignments", partitions=1, config={"cleanup.policy": "compact"})
    s_topic = fresh_topic("ccab.agent_status", partitions=3)
    env = dict(os.environ, CCAB_KAFKA_BROKERS=kafka_broker, CCAB_ROLLOUT_KEY=str(VECTORS / "test_ed25519_seed.hex"))
    rid = f"one-{uuid.uuid4().hex[:6]}"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "rollout_id": rid, "pops": ["lab1"], "inventory": {"hosts": {"lab1": HOSTS}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr", "cc": "bbr", "bbr_version": 1}],
        "control_arm": "control", "design": {"seed": 3},
        "stages": [{"name": "half", "hosts": 4, "min_duration_minutes": 60, "looks": 1, "min_applied": 1.0}],
        "limits": {"max_hosts_per_pop_per_step": 4, "min_control_hosts": 2},
        "breakers": [{"metric": "retrans_pct", "ratio": 3.0, "minutes": 2}],
        "policy": {"rollback": "rollback_all", "halt": "rollback_all"}}))
    kt = ["--assignments-topic", a_topic, "--status-topic", s_topic]
    assert ccab(env, "db", "migrate").returncode == 0
    p = ccab(env, "rollout", "start", str(plan), *kt)
    assert p.returncode == 0, p.stderr
    state_file = local_warehouse / "rollouts" / rid / "state.json"
    assert json.loads(state_file.read_text())["breaker_checked_ms"] is None

    long_query = subprocess.Popen([*CCAB, "query", LONG_QUERY], env=env, cwd=REPO, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)  # the analyst's query is in the engine when the controller starts
    log = open(tmp_path / "controller.log", "w")
    controller = subprocess.Popen([*CCAB, "controller", "run", "--interval", "1", "--metrics-addr", "", *kt],
                                  env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        failures = []
        for i in range(12):
            q = ccab(env, "query", f"SELECT {i} AS n, count() FROM tcp_samples")
            if q.returncode != 0:
                failures.append(q.stderr.strip())
        power = ccab(env, "power", "--metric", "retrans_pct", "--statistic", "ratio", "--mde", "0.10")
        out, err = long_query.communicate(timeout=120)
        deadline = time.monotonic() + 60  # the controller's first tick evaluates the breakers
        while json.loads(state_file.read_text())["breaker_checked_ms"] is None and time.monotonic() < deadline:
            time.sleep(0.5)
        halt = ccab(env, "rollout", "halt", rid, "--arm", "bbr", "--reason", "on-call", *kt)
    finally:
        os.killpg(controller.pid, signal.SIGTERM)
        controller.wait(60)
        log.close()
    controller_log = (tmp_path / "controller.log").read_text()

    assert long_query.returncode == 0 and "sleepEachRow" in out, err
    assert failures == [], f"{len(failures)} of 12 `ccab query` failed beside the controller: {failures[:3]}"
    # no data was loaded: power answers with what is missing, never a warehouse error
    assert power.returncode in (0, 1) and "rollups are empty" in power.stderr + power.stdout, power.stderr
    assert halt.returncode == 0, halt.stderr
    audit = [json.loads(line) for line in (state_file.parent / "audit.jsonl").read_text().splitlines()]
    assert [e for e in audit if e["event"] == "breaker_failed"] == [], controller_log[-3000:]
    assert json.loads(state_file.read_text())["breaker_checked_ms"] is not None, controller_log[-3000:]
    assert any(e["event"] == "halt_arm" or "halt" in e["event"] for e in audit), audit[-3:]
