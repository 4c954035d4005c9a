"""Figures from view rows (pure: rows in, matplotlib Figure out; no warehouse, no pyplot state).

Axes are logarithmic where the quantity spans decades (RTT, retransmits, in flight, rates);
exact zeros — which a log axis cannot show — get their own strip (heatmaps) or are stated in
the legend with their share (PDFs, CDFs).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

import numpy as np
from ccab.base import atomicfile
from ccab.base.bins import ZERO_BIN
from ccab.base.vocabulary import Metric, get
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

ARM_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")


def _arm_order(arms: Iterable[str]) -> list[str]:
    """Control first, then the others alphabetically."""
    arms = sorted(set(arms))
    return sorted(arms, key=lambda a: (a != "control", a))


def _axis_label(m: Metric) -> str:
    return m.axis_label


def _plain_log_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (0.1, 1, 10, 100) rather than powers of ten."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def _by_arm(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        out[r["arm"]].append(r)
    return out


def _empty(title: str, why: str) -> Figure:
    fig = Figure(figsize=(7, 3))
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center")
    fig.suptitle(title)
    return fig


def heatmap_figure(rows: list[dict], pair: str, title: str, bins_per_octave: int = 4) -> Figure:
    """One panel per arm: share of the arm's connections per (x, y) cell, log-log, with a strip
    at the bottom for y = 0 (e.g. connections without a single retransmit)."""
    if not rows:
        return _empty(title, "no connections in this selection")
    xm, ym = (get(n) for n in pair.split(":"))
    arms = _arm_order(r["arm"] for r in rows)
    per_arm = _by_arm(rows)
    xs = sorted({r["x_bin"] for r in rows if r["x_bin"] != ZERO_BIN})
    ys = sorted({r["y_bin"] for r in rows if r["y_bin"] != ZERO_BIN})
    if not xs:
        return _empty(title, "no connection with x > 0")
    xb = np.arange(xs[0], xs[-1] + 2)
    yb = np.arange(ys[0], ys[-1] + 2) if ys else np.array([0, 1])
    x_edges = np.exp2(xb / bins_per_octave) / xm.scale
    y_edges = np.exp2(yb / bins_per_octave) / ym.scale
    shares = [r["share_of_arm"] for r in rows if r["share_of_arm"] > 0]
    norm = LogNorm(vmin=min(shares), vmax=max(shares))

    fig = Figure(figsize=(4.2 * len(arms) + 1.2, 5.2), layout="constrained")
    grid = fig.add_gridspec(2, len(arms), height_ratios=[8, 1])
    mesh = None
    for i, arm in enumerate(arms):
        main = fig.add_subplot(grid[0, i])
        zero = fig.add_subplot(grid[1, i], sharex=main)
        cells = np.full((len(yb) - 1, len(xb) - 1), np.nan)
        zrow = np.full((1, len(xb) - 1), np.nan)
        n = 0
        for r in per_arm[arm]:
            n += r["connections"]
            if r["x_bin"] == ZERO_BIN:
                continue
            xi = r["x_bin"] - xs[0]
            if r["y_bin"] == ZERO_BIN:
                zrow[0, xi] = r["share_of_arm"]
            else:
                cells[r["y_bin"] - yb[0], xi] = r["share_of_arm"]
        mesh = main.pcolormesh(x_edges, y_edges, np.ma.masked_invalid(cells), norm=norm, cmap="viridis")
        zero.pcolormesh(x_edges, [0, 1], np.ma.masked_invalid(zrow), norm=norm, cmap="viridis")
        main.set_xscale("log")
        main.set_yscale("log")
        zero.set_xscale("log")
        zero.set_yticks([0.5], ["0"])
        _plain_log_ticks(zero.xaxis)
        _plain_log_ticks(main.yaxis)
        for axis in (main.xaxis, main.yaxis, zero.xaxis):  # the cells show the scale; the grid is major only
            axis.set_minor_locator(NullLocator())  # (their ticks were half of the figure's render time)
        main.tick_params(labelbottom=False)
        cc = per_arm[arm][0].get("cc", "")
        main.set_title(f"{arm} ({cc}), {n:,} connections", fontsize=10)
        zero.set_xlabel(_axis_label(xm))
        if i == 0:
            main.set_ylabel(_axis_label(ym))
        main.grid(True, which="major", alpha=0.25)
    fig.colorbar(mesh, ax=fig.axes, label="share of the arm's connections", shrink=0.85)
    fig.suptitle(title, fontsize=11)
    return fig


def _zero_share(rows: list[dict]) -> float:
    total = sum(r["values"] for r in rows)
    zeros = sum(r["values"] for r in rows if r["bin"] == ZERO_BIN)
    return zeros / total if total else 0.0


def pdf_figure(rows: list[dict], metric: str, title: str, bins_per_octave: int = 8) -> Figure:
    """Log-x probability density (per decade) per arm; zeros stated in the legend."""
    if not rows:
        return _empty(title, "no values in this selection")
    m = get(metric)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    per_arm = _by_arm(rows)
    for color, arm in zip(ARM_COLORS * 3, _arm_order(per_arm)):
        arm_rows = per_arm[arm]
        pos = sorted((r for r in arm_rows if r["bin"] != ZERO_BIN), key=lambda r: r["bin"])
        if not pos:
            continue
        bins = np.arange(pos[0]["bin"], pos[-1]["bin"] + 2)
        dens = np.zeros(len(bins) - 1)
        for r in pos:
            dens[r["bin"] - bins[0]] = r["density_per_decade"]
        edges = np.exp2(bins / bins_per_octave) / m.scale
        n = sum(r["values"] for r in arm_rows)
        ax.stairs(dens, edges, color=color, linewidth=1.4,
                  label=f"{arm} ({arm_rows[0]['cc']}): n={n:,}, zeros {_zero_share(arm_rows):.1%}")
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_xlabel(_axis_label(m))
    ax.set_ylabel("density per decade (share of all values)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    return fig


def cdf_figure(rows: list[dict], metric: str, title: str) -> Figure:
    """Log-x CDF per arm; the curve starts at the arm's share of zeros."""
    if not rows:
        return _empty(title, "no values in this selection")
    m = get(metric)
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    per_arm = _by_arm(rows)
    for color, arm in zip(ARM_COLORS * 3, _arm_order(per_arm)):
        arm_rows = sorted(per_arm[arm], key=lambda r: r["bin"])
        pos = [r for r in arm_rows if r["bin"] != ZERO_BIN]
        if not pos:
            continue
        zero = _zero_share(arm_rows)
        x = np.array([pos[0]["value_lo"]] + [r["value_hi"] for r in pos]) / m.scale
        y = np.array([zero] + [r["cum_share"] for r in pos])
        ax.step(x, y, where="post", color=color, linewidth=1.4,
                label=f"{arm} ({arm_rows[0]['cc']})" + (f", zeros {zero:.1%}" if zero else ""))
    ax.set_xscale("log")
    _plain_log_ticks(ax.xaxis)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel(_axis_label(m))
    ax.set_ylabel("share of values below")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title, fontsize=10)
    return fig


