"""Interference, measured through emitted records (issue 18): a plan whose stage varies the treated
share across PoPs (`stages[0].fractions`) → `ccab sim --plan` per PoP in the shared-bottleneck mode
(records + pre-period) → `ccab load` into the real engine → the hourly job → the report's
"effect vs treated share" units → the control arm's slope on the treated share recovers the planted
spillover; with none planted its interval covers 0."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from ccab import cli
from ccab.judge.interference import effect_vs_share
from paths import REPO

POPS = [f"q{i}" for i in range(6)]
SHARES = [0.2, 0.3, 0.4, 0.6, 0.7, 0.8]
CONNECTIONS = 12000          # per PoP, window; the same again in its 1-hour pre-period
BULK_MIN_BYTES = 100_000     # goodput of requests >= 100 kB (the job's bulk filter): ~4x the 1 MiB default's values
START = datetime(2025, 11, 20, 12, tzinfo=timezone.utc)   # the tiny scenario's start; one hour
PRE = datetime(2025, 11, 20, 11, tzinfo=timezone.utc)


def _scenario(tmp: Path, spillover: float) -> Path:
    raw = yaml.safe_load((REPO / "scenarios" / "tiny.yaml").read_text())
    raw["arms"] = [dict(raw["arms"][0], hosts=5), dict(raw["arms"][1], hosts=5)]
    raw["hosts"] = {"effect_sd": {"goodput": 0.3}}   # strong persistent host effects: the pre-period removes them
    raw["shared_bottleneck"] = {"spillover_goodput": spillover}
    # many evenly popular prefixes: a host's median goodput is not one big prefix's luck of the hour
    raw["clients"] = {"prefixes": 3000, "popularity_zipf": 0.0}
    f = tmp / "scenario.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


def _plan(tmp: Path) -> Path:
    hosts = {p: [f"edge-{p}-{i:02d}" for i in range(1, 11)] for p in POPS}
    raw = {"rollout_id": "tst1-tiny", "pops": POPS, "inventory": {"hosts": hosts},
           "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr2", "cc": "bbr2"}], "control_arm": "control",
           "design": {"seed": 18}, "stages": [{"name": "spread", "fractions": SHARES}],
           "limits": {"min_control_hosts": 2}}
    f = tmp / "plan.yaml"
    f.write_text(yaml.safe_dump(raw))
    return f


@pytest.mark.slow
@pytest.mark.parametrize("spillover", [0.5, 0.0])
def test_planted_spillover_is_recovered_from_records_through_the_warehouse(spillover, tmp_path, warehouse):
    from ccab.cohorts.job import JobConfig, run_window
    from ccab.ingest.loader import load_files
    from ccab.report.precision import units_of_pops

    scenario, plan = _scenario(tmp_path, spillover), _plan(tmp_path)
    files = []
    for i, pop in enumerate(POPS):
        out = tmp_path / pop
        assert cli.main(["sim", str(scenario), "--pop", pop, "--plan", str(plan), "--seed", str(100 + i),
                         "--connections", str(CONNECTIONS), "--pre-period-h", "1", "--out", str(out),
                         "--workers", "1", "--no-progress"]) == 0
        files += sorted(out.glob("*.jsonl"))
    assert not load_files(warehouse, files).dead
    run_window(warehouse, PRE, START.replace(hour=13), JobConfig(bulk_min_bytes=BULK_MIN_BYTES))
    units = units_of_pops(warehouse, "tst1-tiny", {p: "control" for p in POPS}, START, START.replace(hour=13))
    assert sorted(u.treated_share for u in units) == SHARES   # the plan's shares, as the records carry them
    panel = effect_vs_share(units)
    lo, hi = panel.control_line.slope_ci()
    print(f"spillover {spillover}: slope {panel.control_line.slope:+.3f} [{lo:+.3f}, {hi:+.3f}]; A/B pooled "
          f"{panel.ab_pooled[0]:+.3f}; full rollout {panel.full_rollout[0]:+.3f} ± {panel.full_rollout[1]:.3f}")
    assert lo <= -spillover <= hi            # the control arm loses `spillover` (log goodput) per unit share
    assert panel.spillover_detected is (spillover > 0)
