"""Pre-period regression adjustment (CUPED on host values): size, variance cut, fallback.

Seeded; each test prints its numbers (pytest -s). Hosts are observed before the rollout (no arm)
and in the window with the same persistent host effect (judge_synth.experiment_with_pre).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from ccab.judge.core import effect_of
from ccab.judge.power import hosts_needed
from judge_synth import experiment_with_pre

ALPHA = 0.05
STATISTICS = (("rtt_us", "mean"), ("retrans_pct", "ratio"), ("goodput_bps", "p10"), ("rtt_us", "p50"),
              ("rtt_us", "p90"), ("rtt_us", "p99"))


def _band(n: int, alpha: float = ALPHA) -> tuple[float, float]:
    se = math.sqrt(alpha * (1 - alpha) / n)
    return alpha - 2 * se, alpha + 2 * se


@pytest.mark.slow  # a calibration (400 simulated experiments), like test_judge_calibration's
def test_aa_with_adjustment_rejects_at_alpha_for_mean_ratio_and_quantiles():
    """400 A/A experiments, 4–20 hosts per arm (unequal), host effects, heavy tails: the adjusted
    permutation test keeps its size for every statistic."""
    rng = np.random.default_rng(20261124)
    n_sims = 400
    rejections = {s: 0 for _, s in STATISTICS}
    adjusted = {s: 0 for _, s in STATISTICS}
    for i in range(n_sims):
        g_t, g_c = (int(x) for x in rng.integers(4, 21, 2))
        e = experiment_with_pre(rng, g_t, g_c, host_sd=0.3, mean_connections=300)
        for metric, stat in STATISTICS:
            eff = effect_of(e.window, metric, stat, seed_key=f"aa-cuped/{i}/{stat}", pre=e.pre)
            rejections[stat] += eff.p_value <= ALPHA
            adjusted[stat] += eff.adjustment.startswith("cuped")
    lo, hi = _band(n_sims)
    rates = {s: r / n_sims for s, r in rejections.items()}
    print(f"A/A with pre-period adjustment, {n_sims} experiments (band [{lo:.4f}, {hi:.4f}]): {rates}")
    assert all(a == n_sims for a in adjusted.values()), adjusted
    for stat, rate in rates.items():
        assert lo <= rate <= hi, f"{stat}: false-positive rate {rate:.3f} outside alpha ± 2 MC SE [{lo:.3f}, {hi:.3f}]"


def test_strong_host_effects_adjustment_cuts_variance_of_the_effect_by_half_or_more():
    """Host effects dominate (host SD 0.5 on the log scale): the variance of the host-level effect
    estimate over 80 experiments, with and without adjustment, for retransmit ratio and goodput
    p10 — and the power on a planted 15 % p10 drop, and the hosts per arm `ccab power` would ask."""
    rng = np.random.default_rng(18)
    n_sims, g = 80, 8
    cases = (("retrans_pct", "ratio", 1.15), ("goodput_bps", "p10", 0.85))
    out = {}
    for metric, stat, factor in cases:
        raw, adj, hits_raw, hits_adj, red = [], [], 0, 0, []
        for i in range(n_sims):
            e = experiment_with_pre(rng, g, g, host_sd=0.5, mean_connections=300)
            plain = effect_of(e.window, metric, stat, seed_key=f"v/{i}")
            cuped = effect_of(e.window, metric, stat, seed_key=f"v/{i}", pre=e.pre)
            raw.append(math.log1p(plain.estimate))
            adj.append(math.log1p(cuped.estimate))
            red.append(cuped.variance_reduction)
            if stat == "ratio":
                e2 = experiment_with_pre(rng, g, g, host_sd=0.5, mean_connections=300)
                w = e2.window  # a ratio effect: the treated hosts' numerators scaled
                num = np.where(w.treated, w.ratio_num * factor, w.ratio_num)
                e2 = type(e2)(window=replace(w, ratio_num=num), pre=e2.pre)
            else:
                e2 = experiment_with_pre(rng, g, g, host_sd=0.5, mean_connections=300,
                                         transform=lambda v, _r: v * factor)
            hits_raw += effect_of(e2.window, metric, stat, seed_key=f"p/{i}").p_value <= ALPHA
            hits_adj += effect_of(e2.window, metric, stat, seed_key=f"p/{i}", pre=e2.pre).p_value <= ALPHA
        cut = 1 - np.var(adj) / np.var(raw)
        sigma_raw = math.sqrt(g) * np.std(raw) / math.sqrt(2)   # per-host SD implied by the estimate's SD
        sigma_adj = math.sqrt(g) * np.std(adj) / math.sqrt(2)
        out[(metric, stat)] = dict(variance_cut=round(float(cut), 3), reported_cut=round(float(np.median(red)), 3),
                                   power_raw=hits_raw / n_sims, power_adj=hits_adj / n_sims,
                                   hosts_needed_raw=hosts_needed(abs(factor - 1), sigma_raw),
                                   hosts_needed_adj=hosts_needed(abs(factor - 1), sigma_adj))
    print(f"strong host effects, {g} vs {g} hosts, {n_sims} experiments: {out}")
    for key, o in out.items():
        assert o["variance_cut"] >= 0.5, (key, o)
        assert o["reported_cut"] >= 0.5, (key, o)
        assert o["power_adj"] > o["power_raw"], (key, o)
        assert o["hosts_needed_adj"] < o["hosts_needed_raw"], (key, o)


def test_a_host_without_pre_period_falls_back_to_the_unadjusted_test_and_says_so():
    rng = np.random.default_rng(5)
    e = experiment_with_pre(rng, 6, 6)
    keep = np.arange(e.pre.n.size) != 3
    pre = replace(e.pre, treated=e.pre.treated[keep], n=e.pre.n[keep], n_zero=e.pre.n_zero[keep],
                  n_above=e.pre.n_above[keep], value_sum=e.pre.value_sum[keep], ratio_num=e.pre.ratio_num[keep],
                  ratio_den=e.pre.ratio_den[keep], hist=e.pre.hist[keep],
                  hosts=tuple(h for h, k in zip(e.pre.hosts, keep) if k))
    plain = effect_of(e.window, "rtt_us", "p50", seed_key="x")
    eff = effect_of(e.window, "rtt_us", "p50", seed_key="x", pre=pre)
    assert eff.adjustment.startswith("off (hosts without pre-period data: h03)"), eff.adjustment
    assert eff.p_value == plain.p_value and eff.estimate == plain.estimate
    assert math.isnan(eff.variance_reduction)


def test_adjusted_margin_test_is_one_sided_against_the_shifted_null():
    """A treated arm exactly at the margin (+25 % ratio) is rejected at most at alpha; well beyond, always."""
    rng = np.random.default_rng(9)
    at, beyond, n = 0, 0, 80
    for i in range(n):
        e = experiment_with_pre(rng, 8, 8, host_sd=0.5, mean_connections=300)
        w = e.window
        for factor in (1.25, 2.0):
            ww = replace(w, ratio_num=np.where(w.treated, w.ratio_num * factor, w.ratio_num))
            p = effect_of(ww, "retrans_pct", "ratio", alternative="greater", null_ratio=1.25,
                          seed_key=f"m/{i}", pre=e.pre).p_value
            if factor == 1.25:
                at += p <= ALPHA
            else:
                beyond += p <= ALPHA
    lo, hi = _band(n)
    print(f"at the margin: {at / n:.3f} rejected; at 2x: {beyond / n:.3f}")
    assert at / n <= hi
    assert beyond / n >= 0.95


def test_power_variance_reduction_is_the_squared_correlation_of_consecutive_windows():
    """`ccab power`'s "with adjustment" column: hosts whose statistic persists (host SD 0.5, noise
    0.1 per window) lose 1 − 0.1²/(0.5² + 0.1²) ≈ 96 % of the variance; pure noise loses nothing."""
    from ccab.judge.power import variance_reduction_from_windows
    rng = np.random.default_rng(2)
    hosts = [f"h{i}" for i in range(40)]
    effect = rng.normal(0, 0.5, len(hosts))
    persistent = {(w, "control"): {h: float(np.exp(e + rng.normal(0, 0.1))) for h, e in zip(hosts, effect)}
                  for w in range(6)}
    noise = {(w, "control"): {h: float(np.exp(rng.normal(0, 0.5))) for h in hosts} for w in range(6)}
    rho2, pairs = variance_reduction_from_windows(persistent)
    assert pairs == 5 * 40 and 0.9 < rho2 < 0.99
    assert variance_reduction_from_windows(noise)[0] < 0.05
    assert math.isnan(variance_reduction_from_windows({(0, "a"): {"h": 1.0}})[0])
