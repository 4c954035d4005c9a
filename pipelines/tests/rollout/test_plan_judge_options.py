"""What a plan tells the judge: its pre-period, and switchbacks refused until the judge analyses periods (issue 18)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from ccab.judge.core import judge_rollout
from ccab.judge.model import DEFAULT_GUARDRAILS
from ccab.rollout.controller import Controller, ControllerError
from ccab.rollout.design import SWITCHBACK_REFUSAL
from ccab.rollout.plan import plan_from_dict
from ccab.rollout.signing import load_private_key
from ccab.rollout.state import Store
from factories import base_plan
from paths import VECTORS

SWITCHBACK = {"seed": 1, "switchback": {"period_minutes": 60, "periods": 6, "arms": ["control", "b2"]}}


class _NoBus:
    def publish(self, records):
        raise AssertionError("a refused plan publishes nothing")

    def assignments(self):
        return []

    def agent_status(self):
        return []


def test_the_controller_refuses_to_start_a_switchback_and_says_why(tmp_path):
    plan = plan_from_dict(base_plan(design=SWITCHBACK))
    ctl = Controller(plan, Store(tmp_path / plan.rollout_id), _NoBus(), load_private_key(VECTORS / "test_ed25519_seed.hex"))
    with pytest.raises(ControllerError, match="switchback designs are refused.*periods.*washout.*carryover"):
        ctl.start()
    assert not (tmp_path / plan.rollout_id / "state.json").exists()


class _Rows:
    def __init__(self, rows):
        self.rows = rows


class _ArmsOnly:
    """Unit-test stand-in for the warehouse: answers the arms query only."""

    def query(self, sql, params=None):
        assert "DISTINCT arm" in sql, sql
        return _Rows([("b2",), ("control",)])


def test_the_judge_makes_no_decision_on_a_switchback_with_the_reason():
    t0, t1 = datetime(2026, 11, 24, 0, tzinfo=timezone.utc), datetime(2026, 11, 24, 6, tzinfo=timezone.utc)
    j = judge_rollout(_ArmsOnly(), "p1", "r", t0, t1, control_arm="control", guardrails=DEFAULT_GUARDRAILS,
                      breakers=(), look=1, looks_planned=1, refuse=SWITCHBACK_REFUSAL)
    assert [(v.treatment_arm, v.decision, v.reasons) for v in j.verdicts] == [("b2", "no_decision",
                                                                               [SWITCHBACK_REFUSAL])]


def test_pre_period_hours_is_per_plan_at_least_24_and_the_default_keeps_the_digest():
    from ccab.rollout.plan import PlanError, plan_to_yaml
    import yaml
    default = plan_from_dict(base_plan())
    assert default.pre_period_hours == 168
    assert plan_from_dict(base_plan(pre_period_hours=168)).digest == default.digest
    week2 = plan_from_dict(base_plan(pre_period_hours=336))
    assert week2.pre_period_hours == 336 and week2.digest != default.digest
    assert plan_from_dict(yaml.safe_load(plan_to_yaml(week2).split("\n", 1)[1])).digest == week2.digest
    with pytest.raises(PlanError, match="pre_period_hours"):
        plan_from_dict(base_plan(pre_period_hours=12))