def speed_figure(rows: list[dict], title: str) -> Figure:
    """Goodput per client-speed band x arm (Dropbox's central figure): per band, one marker per
    arm at the median with a bar from p10 to p90, log y; the band's requests per arm below."""
    if not rows:
        return _empty(title, "no banded requests in this selection")
    bands = sorted({(r["speed_band_lo_mbps"], r["speed_band"]) for r in rows})
    arms = _arm_order(r["arm"] for r in rows)
    fig = Figure(figsize=(1.9 * len(bands) + 2.5, 4.2))
    ax = fig.add_subplot()
    width = 0.7 / max(len(arms), 1)
    by = {(r["speed_band"], r["arm"]): r for r in rows}
    for j, (arm, color) in enumerate(zip(arms, ARM_COLORS * 3)):
        xs, p50, lo, hi = [], [], [], []
        for i, (_lo, band) in enumerate(bands):
            r = by.get((band, arm))
            if r is None:
                continue
            xs.append(i - 0.35 + width * (j + 0.5))
            p50.append(r["goodput_bps_p50"] / 1e6)
            lo.append(r["goodput_bps_p10"] / 1e6)
            hi.append(r["goodput_bps_p90"] / 1e6)
        cc = next((r["cc"] for r in rows if r["arm"] == arm), "")
        p50a = np.array(p50)
        ax.errorbar(xs, p50a, yerr=[p50a - np.array(lo), np.array(hi) - p50a], fmt="o", color=color, capsize=3,
                    label=f"{arm} ({cc})")
        for x, band in zip(xs, [b for _lo, b in bands if (b, arm) in by]):
            ax.annotate(f"{by[(band, arm)]['requests']:,}", (x, 0), xycoords=("data", "axes fraction"),
                        xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7, color=color)
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    ax.set_xticks(range(len(bands)), [b.removeprefix("speed:") for _lo, b in bands])
    ax.set_xlabel("client speed band (the prefix's median goodput in the pre-period)")
    ax.set_ylabel("goodput in the window, Mbit/s (p10, p50, p90)")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def save_png(fig: Figure, path: Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` atomically (temp file + rename)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    atomicfile.write_with(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    return path
