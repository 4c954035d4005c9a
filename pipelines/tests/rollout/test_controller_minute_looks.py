"""Looks on minute-level windows (issue 16): a stage's look is due when its ``min_duration_minutes``
of data exist since its hosts applied, not at whole hours. The real judge (``pipeline.controller_judge``)
on the real engine (embedded chdb), on simulated data of the hosts' arms; only the Kafka bus is an
in-memory stand-in (agents that apply at once) and the clock is the simulated one.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import orjson
import yaml
from ccab import cli
from ccab.base.chtime import covering_hours
from ccab.cohorts.job import JobConfig, run_window, stale_hours
from ccab.pipeline import controller_judge, open_warehouse, record_action
from ccab.rollout.analysis import Analysis
from ccab.rollout.controller import Controller
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.signing import load_private_key
from ccab.rollout.state import Store
from paths import VECTORS

HOSTS = [f"mh-{i:02d}" for i in range(1, 13)]
T_START = datetime(2025, 11, 20, 0, 5, 20, tzinfo=timezone.utc)  # the operator starts the rollout
DATA_FROM = datetime(2025, 11, 20, 0, 6, tzinfo=timezone.utc)    # first whole minute after applied
HOUR0, HOUR1 = datetime(2025, 11, 20, 0, tzinfo=timezone.utc), datetime(2025, 11, 20, 1, tzinfo=timezone.utc)


class AgentsApplyAtOnce:
    """In-memory stand-in for the two topics: every published generation is applied at once."""

    def __init__(self):
        self.records: list[dict] = []

    def publish(self, records):
        self.records += [dict(r) for r in records]
        return len(records)

    def assignments(self):
        return list(self.records)

    def agent_status(self):
        return [{"schema": "agent_status/1", "host": r["host"], "pop": r["pop"], "state": "applied",
                 "generation": r["generation"], "rollout_id": r["rollout_id"], "arm": r["arm"]} for r in self.records]


def _plan(rid: str) -> dict:
    return {
        "rollout_id": rid, "pops": ["mlk1"], "inventory": {"hosts": {"mlk1": HOSTS}},
        # the treatment is a qdisc change on the same cc: the simulated hosts have no planted effect
        "arms": [{"name": "control", "cc": "cubic"}, {"name": "fq", "cc": "cubic", "qdisc": "fq"}],
        "control_arm": "control", "design": {"seed": 3},
        "stages": [{"name": "half", "hosts": 6, "min_duration_minutes": 10, "looks": 1, "min_applied": 1.0}],
        "limits": {"max_hosts_per_pop_per_step": 6, "min_control_hosts": 2},
        "guardrails": [{"metric": "rtt_us", "statistic": "p50", "margin": 0.10, "severity": "page"},
                       {"metric": "retrans_pct", "statistic": "ratio", "margin": 0.5, "severity": "page"}],
        "policy": {"rollback": "rollback_arm", "halt": "halt_arm"},
    }


def _split(src, before_ms: int, first, rest) -> None:
    """Copy the JSONL ``src`` into ``first`` (records before ``before_ms``) and ``rest``."""
    with src.open("rb") as fin, first.open("ab") as a, rest.open("ab") as b:
        for line in fin:
            (a if orjson.loads(line)["ts_ms"] < before_ms else b).write(line)


def test_a_ten_minute_stage_gets_its_look_and_promotes_within_the_same_hour(tmp_path, warehouse_env):
    rid = "minute-looks"
    plan = plan_from_dict(_plan(rid))
    now = {"ms": int(T_START.timestamp() * 1000)}
    bus = AgentsApplyAtOnce()
    ctl = Controller(plan, Store(warehouse_env / "rollouts" / rid), bus,
                     load_private_key(VECTORS / "test_ed25519_seed.hex"), clock=lambda: now["ms"],
                     analysis=Analysis(judge=controller_judge(plan), record_action=record_action))
    ctl.start()
    first = ctl.step()  # every host applied: the stage's clock starts now (00:05:20)
    assert first.look is None and ctl.st.stage_applied_ms == now["ms"]
    treated = {h: v.arm for h, v in ctl.st.hosts.items()}
    assert sorted(treated.values()) == ["control"] * 6 + ["fq"] * 6

    # 13 minutes of traffic from 00:06, each host on its arm (an A/A in the simulator: cubic both)
    scenario = {"name": "minute-looks", "pop": "mlk1", "rollout_id": rid, "start": DATA_FROM.isoformat(),
                "duration_h": 13 / 60, "seed": 11, "hosts": {"name_format": "mh-{index:02d}"},
                "traffic": {"connections_per_host_per_hour": 6000},
                "arms": [{"name": "control", "cc": "cubic", "kernel": "6.1.0-18-amd64", "hosts": 6},
                         {"name": "fq", "cc": "cubic", "kernel": "6.1.0-18-amd64", "hosts": 6}]}
    (tmp_path / "sc.yaml").write_text(yaml.safe_dump(scenario))
    (tmp_path / "arms.json").write_text(json.dumps(treated))
    assert cli.main(["sim", str(tmp_path / "sc.yaml"), "--out", str(tmp_path / "sim"), "--arm-map",
                     str(tmp_path / "arms.json"), "--workers", "1", "--no-progress"]) == 0
    early, late = tmp_path / "early.jsonl", tmp_path / "late.jsonl"
    cut_ms = int((DATA_FROM + timedelta(minutes=5)).timestamp() * 1000)
    for f in ("ccab.tcp.v1.jsonl", "ccab.http.v1.jsonl"):
        _split(tmp_path / "sim" / f, cut_ms, early, late)

    # the young hour is rolled up while only its first minutes are loaded (an earlier analysis)
    assert cli.main(["load", str(early)]) == 0
    with open_warehouse() as wh:
        run_window(wh, HOUR0, HOUR1, JobConfig(), lookback=False)
        young = int(wh.query("SELECT sum(n) FROM cohort_hourly WHERE rollout_id = {r:String} AND metric = 'rtt_us' "
                             "AND segment = 'all'", params={"r": rid}).scalar())
    assert cli.main(["load", str(late)]) == 0

    # 00:15:40: 9 whole minutes since the hosts applied; the stage needs 10: no look
    now["ms"] = int(datetime(2025, 11, 20, 0, 15, 40, tzinfo=timezone.utc).timestamp() * 1000)
    res = ctl.step()
    assert res.look is None, res.look
    assert any("next look" in m and "00:16Z" in m for m in res.messages), res.messages

    # 00:16:40: 10 minutes of data: the look runs within the same hour and the arm is promoted
    now["ms"] = int(datetime(2025, 11, 20, 0, 16, 40, tzinfo=timezone.utc).timestamp() * 1000)
    res = ctl.step()
    assert res.look is not None, res.messages
    assert res.look["window"] == ["2025-11-20T00:06Z", "2025-11-20T00:16Z"]
    assert [v["decision"] for v in res.look["verdicts"]] == ["pass"], res.look["verdicts"]
    assert res.look["outcome"] == "promoted"
    assert ctl.st.arms == {"fq": "promoted"} and ctl.st.promoted == "fq" and ctl.st.looks_done == 1
    audit = list(ctl.store.read_audit())
    assert [e["event"] for e in audit if e["event"] in ("look", "promote")] == ["look", "promote"]

    # the look judged the hour as loaded then: the young rollup was recomputed (fingerprint changed)
    with open_warehouse() as wh:
        full = int(wh.query("SELECT sum(n) FROM cohort_hourly WHERE rollout_id = {r:String} AND metric = 'rtt_us' "
                            "AND segment = 'all'", params={"r": rid}).scalar())
        assert stale_hours(wh, HOUR0, HOUR1) == {}
    assert full > young > 0

    # promoted hosts move; no second look on the same window
    res = ctl.step()
    assert res.look is None and ctl.st.looks_done == 1


def test_covering_hours_of_a_minute_window():
    a, b = datetime(2025, 11, 20, 0, 6, tzinfo=timezone.utc), datetime(2025, 11, 20, 0, 16, tzinfo=timezone.utc)
    assert covering_hours(a, b) == (HOUR0, HOUR1)
    assert covering_hours(HOUR0, HOUR1) == (HOUR0, HOUR1)
    assert covering_hours(a, HOUR1 + timedelta(minutes=1)) == (HOUR0, HOUR1 + timedelta(hours=1))
