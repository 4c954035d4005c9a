"""Host-clustered comparisons of two arms from host-level sufficient statistics (pure numpy/scipy).

Arms are randomized by host; values are per connection. Every estimator here therefore treats the
**host** as the unit (docs/reference/statistics.md):

- ratio statistics (a mean is Σvalue / Σn, a ratio metric Σnum / Σden, a share Σabove / Σn): the
  delta method on host sums — per host ``L_h = (X_h − R̂·Y_h) / Ȳ``, ``Var(R̂) = Σ L_h² / (G(G−1))``
  — on the log scale, Welch–Satterthwaite degrees of freedom (Deng, Knoblich & Lu 2018);
- quantiles from the merged log-binned histograms: the clustered outer interval
  ``σ̂_p² = Σ_h (k_h − p·n_h)² / (G(G−1)·n̄²)``, ``[Q̂(p − zσ̂), Q̂(p + zσ̂)]``, its log-scale SE,
  and t with ``G_t + G_c − 2`` degrees of freedom;
- p-values from an **exact host-permutation test** (every relabelling of the hosts when there are at
  most ``MAX_ENUMERATE`` of them, else a seeded Monte-Carlo sample): the design randomizes hosts,
  so this test has its nominal size at any number of hosts. Its smallest attainable p-value
  (2 / C(G, G_t) two-sided) says when a design *cannot* reach α — "inconclusive by design".
  Ratio statistics are studentized inside the permutation (valid for the weak null as well,
  Chung & Romano 2013); quantiles use the difference of pooled bins.
- a whole-distribution shift statistic: the variance-weighted (Anderson–Darling-type) sup distance
  between the two arms' pooled CDFs, inside the same host permutation — catches a change of shape
  or tail when the median does not move.

Tests against a margin ("is treatment more than 25 % worse?") use the sharp null
"treatment = control × (1 + margin)": treated hosts are rescaled to the control scale before the
permutation (sums divided by ``1 + margin``; histogram bins shifted by ``log2(1 + margin)``).

Estimates are relative: ``treatment / control − 1``. Everything takes numpy arrays, so tests and
the calibration simulations call it directly; :mod:`ccab.judge.data` reads the arrays from the
rollups.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Literal

import numpy as np
# scipy and statsmodels are imported in the functions that use them: together ~1.5 s at import,
# which every command that reaches the judge (the rollout CLI, the controller) would pay
from ccab.base.bins import FINE_PER_OCTAVE, bin_mid

Alternative = Literal["two-sided", "greater", "less"]
#: enumerate every relabelling up to this many; beyond, sample ``MC_PERMUTATIONS`` of them
MAX_ENUMERATE = 20_000
MC_PERMUTATIONS = 1999
#: bins of the zeros in a pooled histogram (below every real bin; log-ratio undefined there)
_ZERO_POSITION = -(2**30)


@dataclass(frozen=True)
class HostArrays:
    """One metric's host-level sufficient statistics for both arms, hosts stacked.

    Parameters
    ----------
    treated : bool array (G,)
        True for the treatment arm's hosts.
    n, n_zero, n_above, value_sum, ratio_num, ratio_den : float arrays (G,)
        Per-host sums over the window (``cohort_hourly`` columns).
    bins : int array (B,)
        Fine bins present in any host's histogram, ascending.
    hist : array (G, B)
        Per-host counts of values > 0 in each bin of ``bins``.
    hosts : tuple of str
    """

    treated: np.ndarray
    n: np.ndarray
    n_zero: np.ndarray
    n_above: np.ndarray
    value_sum: np.ndarray
    ratio_num: np.ndarray
    ratio_den: np.ndarray
    bins: np.ndarray
    hist: np.ndarray
    hosts: tuple[str, ...] = ()

    @property
    def g_treatment(self) -> int:
        return int(self.treated.sum())

    @property
    def g_control(self) -> int:
        return int((~self.treated).sum())


@dataclass(frozen=True)
class Effect:
    """A treatment-vs-control comparison of one statistic.

    ``estimate``, ``ci_low``, ``ci_high`` are relative (``-0.12`` = 12 % lower); ``p_value`` is
    the primary test's (``method``), for ``alternative``; ``min_attainable_p`` is the smallest
    p-value that test could give with these host counts.
    """

    statistic: str
    value_treatment: float
    value_control: float
    estimate: float
    ci_low: float
    ci_high: float
    p_value: float
    method: str
    min_attainable_p: float
    g_treatment: int
    g_control: int
    df: float = math.nan
    se_log: float = math.nan
    alternative: str = "two-sided"
    null_ratio: float = 1.0
    error: str = ""  # degenerate data: why no estimate (never an exception)
    #: pre-period regression adjustment: "" (not asked), "cuped θ=… (variance −…%)" or "off: why"
    adjustment: str = ""
    #: 1 − Var(adjusted) / Var(unadjusted) of the host-level estimate (NaN when not adjusted)
    variance_reduction: float = math.nan


# --------------------------------------------------------------------------------------------------
# permutations
# --------------------------------------------------------------------------------------------------

def _seed(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


@lru_cache(maxsize=64)
def _all_choices(g: int, g_t: int) -> np.ndarray:
    """Every way of choosing ``g_t`` of ``g`` hosts, as a read-only boolean matrix."""
    idx = np.array(list(combinations(range(g), g_t)), dtype=np.int64).reshape(-1, g_t)
    rows = np.zeros((idx.shape[0], g), dtype=bool)
    rows[np.arange(idx.shape[0])[:, None], idx] = True
    rows.flags.writeable = False
    return rows


def relabellings(treated: np.ndarray, seed_key: str = "") -> tuple[np.ndarray, bool]:
    """Assignment matrix (P, G) of host relabellings, row 0 = the observed one; ``exact`` flag.

    Every way of choosing ``G_t`` of the ``G`` hosts when there are at most :data:`MAX_ENUMERATE`,
    else :data:`MC_PERMUTATIONS` random ones (seeded by ``seed_key`` so a re-run gives the same
    p-value, and the same alerts).
    """
    g, g_t = treated.size, int(treated.sum())
    if math.comb(g, g_t) <= MAX_ENUMERATE:
        rows = _all_choices(g, g_t).copy()
        observed = int(np.flatnonzero((rows == treated).all(axis=1))[0])
        rows[[0, observed]] = rows[[observed, 0]]
        return rows, True
    rng = np.random.default_rng(_seed(seed_key))
    picks = np.argsort(rng.random((MC_PERMUTATIONS, g)), axis=1)[:, :g_t]
    rows = np.zeros((MC_PERMUTATIONS + 1, g), dtype=bool)
    rows[0] = treated
    rows[np.arange(1, MC_PERMUTATIONS + 1)[:, None], picks] = True
    return rows, False


def _perm_p(stat: np.ndarray, alternative: Alternative, exact: bool) -> float:
    """p-value of ``stat[0]`` among all rows (the observed row included)."""
    obs = stat[0]
    finite = np.isfinite(stat)
    if not finite[0]:
        return math.nan
    s = stat[finite]
    tol = 1e-9 * max(1.0, abs(obs))
    if alternative == "greater":
        hits = np.count_nonzero(s >= obs - tol)
    elif alternative == "less":
        hits = np.count_nonzero(s <= obs + tol)
    else:
        hits = np.count_nonzero(np.abs(s) >= abs(obs) - tol)
    return float(hits / s.size)  # exact: includes the observed; MC: (1 + b) / (1 + P) by construction


def min_attainable_p(g_treatment: int, g_control: int, alternative: Alternative = "two-sided") -> float:
    """Smallest p-value a host-permutation test can give (before Monte-Carlo sampling)."""
    total = math.comb(g_treatment + g_control, g_treatment)
    if total > MAX_ENUMERATE:
        return 1.0 / (MC_PERMUTATIONS + 1)
    sym = 2 if alternative == "two-sided" else 1
    return min(1.0, sym / total)


# --------------------------------------------------------------------------------------------------
# ratio statistics (mean, ratio of sums, share above a threshold)
# --------------------------------------------------------------------------------------------------

def _ratio_parts(x: np.ndarray, y: np.ndarray, a: np.ndarray):
    """For each relabelling row of ``a`` (P, G): R̂ of the selected hosts and Var(log R̂) (delta)."""
    a = a.astype(np.float64)
    g = a.sum(axis=1)
    sx, sy = a @ x, a @ y
    with np.errstate(divide="ignore", invalid="ignore"):
        r = sx / sy
        ybar = sy / g
        ss = a @ (x * x) - 2 * r * (a @ (x * y)) + r * r * (a @ (y * y))
        var_r = np.maximum(ss, 0) / (g * (g - 1) * ybar * ybar)
        var_log = var_r / (r * r)
    return r, var_log


def arm_ratio(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """One arm's ``R̂ = Σx/Σy`` and its delta-method variance ``Σ_h L_h² / (G(G−1))``."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    r, v = _ratio_var(x, y, np.ones((1, x.size), dtype=bool))
    return float(r[0]), float(v[0])


