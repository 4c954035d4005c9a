"""An alert's words and numbers: effects as percentages (or from a zero base), values in their
units, a breaker's ratio, the direction of a whole-distribution shift."""

from __future__ import annotations

import math

from ccab.base.vocabulary import get as get_metric
from ccab.base.vocabulary import zero_base_text
from ccab.judge.model import HIGHER_IS_WORSE


def times(x: float) -> str:
    """A breaker's ratio as printed everywhere (text, annotations, audit): ``8.55×``; a control arm
    with no retransmits at all gives an infinite ratio: ``∞× (none on control)``."""
    return f"{x:.2f}×" if math.isfinite(x) else "∞× (none on control)"


def pct(x: float, statistic: str = "") -> str:
    """A relative effect as a percentage; a share statistic's absolute difference in points."""
    if not math.isfinite(x):
        return "n/a"
    return f"{100 * x:+.2f} pp" if statistic.startswith("share_above") else f"{x:+.1%}"


def effect(r) -> str:
    """A result's effect: relative, or from a zero base the difference ('+2.3 ms from 0')."""
    return zero_base_text(r.metric, r.statistic, r.estimate, r.value_treatment, r.value_control) \
        or pct(r.estimate, r.statistic)


def value(metric: str, v: float, statistic: str = "") -> str:
    if not math.isfinite(v):
        return "n/a"
    if statistic.startswith("share_above"):
        return f"{v:.2%} of connections"
    m = get_metric(metric)
    return f"{v / m.scale:.3g} {m.unit}"


def margin(r) -> str:
    sign = "+" if HIGHER_IS_WORSE[r.metric] else "-"
    m = r.margin or 0
    return f"{sign}{100 * m:.2f} pp" if r.statistic.startswith("share_above") else f"{sign}{m:.0%}"


def shift_direction(results, shift) -> tuple[str, str]:
    """(direction, how) of a whole-distribution shift finding, derived from the same arm's
    informational quantile findings of that metric (the shift statistic itself has no sign):
    ``improvement`` when at least one quantile improved significantly (BH) and none regressed,
    ``regression`` the other way round, ``none`` (non-directional) otherwise."""
    quant = [r for r in results if r.role == "info" and r.metric == shift.metric
             and r.treatment_arm == shift.treatment_arm and r.segment == shift.segment
             and r.statistic.startswith("p") and r.statistic[1:].isdigit()]
    better = [r for r in quant if r.outcome == "improvement"]
    worse = [r for r in quant if r.outcome == "regression"]

    def names(rs):
        return ", ".join(f"{r.statistic} {effect(r)}" for r in rs)

    if better and not worse:
        return "improvement", f"improvement derived from the quantiles: {names(better)} better, none worse"
    if worse and not better:
        return "regression", f"regression derived from the quantiles: {names(worse)} worse, none better"
    if better and worse:
        return "none", f"no direction: quantiles moved both ways ({names(better)} better; {names(worse)} worse)"
    return "none", "no direction: no quantile moved significantly on its own (a change of shape)"
