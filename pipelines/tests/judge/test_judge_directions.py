"""A whole-distribution shift has no sign: its alert's direction is derived from the quantiles or
is ``none`` — never a bare ``regression`` (issue 18: "bbr2 goodput_bps shift regression" on a PoP
where BBRv2 sped up fast clients and left slow ones alone)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
from ccab.judge.alerts.build import build_alerts
from ccab.judge.core import _bh, _result, effect_of
from ccab.judge.model import RolloutJudgement
from ccab.judge.stats import shift_test
from judge_synth import experiment

T0 = datetime(2026, 11, 24, 0, tzinfo=timezone.utc)
T1 = datetime(2026, 11, 24, 6, tzinfo=timezone.utc)


def _judged(transform, seed: int) -> RolloutJudgement:
    rng = np.random.default_rng(seed)
    e = experiment(rng, 10, 10, host_sd=0.05, mean_connections=3000, transform=transform)
    info = [_result(effect_of(e.arrays, "goodput_bps", s, seed_key=s), "bbr2", "control", "goodput_bps", s, "all",
                    "info", "info") for s in ("p10", "p50", "p90", "p99")]
    info.append(_result(shift_test(e.arrays, seed_key="shift"), "bbr2", "control", "goodput_bps", "shift", "all",
                        "shift", "info"))
    _bh(info)
    j = RolloutJudgement("tyo1", "r1", "control")
    j.results = info
    j.alerts = build_alerts(j, T0, T1)
    return j


def _shift_alert(j):
    (a,) = [a for a in j.alerts if a.kind == "shift"]
    return a


def test_faster_fast_clients_slow_ones_unchanged_is_not_a_regression():
    # goodput of the fast half × 1.8, the slow half untouched
    j = _judged(lambda v, _r: np.where(v > 1.0, v * 1.8, v), seed=4)
    a = _shift_alert(j)
    outcomes = {r.statistic: r.outcome for r in j.results}
    print(outcomes, a.direction, a.summary)
    assert outcomes["p10"] == "no_difference" and outcomes["p90"] == "improvement"
    assert a.direction == "improvement"
    assert "regression" not in a.summary and "regression" not in a.description
    assert "improvement" in a.summary and a.as_dict()["direction"] == "improvement"


def test_a_shift_with_quantiles_moving_both_ways_has_no_direction():
    # spread out: slow clients slower, fast clients faster (the median stays)
    j = _judged(lambda v, _r: np.where(v > 1.0, v * 1.8, v / 1.8), seed=6)
    a = _shift_alert(j)
    assert a.direction == "none", (a.direction, a.summary)
    assert "no direction" in a.summary and "regression" not in a.summary.split("(")[0]
