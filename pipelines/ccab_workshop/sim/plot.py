"""``ccab sim --plot``: per-arm PDFs of retransmits, bytes in flight, RTT and goodput.

Drawn from the generator's log histograms (no re-reading of the records), on log x axes, as
densities per decade so that the areas compare across arms of different sizes — the form of
the Dropbox BBRv2 figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ccab_workshop.sim.stats import BINS_PER_DECADE, HIST_METRICS, LOG10_MIN, N_BINS, Summary

PANELS = (
    ("retrans_pct", "retransmitted bytes per connection (%)", (1e-2, 100.0)),
    ("inflight_bytes", "bytes in flight", (2e3, 2e7)),
    ("rtt_ms", "smoothed RTT (ms)", (1.0, 1e3)),
    ("goodput_mbps", "goodput of bulk responses, nginx (Mbit/s)", (0.1, 1e3)),
)
REBIN = 10  # 200 bins/decade -> 20


def pdf_per_decade(counts: np.ndarray, zeros: float) -> tuple[np.ndarray, np.ndarray, float]:
    """(bin centres, density per decade, share of zeros) of a stats histogram, rebinned."""
    total = counts.sum() + zeros
    c = counts[: N_BINS // REBIN * REBIN].reshape(-1, REBIN).sum(axis=1)
    width_dec = REBIN / BINS_PER_DECADE
    centres = 10.0 ** (LOG10_MIN + (np.arange(len(c)) + 0.5) * width_dec)
    dens = c / total / width_dec if total else c * 0.0
    return centres, dens, (zeros / total if total else 0.0)


def plot_pdfs(summary: Summary, arm_names: list[str], arm_labels: list[str], title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5), constrained_layout=True)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    for ax, (metric, label, xlim) in zip(axes.ravel(), PANELS):
        k = HIST_METRICS.index(metric)
        for a, name in enumerate(arm_names):
            x, d, z = pdf_per_decade(summary.hist[a, 0, k], float(summary.zeros[a, 0, k]))
            p50 = summary.q(a, 0, metric, 0.5)
            extra = f", {100 * z:.0f}% zero" if metric == "retrans_pct" and z >= 0.005 else ""
            ax.plot(x, d, drawstyle="steps-mid", color=colors[a % len(colors)], lw=1.6,
                    label=f"{arm_labels[a]} (p50 {p50:.3g}{extra})" if p50 is not None else arm_labels[a])
        ax.set_xscale("log")
        ax.set_xlim(*xlim)
        ax.set_ylim(bottom=0)
        ax.set_xlabel(label)
        ax.set_ylabel("density per decade")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left" if metric != "goodput_mbps" else "upper left")
    fig.suptitle(title + " — bulk connections (>= 1 MiB), per arm", fontsize=12)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