def _ratio_var(x: np.ndarray, y: np.ndarray, a: np.ndarray):
    """Like :func:`_ratio_parts` but Var(R̂) itself (for differences on the absolute scale)."""
    r, var_log = _ratio_parts(x, y, a)
    with np.errstate(invalid="ignore"):
        return r, var_log * r * r


def share_difference_effect(x: np.ndarray, y: np.ndarray, treated: np.ndarray, statistic: str = "share", *,
                            alternative: Alternative = "two-sided", margin: float = 0.0, alpha: float = 0.05,
                            seed_key: str = "", ci_level: float | None = None) -> Effect:
    """Absolute difference of shares ``Σx/Σy`` (treatment − control), delta-method CI, studentized
    host-permutation p-value against ``difference = margin``.

    Shares of rare events (connections above 50 % retransmits) are often exactly 0 in the control
    arm, where a relative change is undefined; their effect is in share units (0.006 = +0.6
    percentage points of connections), and so is a guardrail's margin.
    """
    from scipy import stats as sps
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    treated = np.asarray(treated, dtype=bool)
    g_t, g_c = int(treated.sum()), int((~treated).sum())
    base = dict(statistic=statistic, g_treatment=g_t, g_control=g_c, alternative=alternative, null_ratio=1.0,
                min_attainable_p=min_attainable_p(g_t, g_c, alternative), method="permutation")
    if g_t < 2 or g_c < 2 or y[treated].sum() <= 0 or y[~treated].sum() <= 0:
        return Effect(value_treatment=math.nan, value_control=math.nan, estimate=math.nan, ci_low=math.nan,
                      ci_high=math.nan, p_value=math.nan, error="fewer than 2 hosts (or no values) in an arm", **base)
    (r_t, r_c), (v_t, v_c) = _ratio_var(x, y, np.vstack([treated, ~treated]))
    v_t, v_c = float(np.nan_to_num(v_t)), float(np.nan_to_num(v_c))
    diff = float(r_t - r_c)
    se = math.sqrt(v_t + v_c)
    df = _welch_df(v_t, v_c, g_t, g_c) if se > 0 else float(g_t + g_c - 2)
    level = ci_level if ci_level is not None else 1 - alpha
    tq = float(sps.t.ppf(0.5 + level / 2, df))
    xs = np.where(treated, x - margin * y, x)
    rows, exact = relabellings(treated, seed_key)
    rt, vt = _ratio_var(xs, y, rows)
    rc, vc = _ratio_var(xs, y, ~rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        den = np.sqrt(np.nan_to_num(vt) + np.nan_to_num(vc))
        tstat = np.where(den > 0, (rt - rc) / np.where(den > 0, den, 1), np.sign(rt - rc) * np.inf)
        tstat = np.where(rt - rc == 0, 0.0, tstat)
    p = _perm_p(np.nan_to_num(tstat, posinf=1e300, neginf=-1e300), alternative, exact)
    return Effect(value_treatment=float(r_t), value_control=float(r_c), estimate=diff, ci_low=diff - tq * se,
                  ci_high=diff + tq * se, p_value=p, df=df, se_log=math.nan, **base)


def ratio_effect(x: np.ndarray, y: np.ndarray, treated: np.ndarray, statistic: str = "ratio", *,
                 alternative: Alternative = "two-sided", null_ratio: float = 1.0, alpha: float = 0.05,
                 seed_key: str = "", ci_level: float | None = None) -> Effect:
    """Relative effect on ``Σx / Σy`` (per arm) with delta-method CI and a host-permutation p-value.

    Parameters
    ----------
    x, y : arrays (G,)
        Per-host numerator and denominator sums (e.g. value_sum and n for a mean).
    treated : bool array (G,)
    alternative : {"two-sided", "greater", "less"}
        "greater": treatment/control > ``null_ratio``.
    null_ratio : float
        The ratio under the null (1 + margin for a non-inferiority margin).
    ci_level : float, optional
        Confidence level of the interval; default ``1 − alpha`` two-sided.
    """
    from scipy import stats as sps
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    treated = np.asarray(treated, dtype=bool)
    g_t, g_c = int(treated.sum()), int((~treated).sum())
    min_p = min_attainable_p(g_t, g_c, alternative)
    base = dict(statistic=statistic, g_treatment=g_t, g_control=g_c, alternative=alternative,
                null_ratio=null_ratio, min_attainable_p=min_p, method="permutation")
    if g_t < 2 or g_c < 2:
        return Effect(value_treatment=math.nan, value_control=math.nan, estimate=math.nan, ci_low=math.nan,
                      ci_high=math.nan, p_value=math.nan, error="fewer than 2 hosts in an arm", **base)
    obs = np.vstack([treated, ~treated])
    r, var_log = _ratio_parts(x, y, obs)
    r_t, r_c = r
    if not (np.isfinite(r_t) and np.isfinite(r_c)) or r_t <= 0 or r_c <= 0:
        est = r_t / r_c - 1 if np.isfinite(r_t) and np.isfinite(r_c) and r_c > 0 else math.nan
        return Effect(value_treatment=float(r_t), value_control=float(r_c), estimate=float(est), ci_low=math.nan,
                      ci_high=math.nan, p_value=math.nan,
                      error="a ratio is zero or undefined in an arm (no log-scale comparison)", **base)
    v_t, v_c = var_log
    se = math.sqrt(v_t + v_c)
    df = _welch_df(v_t, v_c, g_t, g_c)
    level = ci_level if ci_level is not None else 1 - alpha
    tq = sps.t.ppf(0.5 + level / 2, df) if se > 0 else 0.0
    log_ratio = math.log(r_t / r_c)
    # permutation of the studentized log ratio, treated hosts rescaled to the control scale
    xs = np.where(treated, x / null_ratio, x)
    rows, exact = relabellings(treated, seed_key)
    rt, vt = _ratio_parts(xs, y, rows)
    rc, vc = _ratio_parts(xs, y, ~rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        tstat = np.log(rt / rc) / np.sqrt(vt + vc)
    p = _perm_p(tstat, alternative, exact)
    return Effect(value_treatment=float(r_t), value_control=float(r_c), estimate=math.exp(log_ratio) - 1,
                  ci_low=math.exp(log_ratio - tq * se) - 1, ci_high=math.exp(log_ratio + tq * se) - 1,
                  p_value=p, df=df, se_log=se, **base)


def _welch_df(v_t: float, v_c: float, g_t: int, g_c: int) -> float:
    den = v_t * v_t / (g_t - 1) + v_c * v_c / (g_c - 1)
    return (v_t + v_c) ** 2 / den if den > 0 else float(g_t + g_c - 2)


# --------------------------------------------------------------------------------------------------
# quantiles
# --------------------------------------------------------------------------------------------------

_CHUNK_ROWS = 1024


def _by_chunks(fn, a: np.ndarray, *args) -> np.ndarray:
    """``fn(a_chunk, *args)`` over row chunks of ``a`` (bounded memory for many relabellings)."""
    return np.concatenate([fn(a[i:i + _CHUNK_ROWS], *args) for i in range(0, a.shape[0], _CHUNK_ROWS)])


def quantile_value(bins: np.ndarray, position: int) -> float:
    return 0.0 if position < 0 else float(bin_mid(bins[position]))


def _quantile_rows(hist: np.ndarray, zeros: np.ndarray, a: np.ndarray, p: float) -> np.ndarray:
    """Index into ``bins`` of the pooled p-quantile of the hosts selected by each row of ``a``
    (−1 = among the zeros), by bisection on the hosts' cumulative counts: O(P·G·log B), never
    materialising a P×B pooled histogram."""
    af = a.astype(np.float64)
    cum = np.cumsum(hist, axis=1) if hist.shape[1] else np.zeros((hist.shape[0], 1))
    z = af @ zeros
    n = z + af @ cum[:, -1]
    target = np.maximum(1, np.ceil(p * n)) - z  # rank among the values > 0
    lo = np.zeros(a.shape[0], dtype=np.int64)
    hi = np.full(a.shape[0], cum.shape[1] - 1, dtype=np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        reached = np.einsum("pg,gp->p", af, cum[:, mid]) >= target
        hi = np.where(reached, mid, hi)
        lo = np.where(reached, lo, mid + 1)
    return np.where(target <= 0, -1, lo)


def arm_quantile_ci(hist: np.ndarray, zeros: np.ndarray, bins: np.ndarray, p: float, z: float = 1.96):
    """Pooled quantile of one arm and its clustered outer interval (values, not positions).

    Returns ``(q, lo, hi, sigma_p)``: ``σ̂_p² = Σ_h (k_h − p n_h)² / (G(G−1) n̄²)`` with
    ``k_h`` = host h's values ≤ q̂.
    """
    g = hist.shape[0]
    n_h = zeros + hist.sum(axis=1)
    total = n_h.sum()
    cum_all = np.concatenate([[zeros.sum()], zeros.sum() + np.cumsum(hist.sum(axis=0))])
    # cum_all[j] = values <= position j-1 (j = 0: zeros only)

    def position(level: float) -> int:
        k = max(1, math.ceil(min(max(level, 0.0), 1.0) * total))
        return int(np.searchsorted(cum_all, k, side="left")) - 1

    pos = position(p)
    k_h = zeros + (hist[:, : pos + 1].sum(axis=1) if pos >= 0 else 0)
    nbar = total / g
    sigma = math.sqrt(float(((k_h - p * n_h) ** 2).sum()) / (g * (g - 1) * nbar * nbar)) if g > 1 else math.nan
    q = quantile_value(bins, pos)
    if not math.isfinite(sigma):  # one host: no between-host spread to estimate
        return q, math.nan, math.nan, sigma
    lo = quantile_value(bins, position(p - z * sigma))
    hi = quantile_value(bins, position(p + z * sigma))
    return q, lo, hi, sigma


def quantile_effect(arr: HostArrays, p: float, statistic: str | None = None, *,
                    alternative: Alternative = "two-sided", null_ratio: float = 1.0, alpha: float = 0.05,
                    seed_key: str = "", ci_level: float | None = None) -> Effect:
    """Relative effect on the pooled ``p`` quantile: clustered outer CI, host-permutation p-value."""
    from scipy import stats as sps
    statistic = statistic or f"p{round(p * 100):d}"
    treated = arr.treated
    g_t, g_c = arr.g_treatment, arr.g_control
    min_p = min_attainable_p(g_t, g_c, alternative)
    base = dict(statistic=statistic, g_treatment=g_t, g_control=g_c, alternative=alternative,
                null_ratio=null_ratio, min_attainable_p=min_p, method="permutation")
    if g_t < 2 or g_c < 2 or arr.n[treated].sum() == 0 or arr.n[~treated].sum() == 0:
        return Effect(value_treatment=math.nan, value_control=math.nan, estimate=math.nan, ci_low=math.nan,
                      ci_high=math.nan, p_value=math.nan, error="fewer than 2 hosts (or no values) in an arm",
                      **base)
    level = ci_level if ci_level is not None else 1 - alpha
    zq = float(sps.norm.ppf(0.5 + level / 2))
    qt, lo_t, hi_t, _ = arm_quantile_ci(arr.hist[treated], arr.n_zero[treated], arr.bins, p, zq)
    qc, lo_c, hi_c, _ = arm_quantile_ci(arr.hist[~treated], arr.n_zero[~treated], arr.bins, p, zq)
    est = qt / qc - 1 if qc > 0 else math.nan
    df = float(g_t + g_c - 2)
    se = math.nan
    ci_low = ci_high = math.nan
    if min(qt, lo_t, hi_t, qc, lo_c, hi_c) > 0:
        se_t = (math.log(hi_t) - math.log(lo_t)) / (2 * zq)
        se_c = (math.log(hi_c) - math.log(lo_c)) / (2 * zq)
        se = math.sqrt(se_t * se_t + se_c * se_c)
        tq = float(sps.t.ppf(0.5 + level / 2, df))
        d = math.log(qt / qc)
        ci_low, ci_high = math.exp(d - tq * se) - 1, math.exp(d + tq * se) - 1
    # permutation: difference of pooled bins (log2 ratio x 128), treated rescaled by the null ratio
    shift = int(round(math.log2(null_ratio) * FINE_PER_OCTAVE))
    bins, hist = arr.bins, arr.hist
    if shift:
        bins, hist = _shift_treated(arr.bins, arr.hist, treated, shift)
    rows, exact = relabellings(treated, seed_key)
    pos_t = _quantile_rows(hist, arr.n_zero, rows, p)
    pos_c = _quantile_rows(hist, arr.n_zero, ~rows, p)
    lookup = bins if bins.size else np.zeros(1, dtype=np.int64)  # all values zero: every position is -1
    bt = np.where(pos_t < 0, _ZERO_POSITION, lookup[np.maximum(pos_t, 0)])
    bc = np.where(pos_c < 0, _ZERO_POSITION, lookup[np.maximum(pos_c, 0)])
    stat = (bt - bc).astype(np.float64)
    pval = _perm_p(stat, alternative, exact)
    if (alternative == "two-sided" and stat[0] == 0) or not np.isfinite(pval):
        pval = 1.0 if stat[0] == 0 else pval
    return Effect(value_treatment=qt, value_control=qc, estimate=est, ci_low=ci_low, ci_high=ci_high,
                  p_value=pval, df=df, se_log=se, **base)


def _shift_treated(bins: np.ndarray, hist: np.ndarray, treated: np.ndarray, shift: int):
    """Re-express the treated hosts' histograms on the control scale: bin b → b − shift."""
    new_bins = np.union1d(bins, bins - shift)
    out = np.zeros((hist.shape[0], new_bins.size), dtype=hist.dtype)
    idx_same = np.searchsorted(new_bins, bins)
    idx_shift = np.searchsorted(new_bins, bins - shift)
    out[np.ix_(~treated, idx_same)] = hist[~treated]
    out[np.ix_(treated, idx_shift)] = hist[treated]
    return new_bins, out


def shift_statistic_rows(hist: np.ndarray, zeros: np.ndarray, a: np.ndarray, tail_floor: float = 1e-3) -> np.ndarray:
    """Variance-weighted sup distance between the pooled CDFs of the two label groups, per row.

    Cumulating is linear, so each host's cumulative counts are computed once and a row's treated
    CDF is one product with them; the control's is the total's minus the treated's, and the pooled
    CDF (both groups together) is the same for every relabelling. A bin no host has values in
    repeats the CDFs of the bin before it, so only occupied bins are compared."""
    counts = np.hstack([zeros[:, None], hist]).astype(np.float64)  # hosts × (zeros + bins)
    occupied = counts.sum(axis=0) > 0
    occupied[0] = True
    cum = np.cumsum(counts, axis=1)[:, occupied]
    total = cum.sum(axis=0)
    pooled = total / total[-1]
    w = np.clip(pooled * (1 - pooled), tail_floor * (1 - tail_floor), None)
    return _by_chunks(_shift_chunk, a, cum, total, np.sqrt(w))


def _shift_chunk(a: np.ndarray, cum: np.ndarray, total: np.ndarray, sqrt_w: np.ndarray) -> np.ndarray:
    cum_t = a.astype(np.float64) @ cum
    cum_c = total - cum_t
    ft = cum_t / cum_t[:, -1:]
    fc = cum_c / cum_c[:, -1:]
    return np.max(np.abs(ft - fc) / sqrt_w, axis=1)


def shift_test(arr: HostArrays, seed_key: str = "") -> Effect:
    """Host-permutation test of a whole-distribution shift (weighted Kolmogorov–Smirnov).

    ``estimate`` is the plain KS distance (share of connections, 0–1) between the arms' pooled
    distributions; ``p_value`` is from the host permutation of the tail-weighted statistic.
    """
    g_t, g_c = arr.g_treatment, arr.g_control
    base = dict(statistic="shift", g_treatment=g_t, g_control=g_c, alternative="two-sided",
                min_attainable_p=min_attainable_p(g_t, g_c, "two-sided" if g_t == g_c else "greater"),
                method="shift-permutation")
    if g_t < 2 or g_c < 2:
        return Effect(value_treatment=math.nan, value_control=math.nan, estimate=math.nan, ci_low=math.nan,
                      ci_high=math.nan, p_value=math.nan, error="fewer than 2 hosts in an arm", **base)
    rows, exact = relabellings(arr.treated, seed_key)
    stat = shift_statistic_rows(arr.hist, arr.n_zero, rows)
    p = _perm_p(stat, "greater", exact)
    t = arr.treated
    ft = np.cumsum(np.concatenate([[arr.n_zero[t].sum()], arr.hist[t].sum(axis=0)]))
    fc = np.cumsum(np.concatenate([[arr.n_zero[~t].sum()], arr.hist[~t].sum(axis=0)]))
    ks = float(np.max(np.abs(ft / ft[-1] - fc / fc[-1])))
    return Effect(value_treatment=math.nan, value_control=math.nan, estimate=ks, ci_low=math.nan,
                  ci_high=math.nan, p_value=p, **base)


# --------------------------------------------------------------------------------------------------
# pre-period regression adjustment (CUPED on host values)
# --------------------------------------------------------------------------------------------------

def host_statistic(arr: HostArrays, kind: str, p: float | None = None) -> np.ndarray:
    """Each host's own value of a statistic: ``mean`` (Σvalue/n), ``ratio`` (Σnum/Σden), ``share``
    (Σabove/n) or ``quantile`` (its ``p`` quantile from its histogram, zeros first); NaN for a host
    without values."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "mean":
            return np.where(arr.n > 0, arr.value_sum / arr.n, np.nan)
        if kind == "ratio":
            return np.where(arr.ratio_den > 0, arr.ratio_num / arr.ratio_den, np.nan)
        if kind == "share":
            return np.where(arr.n > 0, arr.n_above / arr.n, np.nan)
    if kind != "quantile" or p is None:
        raise ValueError(f"unknown host statistic {kind!r}")
    g = arr.n.size
    if g == 0:
        return np.zeros(0)
    pos = _by_chunks(_quantile_rows_chunk, np.eye(g, dtype=bool), arr.hist, arr.n_zero, p) if arr.bins.size else \
        np.full(g, -1)
    lookup = arr.bins if arr.bins.size else np.zeros(1, dtype=np.int64)
    vals = np.where(pos < 0, 0.0, bin_mid(lookup[np.maximum(pos, 0)]))
    return np.where(arr.n > 0, vals, np.nan)


def _quantile_rows_chunk(a, hist, zeros, p):  # argument order of _by_chunks
    return _quantile_rows(hist, zeros, a, p)


def _ancova_rows(y: np.ndarray, x: np.ndarray, a: np.ndarray):
    """For each labelling row of ``a`` (P, G): the covariate-adjusted difference of arm means of
    ``y`` (slope θ of ``y`` on ``x`` pooled within arms), its variance, θ, and the variance of the
    plain difference of means (per-arm residual variances, Welch-like)."""
    af = a.astype(np.float64)
    bf = 1.0 - af
    nt, nc = af.sum(axis=1), bf.sum(axis=1)
    yt, yc = af @ y / nt, bf @ y / nc
    xt, xc = af @ x / nt, bf @ x / nc
    syy_t, syy_c = af @ (y * y) - nt * yt * yt, bf @ (y * y) - nc * yc * yc
    sxy_t, sxy_c = af @ (x * y) - nt * xt * yt, bf @ (x * y) - nc * xc * yc
    sxx_t, sxx_c = af @ (x * x) - nt * xt * xt, bf @ (x * x) - nc * xc * xc
    sxx = sxx_t + sxx_c
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(sxx > 0, (sxy_t + sxy_c) / np.where(sxx > 0, sxx, 1), 0.0)
        ss_t = np.maximum(syy_t - 2 * theta * sxy_t + theta * theta * sxx_t, 0)
        ss_c = np.maximum(syy_c - 2 * theta * sxy_c + theta * theta * sxx_c, 0)
        s2 = (ss_t + ss_c) / np.maximum(nt + nc - 3, 1)
        dx = xt - xc
        var = ss_t / (nt * (nt - 1)) + ss_c / (nc * (nc - 1)) + dx * dx * np.where(sxx > 0, s2 / np.where(
            sxx > 0, sxx, 1), 0)
        var_raw = np.maximum(syy_t, 0) / (nt * (nt - 1)) + np.maximum(syy_c, 0) / (nc * (nc - 1))
    est = (yt - yc) - theta * dx
    return est, var, theta, var_raw


def adjusted_effect(y: np.ndarray, x: np.ndarray, treated: np.ndarray, statistic: str, *, log: bool = True,
                    alternative: Alternative = "two-sided", null_ratio: float = 1.0, margin: float = 0.0,
                    alpha: float = 0.05, seed_key: str = "", ci_level: float | None = None,
                    value_treatment: float = math.nan, value_control: float = math.nan) -> Effect:
    """Effect on host values ``y`` adjusted by the same hosts' pre-period values ``x`` (CUPED /
    ANCOVA with the host as the unit).

    On the log scale (``log=True``: relative effects of a mean, ratio or quantile) each host
    contributes ``log y_h`` with covariate ``log x_h``; on the absolute scale (shares) ``y_h`` and
    ``x_h`` themselves. The estimate is ``(ȳ_t − ȳ_c) − θ(x̄_t − x̄_c)`` with θ the slope pooled
    within arms. The p-value comes from the host permutation of the studentized adjusted
    difference, recomputed (θ included) for every relabelling: under the sharp null the pairs
    ``(y_h, x_h)`` are fixed, so the test keeps its exact size whatever θ turns out to be. A margin
    is a shifted sharp null: treated ``log y`` minus ``log(null_ratio)`` (``y`` minus ``margin``).

    ``value_treatment``/``value_control`` are shown as given (the pooled arm values). The
    estimand is the host-average effect (each host weighs the same), not the pooled one.
    """
    from scipy import stats as sps
    y = np.asarray(y, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    treated = np.asarray(treated, dtype=bool)
    g_t, g_c = int(treated.sum()), int((~treated).sum())
    base = dict(statistic=statistic, g_treatment=g_t, g_control=g_c, alternative=alternative,
                null_ratio=null_ratio, min_attainable_p=min_attainable_p(g_t, g_c, alternative),
                method="permutation-cuped", value_treatment=value_treatment, value_control=value_control)
    nan = math.nan
    if g_t < 2 or g_c < 2:
        return Effect(estimate=nan, ci_low=nan, ci_high=nan, p_value=nan, error="fewer than 2 hosts in an arm",
                      **base)
    if log:
        yl, xl = np.log(y), np.log(x)
        shift = math.log(null_ratio)
    else:
        yl, xl = y.copy(), x.copy()
        shift = margin
    obs = np.vstack([treated])
    est, var, theta, var_raw = (float(v[0]) for v in _ancova_rows(yl, xl, obs))
    se = math.sqrt(max(var, 0.0))
    df = float(max(g_t + g_c - 3, 1))
    level = ci_level if ci_level is not None else 1 - alpha
    tq = float(sps.t.ppf(0.5 + level / 2, df)) if se > 0 else 0.0
    ys = np.where(treated, yl - shift, yl)
    rows, exact = relabellings(treated, seed_key)
    e_rows, v_rows, _, _ = _by_chunks(lambda a: np.vstack(_ancova_rows(ys, xl, a)).T, rows).T
    with np.errstate(divide="ignore", invalid="ignore"):
        tstat = np.where(v_rows > 0, e_rows / np.sqrt(np.where(v_rows > 0, v_rows, 1)), np.sign(e_rows) * 1e300)
    tstat = np.where(np.abs(e_rows) < 1e-12, 0.0, tstat)
    p = _perm_p(tstat, alternative, exact)
    reduction = 1 - var / var_raw if var_raw > 0 else nan
    note = f"cuped θ={theta:.2f} (variance of the host-level estimate {-reduction:+.0%})"
    if log:
        return Effect(estimate=math.exp(est) - 1, ci_low=math.exp(est - tq * se) - 1,
                      ci_high=math.exp(est + tq * se) - 1, p_value=p, df=df, se_log=se, adjustment=note,
                      variance_reduction=reduction, **base)
    return Effect(estimate=est, ci_low=est - tq * se, ci_high=est + tq * se, p_value=p, df=df, adjustment=note,
                  variance_reduction=reduction, **base)


# --------------------------------------------------------------------------------------------------
# multiple testing
# --------------------------------------------------------------------------------------------------

def bh_adjust(p_values: list[float]) -> list[float]:
    """Benjamini–Hochberg adjusted p-values (q-values), by statsmodels' ``multipletests``
    (``fdr_bh``); NaN stays NaN and is not counted among the tests."""
    from statsmodels.stats.multitest import multipletests
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="fdr_bh")[1]
    return out.tolist()
    pv = p[ok]
    order = np.argsort(pv)
    ranked = pv[order] * m / np.arange(1, m + 1)
    q = np.minimum.accumulate(ranked[::-1])[::-1]
    res = np.empty(m)
    res[order] = np.minimum(q, 1.0)
    out[ok] = res
    return out.tolist()
