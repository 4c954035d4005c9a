"""A plan accepts exactly the guardrails the judge can run: one walk over the whole vocabulary.

Every (metric, statistic) candidate — every metric of the rollups (judged or not) × every
statistic name the judge knows plus near misses — goes through ``ccab rollout plan``: refused ones
exit 2 naming the field, accepted ones are then really evaluated by the judge's guardrail test on
synthetic host data, which must compute them (no error, a finite p-value).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml
from judge_synth import experiment

from ccab.base.vocabulary import JUDGED_METRICS, METRICS, QUANTILES, SHARE_ABOVE
from ccab.cli import main
from ccab.judge.core import guardrail_result
from ccab.judge.model import Guardrail

STATISTICS = ("mean", "ratio", *QUANTILES, SHARE_ABOVE, "share_above:90", "p95", "median", "")
CANDIDATES = [(m.name, s) for m in METRICS for s in STATISTICS] + [("loss_pct", "p50")]


def _plan(tmp_path, metric: str, statistic: str):
    hosts = [f"h{i:02d}" for i in range(8)]
    raw = {"rollout_id": "vocab", "pops": ["p1"], "inventory": {"hosts": {"p1": hosts}},
           "arms": [{"name": "control", "cc": "cubic"}, {"name": "bbr2", "cc": "bbr2"}], "control_arm": "control",
           "design": {"seed": 1}, "stages": [{"name": "s1", "hosts": 2}],
           "guardrails": [{"metric": metric, "statistic": statistic, "margin": 0.1}]}
    path = tmp_path / f"{metric}-{statistic or 'none'}.yaml".replace(":", "_")
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def arrays():
    return experiment(np.random.default_rng(5), 6, 6).arrays


def test_plans_accept_exactly_what_the_judge_runs(tmp_path, arrays, capsys, monkeypatch):
    monkeypatch.setenv("CCAB_DATA_DIR", str(tmp_path / "data"))
    accepted, refused = [], []
    for metric, statistic in CANDIDATES:
        code = main(["rollout", "plan", str(_plan(tmp_path, metric, statistic))])
        err = capsys.readouterr().err
        if code == 0:
            accepted.append((metric, statistic))
            g = Guardrail(metric, statistic, 0.1)
            r = guardrail_result(arrays, g, "bbr2", "control", 0.05, "vocab")
            assert not r.error and math.isfinite(r.p_value), (metric, statistic, r.error)
        else:
            assert code == 2, (metric, statistic, err)
            assert "guardrails[0]." in err, (metric, statistic, err)
            refused.append((metric, statistic))
    # the cases of the defect: a plan took them, then the judge raised at the first look
    assert ("inflight_bytes_per_sample", "p50") in refused
    assert ("rtt_us", "share_above:90") in refused and ("rtt_us", SHARE_ABOVE) in refused
    assert ("retrans_pct", SHARE_ABOVE) in accepted and ("goodput_bps", "p10") in accepted
    assert len(accepted) == sum(1 + len(QUANTILES) + m.is_percent for m in METRICS if m.name in JUDGED_METRICS)
