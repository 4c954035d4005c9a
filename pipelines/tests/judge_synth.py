"""Synthetic host-randomized experiments for the judge's calibration and cross-check tests.

Per host: a random number of connections (unequal hosts), a host random effect on the log scale,
heavy-tailed values (lognormal body with a Pareto tail), a share of exact zeros, and per-connection
denominators for a ratio metric. The connection values are kept so independent computations
(statsmodels on connection rows, a cluster bootstrap) can be run next to the judge's host-level ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ccab.base.bins import fine_bins
from ccab.judge.stats import HostArrays


@dataclass
class Experiment:
    arrays: HostArrays
    values: list[np.ndarray]      # per host, connection values (>= 0)
    dens: list[np.ndarray]        # per host, per-connection denominators (ratio metric)
    nums: list[np.ndarray]        # per host, numerators = value * den (ratio metric)
    treated: np.ndarray


def host_values(rng: np.random.Generator, m: int, host_effect: float, sigma: float = 0.8, zero_share: float = 0.25,
                tail_share: float = 0.05, tail_alpha: float = 1.8) -> np.ndarray:
    v = np.exp(rng.normal(host_effect, sigma, m))
    tail = rng.random(m) < tail_share
    v[tail] *= 1 + rng.pareto(tail_alpha, int(tail.sum()))
    v[rng.random(m) < zero_share] = 0.0
    return v


def experiment(rng: np.random.Generator, g_treatment: int, g_control: int, *, host_sd: float = 0.1,
               mean_connections: int = 800, transform=None, above: float = 5.0, sigma: float = 0.8) -> Experiment:
    """An experiment; ``transform(values, rng) -> values`` is applied to the treated hosts (the
    planted effect), None for an A/A."""
    g = g_treatment + g_control
    treated = np.zeros(g, dtype=bool)
    treated[rng.permutation(g)[:g_treatment]] = True
    values, dens, nums = [], [], []
    for h in range(g):
        m = max(50, int(rng.lognormal(np.log(mean_connections), 0.5)))
        v = host_values(rng, m, rng.normal(0, host_sd), sigma=sigma)
        if treated[h] and transform is not None:
            v = transform(v, rng)
        den = rng.lognormal(10, 1.0, m)
        values.append(v)
        dens.append(den)
        nums.append(v * den)
    return Experiment(arrays(values, dens, nums, treated, above), values, dens, nums, treated)


def arrays(values, dens, nums, treated, above: float = 5.0) -> HostArrays:
    pos_bins = [fine_bins(v[v > 0]) for v in values]
    all_bins = np.unique(np.concatenate(pos_bins)) if pos_bins else np.zeros(0, dtype=np.int64)
    hist = np.zeros((len(values), all_bins.size))
    for i, b in enumerate(pos_bins):
        keys, cnt = np.unique(b, return_counts=True)
        hist[i, np.searchsorted(all_bins, keys)] = cnt
    return HostArrays(
        treated=np.asarray(treated, dtype=bool),
        n=np.array([v.size for v in values], dtype=np.float64),
        n_zero=np.array([(v == 0).sum() for v in values], dtype=np.float64),
        n_above=np.array([(v > above).sum() for v in values], dtype=np.float64),
        value_sum=np.array([v.sum() for v in values]),
        ratio_num=np.array([x.sum() for x in nums]),
        ratio_den=np.array([d.sum() for d in dens]),
        bins=all_bins, hist=hist, hosts=tuple(f"h{i:02d}" for i in range(len(values))))


@dataclass
class PrePeriodExperiment:
    window: HostArrays   # the experiment window, arms assigned
    pre: HostArrays      # the same hosts before the rollout (no arm; ``treated`` all False)


def experiment_with_pre(rng: np.random.Generator, g_treatment: int, g_control: int, *, host_sd: float = 0.1,
                        mean_connections: int = 800, zero_share: float = 0.02, pre_share: float = 1.0,
                        transform=None, above: float = 5.0, sigma: float = 0.8) -> PrePeriodExperiment:
    """Hosts observed twice with the same persistent host effect: a pre-period (no arm, ``pre_share``
    × the connections) and the experiment window (``transform`` on the treated hosts). The ratio
    metric's numerator carries its own host effect (a retransmit-like ratio differs by host)."""
    g = g_treatment + g_control
    treated = np.zeros(g, dtype=bool)
    treated[rng.permutation(g)[:g_treatment]] = True
    effect = rng.normal(0, host_sd, g)
    ratio_effect = rng.normal(0, host_sd, g)
    size = np.maximum(50, rng.lognormal(np.log(mean_connections), 0.5, g)).astype(int)
    out = []
    for period in ("pre", "window"):
        values, dens, nums = [], [], []
        for h in range(g):
            m = size[h] if period == "window" else max(50, int(size[h] * pre_share))
            v = host_values(rng, m, effect[h], sigma=sigma, zero_share=zero_share)
            if period == "window" and treated[h] and transform is not None:
                v = transform(v, rng)
            den = rng.lognormal(10, 1.0, m)
            values.append(v)
            dens.append(den)
            nums.append(v * den * np.exp(ratio_effect[h]))
        out.append(arrays(values, dens, nums, treated if period == "window" else np.zeros(g, dtype=bool), above))
    return PrePeriodExperiment(window=out[1], pre=out[0])
