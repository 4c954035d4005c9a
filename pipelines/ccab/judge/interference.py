"""Interference, measured: does the host-level A/B depend on how many hosts are treated?

When treatment and control hosts share a bottleneck (the PoP's uplink, a peering link), a
congestion controller can win against the other arm's flows rather than for the users, and the
A/B difference is then not the effect of rolling it out everywhere — it can even flip sign
(Spang et al., IMC'21). Varying the treated share across units (PoPs, or periods of a staged
rollout: 10 % → 50 %) makes this measurable. Per unit (a PoP, or a period) with treated share
``s``, from each host's window value ``y`` and its own pre-period value ``x`` (log scale):

- the **A/B effect** ``mean log y_t − mean log y_c`` (what the judge estimates);
- each arm's **change from its pre-period**, ``mean log(y/x)`` over the arm's hosts: the control
  arm's change should not depend on ``s`` without interference; its slope on ``s`` is the
  spillover onto control.

Weighted least squares of each on ``s`` (weights 1/variance) give slopes with t intervals
(units − 2 degrees of freedom), and the **full-rollout effect**, extrapolated: the treated arm's
change at ``s = 1`` minus the control arm's at ``s = 0`` — compared with the A/B. Pure numpy;
the report draws the panel "effect vs treated share".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
# scipy and statsmodels are imported in the functions that use them: together ~1.5 s at import,
# which every command that reaches the judge (the rollout CLI, the controller) would pay


@dataclass(frozen=True)
class UnitValues:
    """One unit (a PoP or a period): its treated share and per-host window / pre-period values."""

    unit: str
    treated_share: float
    treated: np.ndarray   # bool (G,)
    window: np.ndarray    # (G,) host values of the statistic in the window (> 0)
    pre: np.ndarray       # (G,) the same hosts' pre-period values (> 0)


@dataclass(frozen=True)
class Line:
    """``value = intercept + slope × share`` with standard errors (WLS)."""

    intercept: float
    slope: float
    se_intercept: float
    se_slope: float
    cov: float
    df: int

    def at(self, s: float) -> tuple[float, float]:
        """Value and SE at share ``s``."""
        v = self.intercept + self.slope * s
        var = self.se_intercept ** 2 + s * s * self.se_slope ** 2 + 2 * s * self.cov
        return v, math.sqrt(max(var, 0.0))

    def slope_ci(self, level: float = 0.95) -> tuple[float, float]:
        from scipy import stats as sps
        t = float(sps.t.ppf(0.5 + level / 2, max(self.df, 1)))
        return self.slope - t * self.se_slope, self.slope + t * self.se_slope


@dataclass
class Panel:
    """What the "effect vs treated share" panel shows (log scale; ``exp(x) − 1`` for relative)."""

    shares: list[float] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    ab: list[tuple[float, float]] = field(default_factory=list)        # (estimate, SE) per unit
    control_change: list[tuple[float, float]] = field(default_factory=list)
    treated_change: list[tuple[float, float]] = field(default_factory=list)
    ab_line: Line | None = None
    control_line: Line | None = None
    treated_line: Line | None = None
    full_rollout: tuple[float, float] = (math.nan, math.nan)   # (estimate, SE), log scale
    ab_pooled: tuple[float, float] = (math.nan, math.nan)
    spillover_detected: bool = False
    note: str = ""


def _mean_se(v: np.ndarray) -> tuple[float, float]:
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan


def _wls(s: np.ndarray, v: np.ndarray, se: np.ndarray) -> Line | None:
    ok = np.isfinite(v) & np.isfinite(se) & (se > 0)
    if ok.sum() < 3 or np.ptp(s[ok]) == 0:
        return None
    w = 1 / se[ok] ** 2
    x = np.column_stack([np.ones(ok.sum()), s[ok]])
    xtw = x.T * w
    cov = np.linalg.inv(xtw @ x)
    beta = cov @ xtw @ v[ok]
    resid = v[ok] - x @ beta
    df = int(ok.sum() - 2)
    # over-dispersion beyond the within-unit SEs (units differ for other reasons too)
    phi = max(1.0, float((w * resid ** 2).sum() / df)) if df > 0 else 1.0
    cov = cov * phi
    return Line(float(beta[0]), float(beta[1]), math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1]), float(cov[0, 1]), df)


def effect_vs_share(units: list[UnitValues], level: float = 0.95) -> Panel:
    """The panel's numbers from units with different treated shares (see the module doc)."""
    p = Panel()
    for u in units:
        t = np.asarray(u.treated, dtype=bool)
        y, x = np.log(np.asarray(u.window, float)), np.log(np.asarray(u.pre, float))
        if t.sum() < 2 or (~t).sum() < 2:
            continue
        yt, yc = _mean_se(y[t]), _mean_se(y[~t])
        p.units.append(u.unit)
        p.shares.append(float(u.treated_share))
        p.ab.append((yt[0] - yc[0], math.hypot(yt[1], yc[1])))
        p.control_change.append(_mean_se((y - x)[~t]))
        p.treated_change.append(_mean_se((y - x)[t]))
    if len(p.units) < 3 or len(set(p.shares)) < 2:
        p.note = "needs at least 3 units (PoPs or periods) with at least 2 different treated shares"
        return p
    s = np.array(p.shares)

    def arr(pairs):
        return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])

    p.ab_line = _wls(s, *arr(p.ab))
    p.control_line = _wls(s, *arr(p.control_change))
    p.treated_line = _wls(s, *arr(p.treated_change))
    ab_v, ab_se = arr(p.ab)
    w = 1 / ab_se ** 2
    p.ab_pooled = (float((w * ab_v).sum() / w.sum()), float(math.sqrt(1 / w.sum())))
    if p.control_line and p.treated_line:
        (t1, se1), (c0, se0) = p.treated_line.at(1.0), p.control_line.at(0.0)
        p.full_rollout = (t1 - c0, math.hypot(se1, se0))
        lo, hi = p.control_line.slope_ci(level)
        p.spillover_detected = not (lo <= 0 <= hi)
        p.note = (f"control arm's change vs treated share: slope {p.control_line.slope:+.3f} "
                  f"[{lo:+.3f}, {hi:+.3f}] (log scale) — "
                  + ("spillover: the host-level A/B is biased" if p.spillover_detected else
                     "no spillover detected"))
    return p
