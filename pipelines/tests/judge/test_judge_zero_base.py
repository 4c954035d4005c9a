"""Effects from a zero base (issue 29): control's p10 queueing delay is 0 (a quarter of its
connections never queue), the treatment's is 11.2 % / 2.3 ms. The relative effect has no value
(11.2 / 0), so the judge must neither call it an "improvement" (a NaN compared with 0) nor print
"no estimate": the effect is the difference, in the metric's unit, and its direction is the one the
vocabulary gives (higher queueing delay is worse)."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

import numpy as np
from ccab.base.vocabulary import effect_sign, zero_base_text
from ccab.judge.alerts.build import build_alerts
from ccab.judge.core import _bh, _effect_text, _result, effect_of
from ccab.judge.model import RolloutJudgement
from ccab.report.build import fmt_row_effect
from judge_synth import experiment

T0 = datetime(2026, 11, 24, 0, tzinfo=timezone.utc)
T1 = datetime(2026, 11, 24, 6, tzinfo=timezone.utc)


def _judged(metric: str, added: float, seed: int = 3):
    """Control as drawn (25 % exact zeros: p10 = 0); every treated value + ``added``."""
    rng = np.random.default_rng(seed)
    e = experiment(rng, 10, 10, host_sd=0.05, mean_connections=2000, transform=lambda v, _r: v + added)
    info = [_result(effect_of(e.arrays, metric, s, seed_key=s), "bbr1", "control", metric, s, "all", "info", "info")
            for s in ("p10", "p50")]
    _bh(info)
    j = RolloutJudgement("tyo1", "r1", "control")
    j.results = info
    j.alerts = build_alerts(j, T0, T1)
    return {r.statistic: r for r in info}, j


def test_queue_delay_pct_from_zero_is_a_regression_with_a_difference():
    res, j = _judged("queue_delay_pct", 11.2)
    p10 = res["p10"]
    assert p10.value_control == 0 and p10.value_treatment > 11
    assert not math.isfinite(p10.estimate)  # no ratio from a zero base
    assert p10.outcome == "regression", p10.outcome
    text = _effect_text(p10)
    assert re.match(r"\+11\.\d+ % from 0 on control", text), text
    (a,) = [a for a in j.alerts if a.statistic == "p10"]
    assert a.direction == "regression" and "regression" in a.summary and "improvement" not in a.summary
    assert re.search(r"\+11\.\d+ % from 0", a.summary) and "n/a" not in a.summary, a.summary
    assert re.match(r"\+11\.\d+ % from 0", fmt_row_effect(p10.as_dict()))
    assert res["p50"].outcome == "regression"  # the p50 moved from a non-zero base: a ratio, same direction


def test_queue_delay_us_from_zero_to_2_3_ms_is_a_regression():
    res, _ = _judged("queue_delay_us", 2300.0)
    p10 = res["p10"]
    assert p10.value_control == 0 and p10.outcome == "regression", (p10.value_control, p10.outcome)
    assert re.match(r"\+2\.3\d? ms from 0 on control", _effect_text(p10)), _effect_text(p10)


def test_higher_is_better_from_zero_is_an_improvement():
    res, _ = _judged("goodput_bps", 5e6)
    assert res["p10"].value_control == 0 and res["p10"].outcome == "improvement"


def test_zero_base_helpers():
    assert effect_sign(math.nan, 11.2, 0.0) == 1 and effect_sign(math.nan, 0.0, 0.0) == 0
    assert effect_sign(math.nan, math.nan, 0.0) is None and effect_sign(-0.1, 5, 6) == -1
    assert zero_base_text("queue_delay_us", "p10", math.nan, 2300.0, 0.0) == "+2.3 ms from 0"
    assert zero_base_text("queue_delay_pct", "p10", 0.5, 3.0, 2.0) is None
