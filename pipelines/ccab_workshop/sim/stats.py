"""Realised summary statistics, accumulated chunk by chunk in constant memory.

Values go into fixed log-spaced histograms (:data:`BINS_PER_DECADE` bins per decade, about
1.2% wide; zeros counted apart), which merge exactly across chunks and worker processes and give
quantiles to within half a bin. These feed ``truth.json`` and the ``--plot`` figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

BINS_PER_DECADE = 200
LOG10_MIN = -6.0
LOG10_MAX = 12.0
N_BINS = int((LOG10_MAX - LOG10_MIN) * BINS_PER_DECADE)

#: per-connection metrics over bulk connections (``inflight_bytes_busy`` weighted by busy time, as
#: snapshots of busy sockets see it), and goodput over bulk requests
HIST_METRICS = ("retrans_pct", "inflight_bytes", "inflight_bytes_busy", "rtt_ms", "min_rtt_ms", "rwnd_limited_pct",
                "goodput_mbps")
COUNTERS = ("bulk_connections", "high_loss", "rwnd_limited", "rwnd_limited_ms", "busy_ms", "bulk_requests")
HIGH_LOSS_PCT = 50.0


def log_hist(values: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """(Weighted) counts per log bin of the positive values, and the weight of values <= 0."""
    v = np.asarray(values, dtype=float)
    w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
    pos = v > 0
    idx = np.floor((np.log10(v[pos]) - LOG10_MIN) * BINS_PER_DECADE).astype(np.int64)
    idx = np.clip(idx, 0, N_BINS - 1)
    return np.bincount(idx, weights=w[pos], minlength=N_BINS), float(w[~pos].sum())


def quantile(counts: np.ndarray, zeros: float, q: float) -> float | None:
    """Quantile ``q`` of a histogram (zeros sort first); geometric bin midpoint; None if empty."""
    total = float(counts.sum()) + zeros
    if total <= 0:
        return None
    rank = q * total
    if rank < zeros:
        return 0.0
    cum = np.cumsum(counts)
    i = int(np.searchsorted(cum, rank - zeros, side="right"))
    i = min(i, N_BINS - 1)
    return float(10.0 ** (LOG10_MIN + (i + 0.5) / BINS_PER_DECADE))


@dataclass
class Summary:
    """Histograms and counters keyed by (arm index, segment index)."""

    n_arms: int
    n_segments: int
    hist: np.ndarray = field(init=False)  # (arms, segments, metrics, bins), float64 (weighted counts)
    zeros: np.ndarray = field(init=False)  # (arms, segments, metrics)
    counters: np.ndarray = field(init=False)  # (arms, segments, counters)
    connections: np.ndarray = field(init=False)  # (arms,)
    host_connections: dict[int, int] = field(default_factory=dict)
    records: dict[str, int] = field(default_factory=lambda: {"tcp_sample/1": 0, "tcp_conn/1": 0, "http_request/1": 0})

    def __post_init__(self) -> None:
        self.hist = np.zeros((self.n_arms, self.n_segments, len(HIST_METRICS), N_BINS))
        self.zeros = np.zeros((self.n_arms, self.n_segments, len(HIST_METRICS)))
        self.counters = np.zeros((self.n_arms, self.n_segments, len(COUNTERS)), dtype=np.float64)
        self.connections = np.zeros(self.n_arms, dtype=np.int64)

    def add(self, arm: int, seg: int, metric: str, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        c, z = log_hist(values, weights)
        k = HIST_METRICS.index(metric)
        self.hist[arm, seg, k] += c
        self.zeros[arm, seg, k] += z

    def count(self, arm: int, seg: int, name: str, value: float) -> None:
        self.counters[arm, seg, COUNTERS.index(name)] += value

    def merge(self, other: "Summary") -> None:
        self.hist += other.hist
        self.zeros += other.zeros
        self.counters += other.counters
        self.connections += other.connections
        for h, n in other.host_connections.items():
            self.host_connections[h] = self.host_connections.get(h, 0) + n
        for k, n in other.records.items():
            self.records[k] = self.records.get(k, 0) + n

    def q(self, arm: int, seg: int, metric: str, p: float) -> float | None:
        k = HIST_METRICS.index(metric)
        return quantile(self.hist[arm, seg, k], float(self.zeros[arm, seg, k]), p)

    def stats(self, arm: int, seg: int) -> dict[str, float | int | None]:
        """The named statistics of :data:`ccab_workshop.sim.scenario.StatName` for one arm and segment."""
        cnt = dict(zip(COUNTERS, self.counters[arm, seg]))
        n = cnt["bulk_connections"]

        def share(x: float) -> float | None:
            return float(x / n) if n else None

        return {
            "bulk_connections": int(n),
            "bulk_requests": int(cnt["bulk_requests"]),
            "retrans_pct_p50": self.q(arm, seg, "retrans_pct", 0.5),
            "retrans_pct_p90": self.q(arm, seg, "retrans_pct", 0.9),
            "high_loss_share": share(cnt["high_loss"]),
            "inflight_bytes_p50": self.q(arm, seg, "inflight_bytes", 0.5),
            "inflight_bytes_busy_p50": self.q(arm, seg, "inflight_bytes_busy", 0.5),
            "rtt_ms_p50": (self.q(arm, seg, "rtt_ms", 0.5)),
            "rtt_ms_p90": (self.q(arm, seg, "rtt_ms", 0.9)),
            "min_rtt_ms_p50": (self.q(arm, seg, "min_rtt_ms", 0.5)),
            "goodput_mbps_p10": self.q(arm, seg, "goodput_mbps", 0.1),
            "goodput_mbps_p50": self.q(arm, seg, "goodput_mbps", 0.5),
            "goodput_mbps_p90": self.q(arm, seg, "goodput_mbps", 0.9),
            "rwnd_limited_share": share(cnt["rwnd_limited"]),
            "rwnd_limited_pct": float(100.0 * cnt["rwnd_limited_ms"] / cnt["busy_ms"]) if cnt["busy_ms"] else None,
        }
