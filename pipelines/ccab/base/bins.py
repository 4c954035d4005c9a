"""The fixed log2 bin scheme of the cohort rollups, and histograms read from them (pure).

Every value ``x > 0`` of a metric falls in the fine bin ``b = floor(log2(x) * 128)``, which covers
``[2**(b/128), 2**((b+1)/128))``: bins are 0.54% wide (``REL_WIDTH``), the same for every metric
and unit, and their edges do not depend on the data, so histograms of different hosts and hours
merge exactly by adding counts (``sumMap`` in ClickHouse). Zeros (very common for retransmits)
are never binned: they are counted separately (``n_zero``). Negative, missing and non-finite
values are ``n_missing`` and not part of the distribution. Values far below 1 need no scaling
(a retransmit share of 1e-6 % is bin -2552): bins are signed 32-bit integers.

Heatmaps use coarse bins, ``floor(log2(x) * 8)`` (9% wide); a coarse bin is the fine bin
floored-divided by 16, so coarser views of the fine histograms are exact. Exact zeros get the
sentinel ``ZERO_BIN``.

A quantile read from a histogram is the geometric midpoint of the bin holding the rank-``k``
value (``k = ceil(p * n)``, the inverted-CDF definition), or 0 when that value is one of the
zeros: it is within half a bin (0.27%) of the exact quantile of the same values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

FINE_PER_OCTAVE = 128
COARSE_PER_OCTAVE = 8
ZERO_BIN = -(2**31)
#: relative width of a fine bin: upper / lower - 1
REL_WIDTH = 2 ** (1 / FINE_PER_OCTAVE) - 1
#: largest relative error of a quantile read at a fine bin's geometric midpoint
MAX_QUANTILE_REL_ERROR = 2 ** (0.5 / FINE_PER_OCTAVE) - 1


def fine_bins(values: np.ndarray) -> np.ndarray:
    """Fine bin of each value (values must be > 0 and finite)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size and not (np.all(values > 0) and np.all(np.isfinite(values))):
        raise ValueError("fine_bins: only finite values > 0 have a bin (zeros go to n_zero)")
    return np.floor(np.log2(values) * FINE_PER_OCTAVE).astype(np.int64)


def coarse_bins(values: np.ndarray, per_octave: int = COARSE_PER_OCTAVE) -> np.ndarray:
    """Coarse (heatmap) bin of each value >= 0; zeros get ``ZERO_BIN``."""
    values = np.asarray(values, dtype=np.float64)
    out = np.full(values.shape, ZERO_BIN, dtype=np.int64)
    pos = values > 0
    out[pos] = np.floor(np.log2(values[pos]) * per_octave).astype(np.int64)
    return out


def coarsen(bins: np.ndarray, per_octave: int, from_per_octave: int = FINE_PER_OCTAVE) -> np.ndarray:
    """Bins of ``from_per_octave`` re-expressed with ``per_octave`` (which must divide it)."""
    if from_per_octave % per_octave:
        raise ValueError(f"per_octave={per_octave} must divide {from_per_octave} for exact coarsening")
    bins = np.asarray(bins, dtype=np.int64)
    out = np.floor_divide(bins, from_per_octave // per_octave)
    return np.where(bins == ZERO_BIN, ZERO_BIN, out)


def bin_lower(b, per_octave: int = FINE_PER_OCTAVE):
    """Lower edge of bin ``b`` (inclusive)."""
    return np.exp2(np.asarray(b, dtype=np.float64) / per_octave)


def bin_upper(b, per_octave: int = FINE_PER_OCTAVE):
    """Upper edge of bin ``b`` (exclusive)."""
    return np.exp2((np.asarray(b, dtype=np.float64) + 1) / per_octave)


def bin_mid(b, per_octave: int = FINE_PER_OCTAVE):
    """Geometric midpoint of bin ``b``: the value a quantile in that bin is reported as."""
    return np.exp2((np.asarray(b, dtype=np.float64) + 0.5) / per_octave)


def rank(p: float, n: int) -> int:
    """1-based rank of the ``p`` quantile among ``n`` values (inverted CDF: ``ceil(p * n)``, >= 1).

    Computed exactly as the SQL views do (``greatest(1, ceil(p * n))`` in float64).
    """
    if not 0 <= p <= 1:
        raise ValueError(f"quantile level must be in [0, 1], got {p}")
    return max(1, math.ceil(p * n))


@dataclass(frozen=True)
class Histogram:
    """A metric's distribution as stored in ``cohort_hourly``: zeros plus fine-bin counts.

    Parameters
    ----------
    n_zero : int
        Number of values equal to 0.
    counts : Mapping[int, int]
        Fine bin -> number of values > 0 in it.

    Notes
    -----
    Histograms are sufficient statistics: :meth:`merge` is exact, so a histogram of a host-hour
    and one of a whole arm-day are the same kind of object (what the judge takes as input).
    """

    n_zero: int = 0
    counts: Mapping[int, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.n_zero + sum(self.counts.values())

    @classmethod
    def from_values(cls, values: Iterable[float]) -> "Histogram":
        """Histogram of raw values >= 0 (for tests and the bench's peer; the job bins in SQL)."""
        v = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)
        if np.any(v < 0) or not np.all(np.isfinite(v)):
            raise ValueError("Histogram.from_values: values must be finite and >= 0")
        pos = v[v > 0]
        keys, cnt = np.unique(fine_bins(pos), return_counts=True)
        return cls(int((v == 0).sum()), dict(zip(keys.tolist(), cnt.tolist())))

    def merge(self, other: "Histogram") -> "Histogram":
        merged = dict(self.counts)
        for k, c in other.counts.items():
            merged[k] = merged.get(k, 0) + c
        return Histogram(self.n_zero + other.n_zero, merged)

    def quantile(self, p: float) -> float:
        """The ``p`` quantile (NaN when empty): 0 if the rank falls among the zeros, else the
        geometric midpoint of the bin holding it."""
        n = self.n
        if n == 0:
            return math.nan
        k = rank(p, n)
        if k <= self.n_zero:
            return 0.0
        seen = self.n_zero
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= k:
                return float(bin_mid(b))
        raise AssertionError("rank beyond the histogram")  # unreachable: k <= n

    def cdf(self, x: float) -> float:
        """Share of values <= x, resolved to bin edges (a bin counts once x reaches its lower edge)."""
        n = self.n
        if n == 0:
            return math.nan
        if x < 0:
            return 0.0
        below = self.n_zero + sum(c for b, c in self.counts.items() if bin_lower(b) <= x)
        return below / n


def exact_quantile(values: np.ndarray, p: float) -> float:
    """The exact inverted-CDF quantile (the rank-``ceil(p*n)`` value), the reference for tests."""
    v = np.sort(np.asarray(values, dtype=np.float64))
    if v.size == 0:
        return math.nan
    return float(v[rank(p, v.size) - 1])
