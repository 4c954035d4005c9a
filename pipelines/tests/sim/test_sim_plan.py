"""`ccab sim --pop P --plan PLAN --stage S`: a PoP's hosts on the arms a plan's design gives them;
every mismatch is one line naming the option."""

from __future__ import annotations

import json

import pytest
import yaml
from ccab import cli

POPS = ["q0", "q1", "q2"]


def _plan(tmp_path, **over):
    raw = {"rollout_id": "tst1-tiny", "pops": POPS,
           "inventory": {"hosts": {p: [f"edge-{p}-{i:02d}" for i in range(1, 6)] for p in POPS}},
           "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr2", "cc": "bbr2"}], "control_arm": "control",
           "design": {"seed": 3}, "stages": [{"name": "one", "hosts": 1}, {"name": "spread", "fractions": [0.2, 0.4, 0.6]}],
           "limits": {"min_control_hosts": 1}, **over}
    f = tmp_path / "plan.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


def test_sim_runs_each_pops_hosts_on_the_plans_arms(tmp_path):
    plan = _plan(tmp_path)
    shares = []
    for pop in POPS:
        out = tmp_path / pop
        assert cli.main(["sim", "tiny", "--pop", pop, "--plan", str(plan), "--connections", "300", "--out", str(out),
                         "--workers", "1", "--no-progress"]) == 0
        arms = {}
        for line in (out / "ccab.http.v1.jsonl").open():
            r = json.loads(line)
            assert r["pop"] == pop and r["host"].startswith(f"edge-{pop}-")
            arms[r["host"]] = r["arm"]
        shares.append(sum(a == "bbr2" for a in arms.values()) / 5)
    assert sorted(shares) == [0.2, 0.4, 0.6]   # the last stage by default: one fraction per PoP


@pytest.mark.parametrize("extra, plan_over, message", [
    (["--stage", "nope"], {}, "--stage: 'nope' is not a stage"),
    (["--stage", "1"], {}, None),
    (["--pop", "zz"], {}, "--plan: PoP 'zz' is not in the plan's pops"),
    ([], {"inventory": {"hosts": {"q0": ["a", "b", "c"], "q1": ["d", "e", "f"], "q2": ["g", "h", "i"]}}},
     "--plan: the plan's inventory for q0"),
    ([], {"control_arm": "bbr2"}, "--plan: control_arm 'bbr2' must be the scenario's first arm"),
    (["--arm-map", "{tmp}/m.json"], {}, "--plan: not with --arm-map"),
])
def test_sim_plan_errors_name_the_option(tmp_path, capsys, extra, plan_over, message):
    plan = _plan(tmp_path, **plan_over)
    (tmp_path / "m.json").write_text(json.dumps({"edge-q0-01": "control"}))
    args = ["sim", "tiny", "--pop", "q0", "--plan", str(plan), "--connections", "200", "--out", str(tmp_path / "o"),
            "--workers", "1", "--no-progress"] + [a.replace("{tmp}", str(tmp_path)) for a in extra]
    rc = cli.main(args)
    if message is None:
        assert rc == 0
    else:
        assert rc == 2 and message in capsys.readouterr().err


def test_stage_without_plan_is_refused(tmp_path, capsys):
    assert cli.main(["sim", "tiny", "--stage", "1", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--stage: only with --plan" in capsys.readouterr().err
