"""Times are times (issue 28): a rollout the controller started at an ordinary instant
(12:24:28.293), its signed records on the default ``ccab.assignments.v1`` topic, the production
loader (``ccab loader`` with its default topics, so the assignments are loaded too), then
``ccab analyze … --rollout R`` and the controller's look. The judge's pre-period ends at the hour
that contains the first assignment; it used to raise ``… is not on an hour boundary`` for every
rollout the controller started, and every look held (``look_failed``).

Real broker (the session's ``kafka_broker``), real loader process, real engine (embedded chdb),
the real judge; the agents are a stand-in that applies every record on the topic at once (the
agents' own tests are test_rollout_kafka.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone

import yaml
from ccab import cli
from ccab.base.config import settings
from ccab.pipeline import controller_judge, open_warehouse, record_action
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import Controller, KafkaBus
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.signing import load_private_key
from ccab.rollout.state import Store
from paths import REPO, VECTORS

HOSTS = [f"th-{i:02d}" for i in range(1, 13)]
T_START = datetime(2025, 11, 20, 12, 24, 28, 293000, tzinfo=timezone.utc)  # an ordinary instant
DATA_FROM = datetime(2025, 11, 20, 12, 25, tzinfo=timezone.utc)


class AppliedAtOnce(KafkaBus):
    """The real topics; the agents apply each record of the assignments topic at once."""

    def agent_status(self):
        return [{"schema": "agent_status/1", "host": r["host"], "pop": r["pop"], "state": "applied",
                 "generation": r["generation"], "rollout_id": r["rollout_id"], "arm": r["arm"]}
                for r in self.assignments()]


def _plan(rid: str) -> dict:
    return {
        "rollout_id": rid, "pops": ["tms1"], "inventory": {"hosts": {"tms1": HOSTS}},
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "fq", "cc": "cubic", "qdisc": "fq"}],
        "control_arm": "control", "design": {"seed": 5},
        "stages": [{"name": "half", "hosts": 6, "min_duration_minutes": 10, "looks": 1, "min_applied": 1.0}],
        "limits": {"max_hosts_per_pop_per_step": 6, "min_control_hosts": 2},
        "guardrails": [{"metric": "rtt_us", "statistic": "p50", "margin": 0.10, "severity": "page"}],
        "policy": {"rollback": "rollback_arm", "halt": "halt_arm"},
    }


def test_a_controller_started_rollout_is_judged_after_the_loader_loaded_its_assignments(
        tmp_path, warehouse_env, kafka_broker, monkeypatch):
    monkeypatch.setenv("CCAB_KAFKA_BROKERS", kafka_broker)
    rid = f"times-{uuid.uuid4().hex[:6]}"
    plan = plan_from_dict(_plan(rid))
    now = {"ms": int(T_START.timestamp() * 1000)}
    bus = AppliedAtOnce(kafka_broker)  # the default topics: ccab.assignments.v1, ccab.agent_status.v1
    ctl = Controller(plan, Store(warehouse_env / "rollouts" / rid), bus,
                     load_private_key(VECTORS / "test_ed25519_seed.hex"), clock=lambda: now["ms"],
                     analysis=Analysis(judge=controller_judge(plan), record_action=record_action))
    ctl.start()
    assert ctl.step().look is None and ctl.st.stage_applied_ms == now["ms"]
    arms = {h: v.arm for h, v in ctl.st.hosts.items()}
    assert sorted(arms.values()) == ["control"] * 6 + ["fq"] * 6

    # 13 minutes of traffic from 12:25 on the hosts' arms, produced to Kafka like the collectors do
    scenario = {"name": "times", "pop": "tms1", "rollout_id": rid, "start": DATA_FROM.isoformat(),
                "duration_h": 13 / 60, "seed": 7, "hosts": {"name_format": "th-{index:02d}"},
                "traffic": {"connections_per_host_per_hour": 6000},
                "arms": [{"name": "control", "cc": "cubic", "kernel": "6.1.0-18-amd64", "hosts": 6},
                         {"name": "fq", "cc": "cubic", "kernel": "6.1.0-18-amd64", "hosts": 6}]}
    (tmp_path / "sc.yaml").write_text(yaml.safe_dump(scenario))
    (tmp_path / "arms.json").write_text(json.dumps(arms))
    assert cli.main(["sim", str(tmp_path / "sc.yaml"), "--out", str(tmp_path / "sim"), "--arm-map",
                     str(tmp_path / "arms.json"), "--to-kafka", "--workers", "1", "--no-progress"]) == 0

    # the production loader, default topics (a group of its own: the session's broker is shared)
    env = dict(os.environ, CCAB_DATA_DIR=str(warehouse_env), CCAB_KAFKA_BROKERS=kafka_broker)
    loader = subprocess.run([sys.executable, "-m", "ccab.cli", "loader", "--exit-when-idle", "5", "--metrics-port",
                             "0", "--group", f"loader-{rid}"], env=env, cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert loader.returncode == 0, loader.stderr[-3000:]
    with open_warehouse() as wh:
        issued = wh.query("SELECT min(issued_at_ms) FROM assignments WHERE rollout_id = {r:String}",
                          params={"r": rid}).scalar()
    assert int(issued) == int(T_START.timestamp() * 1000)  # the loader has the assignment's instant

    # an analyst's `ccab analyze --rollout R` judges it (it used to raise "not on an hour boundary")
    analyze = subprocess.run([sys.executable, "-m", "ccab.cli", "analyze", "--from", "2025-11-20T12:00Z", "--to",
                              "2025-11-20T13:00Z", "--rollout", rid, "--lookback-hours", "0", "--no-progress",
                              "--json"], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert analyze.returncode == 0, analyze.stdout[-2000:] + analyze.stderr[-2000:]
    assert "hour boundary" not in analyze.stdout + analyze.stderr

    # the controller's look at 12:38:40 (13 whole minutes since the hosts applied) decides
    now["ms"] = int(datetime(2025, 11, 20, 12, 38, 40, tzinfo=timezone.utc).timestamp() * 1000)
    res = ctl.step()
    assert res.look is not None, res.messages
    assert res.look["window"] == ["2025-11-20T12:25Z", "2025-11-20T12:38Z"]
    decisions = [v["decision"] for v in res.look["verdicts"]]
    assert decisions and "no_decision" not in decisions, res.look["verdicts"]
    assert not [e for e in ctl.store.read_audit() if e["event"] == "look_failed"]
    reasons = [r for v in res.look["verdicts"] for r in v["reasons"]]
    # the pre-period ends at the hour that contains the first assignment (12:00), whole hours before
    assert any("pre-period adjustment" in r and "12:00 UTC" in r for r in reasons), reasons
    assert settings().bootstrap_servers == kafka_broker


def test_floor_hour_takes_any_instant():
    from datetime import timedelta

    from ccab.base.chtime import floor_hour

    hour = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)
    assert floor_hour(T_START) == hour
    assert floor_hour(hour) == hour and floor_hour(hour - timedelta(microseconds=1)) == hour - timedelta(hours=1)
    assert floor_hour(T_START.replace(tzinfo=None)) == hour  # naive means UTC
    tokyo = timezone(timedelta(hours=9))
    assert floor_hour(datetime(2025, 11, 20, 21, 24, 28, tzinfo=tokyo)) == hour
