"""Rollout plans: YAML -> typed, validated plan; every error names its field."""

from __future__ import annotations


import pytest
import yaml
from ccab.rollout.plan import PlanError, load_plan, plan_from_dict, plan_to_yaml
from paths import REPO
from factories import base_plan

PLAN = REPO / "rollout" / "plans" / "tyo1-bbr-canary.yaml"




# ------------------------------------------------------------------------------------ plan


def test_example_plan_loads_and_round_trips():
    plan = load_plan(PLAN)
    assert plan.treatment_arms == ("bbr1", "bbr2")
    assert len(plan.hosts_of("tyo1")) == 21
    again = plan_from_dict(yaml.safe_load(plan_to_yaml(plan)))
    assert again.digest == plan.digest


@pytest.mark.parametrize("change, expected", [
    ({"stages": [{"name": "a", "fraction": 0.2}, {"name": "b", "fraction": 1.5}]}, "stages[1].fraction: must be in (0, 1]"),
    ({"arms": [{"name": "control", "cc": "cubic"}, {"name": "b1", "cc": "bbrv2"}]}, "arms[1].cc: unknown congestion control 'bbrv2'"),
    ({"control_arm": "ctl"}, "control_arm: 'ctl' is not an arm"),
    ({"guardrails": [{"metric": "retrans_pct", "statistic": "p42", "margin": 1}]}, "guardrails[0].statistic: the judge cannot compute 'p42' for retrans_pct"),
    ({"guardrails": [{"metric": "loss", "statistic": "p50", "margin": 1}]}, "guardrails[0].metric: unknown value 'loss'"),
    ({"guardrails": [{"metric": "rtt_us", "statistic": "p50", "margin": -1}]}, "guardrails[0].margin: must be in (0"),
    ({"stages": [{"name": "a", "hosts": 5}]}, "stages[0].hosts: 5 hosts x 2 treatment arm(s) in p2 leaves fewer than"),
    ({"design": {}}, "design.seed: required"),
    ({"limits": {"max_hosts_per_pop_per_step": 0}}, "limits.max_hosts_per_pop_per_step: must be in [1"),
    ({"stages": [{"name": "a"}]}, "stages[0].fraction: required"),
    ({"bogus": 1}, "bogus: unknown field"),
    ({"inventory": {"hosts": {"p9": ["x"]}}}, "inventory.hosts.p9[0]: PoP 'p9' is not in pops"),
])
def test_plan_errors_name_the_field(change, expected):
    with pytest.raises(PlanError) as exc:
        plan_from_dict(base_plan(**change))
    assert any(p.startswith(expected) for p in exc.value.problems), exc.value.problems


def test_all_problems_reported_at_once():
    raw = base_plan(control_arm="x", stages=[{"name": "a", "fraction": 2}])
    raw["arms"][1]["cc"] = "nope"
    with pytest.raises(PlanError) as exc:
        plan_from_dict(raw)
    assert len(exc.value.problems) >= 3


def test_malformed_yaml_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("rollout_id: x\narms: [\n")
    with pytest.raises(PlanError, match="not valid YAML: line"):
        load_plan(f)


@pytest.mark.parametrize("rollout_id", ["..", ".", "a/b", "../x", "a\0b", "a\\b", "", "x" * 129, " r1", "r\n1"])
def test_a_rollout_id_that_is_not_one_path_component_is_refused_naming_the_field(rollout_id):
    """Before: ``..`` and ``.`` passed, and the rollout's state, audit log and lock went into
    $CCAB_DATA_DIR itself."""
    with pytest.raises(PlanError) as exc:
        plan_from_dict(base_plan(rollout_id=rollout_id))
    assert "rollout_id:" in str(exc.value)


@pytest.mark.parametrize("rollout_id", ["..", ".", "a/b", "/etc", "a\0b"])
def test_no_rollout_store_outside_its_own_directory(tmp_path, rollout_id):
    from ccab.rollout.state import StateError, Store

    with pytest.raises(StateError):
        Store.for_rollout(rollout_id, tmp_path)
    assert Store.for_rollout("tyo1-bbr-canary", tmp_path).dir.parent.parent == tmp_path


@pytest.mark.parametrize("rollout_id", ["..", ".", "a/../..", "bs\\x"])
def test_ccab_report_refuses_a_rollout_id_that_would_leave_the_reports_folder(warehouse_env, capsys, rollout_id):
    from ccab import cli

    assert cli.main(["report", "--rollout", rollout_id]) == 2
    err = capsys.readouterr().err
    assert "--rollout" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (warehouse_env / "index.html").exists()
