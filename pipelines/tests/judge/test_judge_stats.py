"""Every estimator of the judge checked against an independent computation.

Independent means another package or another method: statsmodels cluster-robust OLS on the
connection rows (ratio/mean/share variances), scipy's exact permutation test (p-values), a host
bootstrap on raw values (quantile intervals), statsmodels' BH, and published group-sequential
boundaries. Where a number is pasted, the command that produced it is written above it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from ccab.base.bins import MAX_QUANTILE_REL_ERROR
from ccab.judge.core import effect_of
from ccab.judge.sequential import nominal_alphas, obf_spending
from ccab.judge.stats import (arm_quantile_ci, arm_ratio, bh_adjust, quantile_effect, ratio_effect,
                              share_difference_effect, shift_test)
from judge_synth import arrays, experiment
from scipy import stats as sps
from scipy.stats import norm
from statsmodels.stats.multitest import multipletests


def _sandwich_parts(x_t, y_t, x_c, y_c):
    """Our per-arm delta-method variances with the per-arm G/(G-1) factor removed."""
    (_, v_t), (_, v_c) = arm_ratio(x_t, y_t), arm_ratio(x_c, y_c)
    g_t, g_c = len(x_t), len(x_c)
    return v_t * (g_t - 1) / g_t + v_c * (g_c - 1) / g_c


def test_mean_variance_matches_statsmodels_cluster_robust_ols_reference():
    # reference numbers from:
    #   df = rows of (host, treat, y) below; smf.ols("y ~ treat", df).fit(cov_type="cluster",
    #        cov_kwds={"groups": df.host}, use_t=True) -> params.treat, bse.treat
    #   (statsmodels 0.15.0)
    ref_diff, ref_bse = 0.976190476190476, 0.17175173458764809
    hosts = {"t1": (1, [1.0, 2.0, 4.0]), "t2": (1, [2.0, 3.0]), "t3": (1, [5.0, 1.0, 1.0, 2.0]),
             "c1": (0, [1.0, 1.5]), "c2": (0, [0.5, 1.0, 2.0]), "c3": (0, [2.5, 1.0])}
    x_t = [sum(v) for t, v in hosts.values() if t]
    y_t = [len(v) for t, v in hosts.values() if t]
    x_c = [sum(v) for t, v in hosts.values() if not t]
    y_c = [len(v) for t, v in hosts.values() if not t]
    (r_t, _), (r_c, _) = arm_ratio(x_t, y_t), arm_ratio(x_c, y_c)
    assert r_t - r_c == pytest.approx(ref_diff, rel=1e-12)
    n, g = sum(y_t) + sum(y_c), 6
    # CRV1 = G/(G-1) * (N-1)/(N-K) * sandwich; ours has the same sandwich
    assert ref_bse ** 2 == pytest.approx(g / (g - 1) * (n - 1) / (n - 2) * _sandwich_parts(x_t, y_t, x_c, y_c),
                                         rel=1e-9)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ratio_and_share_variances_match_statsmodels_on_connection_rows(seed):
    rng = np.random.default_rng(seed)
    e = experiment(rng, 6, 9, mean_connections=300)
    rows = []
    for h, (v, d, tr) in enumerate(zip(e.values, e.dens, e.treated)):
        rows += [(h, int(tr), vi, di) for vi, di in zip(v, d)]
    df = pd.DataFrame(rows, columns=["host", "treat", "value", "den"])
    g, n = len(e.values), len(df)
    correction = g / (g - 1) * (n - 1) / (n - 2)
    a, t = e.arrays, e.treated
    # mean: OLS of the value on treat
    m = smf.ols("value ~ treat", df).fit(cov_type="cluster", cov_kwds={"groups": df.host})
    assert m.bse["treat"] ** 2 == pytest.approx(
        correction * _sandwich_parts(a.value_sum[t], a.n[t], a.value_sum[~t], a.n[~t]), rel=1e-7)
    # ratio of sums: WLS of value (= num/den) on treat with weights den is the ratio-of-sums difference
    w = smf.wls("value ~ treat", df, weights=df.den).fit(cov_type="cluster", cov_kwds={"groups": df.host})
    (r_t, _), (r_c, _) = arm_ratio(a.ratio_num[t], a.ratio_den[t]), arm_ratio(a.ratio_num[~t], a.ratio_den[~t])
    assert w.params["treat"] == pytest.approx(r_t - r_c, rel=1e-9)
    assert w.bse["treat"] ** 2 == pytest.approx(
        correction * _sandwich_parts(a.ratio_num[t], a.ratio_den[t], a.ratio_num[~t], a.ratio_den[~t]), rel=1e-7)
    # share above a threshold: OLS of the indicator
    df["above"] = (df.value > 5.0).astype(float)
    s = smf.ols("above ~ treat", df).fit(cov_type="cluster", cov_kwds={"groups": df.host})
    eff = share_difference_effect(a.n_above, a.n, t)
    assert eff.estimate == pytest.approx(s.params["treat"], rel=1e-9)
    assert s.bse["treat"] ** 2 == pytest.approx(
        correction * _sandwich_parts(a.n_above[t], a.n[t], a.n_above[~t], a.n[~t]), rel=1e-7)


def test_permutation_p_value_equals_scipy_exact_permutation_test():
    rng = np.random.default_rng(11)
    e = experiment(rng, 5, 6, transform=lambda v, r: v * 1.15)
    a = e.arrays
    x, y = a.value_sum, a.n

    def studentized(it, ic):
        (rt, vt), (rc, vc) = arm_ratio(x[it], y[it]), arm_ratio(x[ic], y[ic])
        return math.log(rt / rc) / math.sqrt(vt / rt ** 2 + vc / rc ** 2)

    idx_t, idx_c = np.flatnonzero(a.treated), np.flatnonzero(~a.treated)
    for alternative in ("greater", "two-sided"):
        ref = sps.permutation_test((idx_t, idx_c), studentized, permutation_type="independent",
                                   vectorized=False, n_resamples=np.inf, alternative=alternative)
        ours = ratio_effect(x, y, a.treated, "mean", alternative=alternative)
        if alternative == "greater":
            assert ours.p_value == pytest.approx(ref.pvalue, abs=1e-12)
        else:  # scipy doubles the smaller tail; we count |T| >= |t_obs|: both exact, close
            assert ours.p_value == pytest.approx(ref.pvalue, abs=2 / math.comb(11, 5) + 0.02)


def test_pooled_quantile_and_clustered_interval_against_raw_values_and_a_host_bootstrap():
    rng = np.random.default_rng(5)
    e = experiment(rng, 15, 15, mean_connections=1500)
    t = e.treated
    a = e.arrays
    raw = np.concatenate([v for v, tr in zip(e.values, t) if tr])
    q, lo, hi, _ = arm_quantile_ci(a.hist[t], a.n_zero[t], a.bins, 0.9, z=1.0)
    exact = np.quantile(raw, 0.9, method="inverted_cdf")
    assert abs(q / exact - 1) <= MAX_QUANTILE_REL_ERROR + 1e-12
    se_ours = (math.log(hi) - math.log(lo)) / 2
    # independent: resample hosts with replacement, the pooled exact p90 of the raw values
    hosts = [v for v, tr in zip(e.values, t) if tr]
    boot = []
    for _ in range(1500):
        pick = rng.integers(0, len(hosts), len(hosts))
        boot.append(math.log(np.quantile(np.concatenate([hosts[i] for i in pick]), 0.9, method="inverted_cdf")))
    se_boot = float(np.std(boot, ddof=1))
    assert se_ours == pytest.approx(se_boot, rel=0.3), (se_ours, se_boot)


def test_benjamini_hochberg_matches_statsmodels():
    p = [0.001, 0.2, 0.04, 0.03, float("nan"), 0.5, 0.0101]
    ours = bh_adjust(p)
    ok = [x for x in p if x == x]
    ref = multipletests(ok, method="fdr_bh")[1]
    assert [x for x in ours if x == x] == pytest.approx(list(ref))
    assert math.isnan(ours[4])


def test_benjamini_hochberg_reproduces_the_papers_example():
    # Benjamini & Hochberg (1995), section 4.1: 15 p-values; at q = 0.05 the procedure rejects the
    # four smallest. Adjusted values by hand: q_(i) = min over j >= i of p_(j) * 15 / j.
    p = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262,
         0.5719, 0.6528, 0.7590, 1.0000]
    q = bh_adjust(list(reversed(p)))[::-1]  # order does not matter
    assert [x <= 0.05 for x in q] == [True] * 4 + [False] * 11
    hand = [0.0015, 0.003, 0.0095, 0.035625, 0.0603, 0.0298 * 15 / 7, 0.0298 * 15 / 7, 0.0645, 0.0765,
            0.486, 0.4262 * 15 / 11, 0.5719 * 15 / 12, 0.6528 * 15 / 13, 0.7590 * 15 / 14, 1.0]
    assert q == pytest.approx(hand)
    assert math.isnan(bh_adjust([float("nan"), 0.01])[0]) and bh_adjust([float("nan"), 0.01])[1] == 0.01


def test_group_sequential_boundaries_match_published_lan_demets_obrien_fleming():
    # one-sided alpha 0.025, 5 equally spaced looks, Lan-DeMets O'Brien-Fleming spending; from R:
    #   gsDesign::gsDesign(k = 5, test.type = 1, alpha = 0.025, sfu = sfLDOF)$upper$bound
    #   4.8769 3.3569 2.6803 2.2898 2.0310   (also Jennison & Turnbull 2000, table 7.6)
    ref = [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]
    z = [float(norm.isf(a)) for a in nominal_alphas(5, 0.025)]
    assert z == pytest.approx(ref, abs=0.003)
    assert obf_spending(1.0, 0.05) == pytest.approx(0.05)
    assert nominal_alphas(1, 0.05) == (0.05,)


def test_guardrail_margin_semantics_on_planted_effects():
    rng = np.random.default_rng(9)
    big = experiment(rng, 8, 8, transform=lambda v, r: v * 2.0)
    small = experiment(rng, 8, 8, transform=lambda v, r: v * 1.05)
    # 2x is beyond a +25 % margin: the one-sided test of "within the margin" rejects
    assert effect_of(big.arrays, "rtt_us", "mean", alternative="greater", null_ratio=1.25).p_value < 0.01
    # +5 % is not beyond +25 %, and is shown within +25 %
    assert effect_of(small.arrays, "rtt_us", "mean", alternative="greater", null_ratio=1.25).p_value > 0.5
    assert effect_of(small.arrays, "rtt_us", "mean", alternative="less", null_ratio=1.25).p_value < 0.05
    # quantile with a margin: the treated histogram is shifted onto the control scale
    assert effect_of(big.arrays, "rtt_us", "p50", alternative="greater", null_ratio=1.25).p_value < 0.01
    assert effect_of(small.arrays, "rtt_us", "p50", alternative="less", null_ratio=1.25).p_value < 0.05


def test_shift_test_catches_a_tail_change_the_median_does_not_show():
    rng = np.random.default_rng(21)

    def tail(v, r):
        out = v.copy()
        hit = r.random(v.size) < 0.03
        out[hit] = out[hit] * 50 + 50
        return out

    e = experiment(rng, 8, 8, mean_connections=2000, host_sd=0.03, transform=tail)
    assert effect_of(e.arrays, "rtt_us", "p50").p_value > 0.05
    shift = shift_test(e.arrays, seed_key="t")
    assert shift.p_value < 0.01 and 0 < shift.estimate < 0.1


def test_degenerate_inputs_return_errors_not_exceptions():
    one_host = arrays([np.array([1.0, 2.0]), np.array([1.0]), np.array([3.0])], [np.ones(2), np.ones(1), np.ones(1)],
                      [np.ones(2), np.ones(1), np.ones(1)], np.array([True, False, False]))
    eff = effect_of(one_host, "rtt_us", "mean")
    assert eff.error and math.isnan(eff.p_value)
    q = quantile_effect(one_host, 0.5)
    assert q.error
    zeros = arrays([np.zeros(5)] * 4, [np.ones(5)] * 4, [np.zeros(5)] * 4, np.array([True, True, False, False]))
    assert effect_of(zeros, "rtt_us", "p50").p_value == 1.0
    assert effect_of(zeros, "retrans_pct", "ratio").error


def test_shift_statistic_of_each_relabelling_is_the_weighted_sup_distance_of_its_pooled_cdfs():
    """The statistic computed from each host's cumulative counts (shift_statistic_rows) equals the
    definition applied row by row: pool each group's zeros and histogram, take both CDFs and the
    pooled one, and the largest |F_t - F_c| / sqrt(max(F(1-F), floor)) — empty bins included."""
    from ccab.judge.stats import shift_statistic_rows

    rng = np.random.default_rng(3)
    hist = rng.poisson(0.7, (9, 60)).astype(np.float64)
    hist[:, 20:30] = 0  # bins no host has values in
    zeros = rng.poisson(2, 9).astype(np.float64)
    rows = rng.integers(0, 2, (50, 9)).astype(bool)
    rows[:, 0], rows[:, 1] = True, False  # both groups never empty
    floor = 1e-3 * (1 - 1e-3)

    def by_definition(treated):
        t = np.concatenate([[zeros[treated].sum()], hist[treated].sum(axis=0)])
        c = np.concatenate([[zeros[~treated].sum()], hist[~treated].sum(axis=0)])
        ft, fc = np.cumsum(t) / t.sum(), np.cumsum(c) / c.sum()
        pooled = np.cumsum(t + c) / (t.sum() + c.sum())
        return np.max(np.abs(ft - fc) / np.sqrt(np.maximum(pooled * (1 - pooled), floor)))

    expected = [by_definition(r) for r in rows]
    assert shift_statistic_rows(hist, zeros, rows) == pytest.approx(expected, rel=1e-12)
