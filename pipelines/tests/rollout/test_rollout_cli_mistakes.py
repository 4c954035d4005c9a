"""Smaller operator mistakes on a running rollout (issue 29), through the CLI with a real broker:
`halt --arm bbr9` is a usage error (exit 2, one line naming the arms, no Python dict), and pausing
a rollout that is already paused is refused (exit 3) instead of being recorded twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import yaml
from paths import REPO, VECTORS



def _ccab(env, *args, check):
    p = subprocess.run([sys.executable, "-m", "ccab.cli", *args], env=env, capture_output=True, text=True,
                       timeout=600, cwd=REPO)
    assert p.returncode == check, f"ccab {' '.join(args)} -> {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p


def test_halt_mistakes(tmp_path, kafka_broker, fresh_topic):
    env = {**os.environ, "CCAB_DATA_DIR": str(tmp_path / "data"), "CCAB_KAFKA_BROKERS": kafka_broker,
           "CCAB_ROLLOUT_KEY": str(VECTORS / "test_ed25519_seed.hex")}
    env.pop("CCAB_CLICKHOUSE_URL", None)
    a_topic = fresh_topic("ccab.assignments", partitions=1, config={"cleanup.policy": "compact"})
    s_topic = fresh_topic("ccab.agent_status", partitions=1)
    kt = ["--assignments-topic", a_topic, "--status-topic", s_topic, "--kafka-timeout", "10"]
    rid = f"hm-{uuid.uuid4().hex[:6]}"
    hosts = [f"hm-{i}" for i in range(6)]
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({
        "rollout_id": rid, "pops": ["lab1"], "inventory": {"hosts": {"lab1": hosts}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr", "cc": "bbr", "bbr_version": 1}],
        "control_arm": "control", "design": {"seed": 11}, "stages": [{"name": "s", "hosts": 2}],
        "limits": {"max_hosts_per_pop_per_step": 2, "min_control_hosts": 2},
        "guardrails": [{"metric": "retrans_pct", "statistic": "p50", "margin": 0.5, "severity": "page"}],
        "policy": {"rollback": "rollback_all", "halt": "rollback_all"}}))
    _ccab(env, "rollout", "start", str(plan), *kt, check=0)
    audit = Path(env["CCAB_DATA_DIR"]) / "rollouts" / rid / "audit.jsonl"

    p = _ccab(env, "rollout", "halt", rid, "--arm", "bbr9", "--reason", "typo", *kt, check=2)
    assert p.stderr == f"ccab rollout: --arm 'bbr9' is not a treatment arm of {rid} (treatment arms: bbr)\n", p.stderr

    _ccab(env, "rollout", "halt", rid, "--reason", "pause for the night", *kt, check=0)
    pauses = [e for e in map(json.loads, audit.read_text().splitlines()) if e["event"] == "pause"]
    p = _ccab(env, "rollout", "halt", rid, "--reason", "pause again", *kt, check=3)
    assert "already paused" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert [e for e in map(json.loads, audit.read_text().splitlines()) if e["event"] == "pause"] == pauses
