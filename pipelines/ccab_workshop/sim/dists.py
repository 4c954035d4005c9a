"""Drawing from :class:`~ccab_workshop.sim.scenario.Dist` — pure functions of (dist, n, rng)."""

from __future__ import annotations

import numpy as np
from ccab_workshop.sim.scenario import Dist


def draw(dist: Dist, n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw ``n`` values of ``dist`` (float64), clipped to ``[dist.min, dist.max]``.

    Parameters
    ----------
    dist : Dist
        ``lognormal`` (median, sigma), ``pareto`` (scale = x_m, alpha), ``loguniform`` /
        ``uniform`` (low, high) or ``fixed`` (value).
    n : int
        Number of draws.
    rng : numpy.random.Generator
        Source of randomness; the only state used.

    Returns
    -------
    numpy.ndarray
        Shape ``(n,)``.
    """
    if dist.dist == "lognormal":
        x = dist.median * np.exp(dist.sigma * rng.standard_normal(n))
    elif dist.dist == "pareto":
        x = dist.scale * (1.0 + rng.pareto(dist.alpha, n))
    elif dist.dist == "loguniform":
        x = np.exp(rng.uniform(np.log(dist.low), np.log(dist.high), n))
    elif dist.dist == "uniform":
        x = rng.uniform(dist.low, dist.high, n)
    else:  # fixed
        x = np.full(n, float(dist.value))
    if dist.min is not None or dist.max is not None:
        x = np.clip(x, dist.min if dist.min is not None else -np.inf,
                    dist.max if dist.max is not None else np.inf)
    return x


def jitter(median: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """``median * exp(sigma * N(0, 1))`` elementwise (a lognormal scatter around ``median``)."""
    if sigma == 0:
        return np.asarray(median, dtype=float).copy()
    return median * np.exp(sigma * rng.standard_normal(np.shape(median)))
