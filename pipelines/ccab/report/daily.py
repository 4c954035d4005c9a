"""The daily report: the figures analysts ask for, per (pop, rollout), as PNG files + a Markdown table.

``render_report(wh, start, end, out_dir)`` writes, for every (pop, rollout) with rollups in the
window, ``out_dir/<pop>/<rollout>/``:

- ``heatmap_rtt_retrans.png``, ``heatmap_rtt_inflight.png`` — bulk connections (Dropbox's view)
- ``pdf_<metric>.png`` and ``cdf_<metric>.png`` for the metrics in ``FIGURE_METRICS``
- ``summary.md`` — per-arm n, zero share, p10/p50/p90/p99, mean, ratio of every metric

All numbers come from the views; re-running a day overwrites its files.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from ccab.base.chtime import utc_hour
from ccab.base.config import settings
from ccab.base.vocabulary import METRICS, shown_in
from ccab.base.warehouse import Warehouse
from ccab.cohorts.summaries import rollouts_in
from ccab.plots import data, render

HEATMAPS = (("rtt_us:retrans_pct", "heatmap_rtt_retrans.png"), ("rtt_us:inflight_bytes", "heatmap_rtt_inflight.png"))
FIGURE_METRICS = tuple(m.name for m in shown_in("daily"))  # vocabulary order
#: 4 bins per factor of 2 (19%): finer bins alias on in-flight bytes, which are MSS multiples
PDF_BINS_PER_OCTAVE = 4


def report_dir(day: datetime) -> Path:
    """Default output directory of a day's report: ``$CCAB_DATA_DIR/reports/<YYYY-MM-DD>``."""

    return settings().data_dir / "reports" / day.strftime("%Y-%m-%d")


def _fmt(v, scale: float = 1.0) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v / scale:,.3g}"


def summary_markdown(wh: Warehouse, sel: data.Selection) -> str:
    """Per-arm table of every metric (segment 'all') as Markdown."""
    out = [f"# Cohort summary — {sel.label()}", "",
           "Quantiles from the merged 1/128-octave histograms (zeros included); units as in the header.", ""]
    for m in METRICS:
        rows = [r for r in data.quantile_rows(wh, sel, m.name) if r["n"]]
        if not rows:
            continue
        out += [f"## {m.name} [{m.unit}] — per {m.grain}", "",
                "| arm | cc | hosts | n | zeros | p10 | p50 | p90 | p99 | p50 of values > 0 | mean | ratio |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            out.append(f"| {r['arm']} | {r['cc']} | {r['hosts']} | {r['n']:,} | {_fmt(r['zero_share'], 0.01)}% | "
                       + " | ".join(_fmt(r[k], m.scale) for k in ("p10", "p50", "p90", "p99", "p50_nonzero", "mean"))
                       + f" | {_fmt(r['ratio'], m.scale) if r['ratio'] is not None else '–'} |")
        out.append("")
    return "\n".join(out)


def render_report(wh: Warehouse, start: datetime, end: datetime, out_dir: Path) -> list[Path]:
    """Write the report files of ``[start, end)`` under ``out_dir``; return their paths."""
    start, end = utc_hour(start), utc_hour(end)
    written: list[Path] = []
    for pop, rollout in rollouts_in(wh, start, end):
        base = Path(out_dir) / pop / (rollout or "no-rollout")
        for pair, name in HEATMAPS:
            sel = data.Selection(start, end, pop, rollout, "bulk")
            rows = data.heatmap_rows(wh, sel, pair, 4)
            written.append(render.save_png(render.heatmap_figure(rows, pair, f"{pair} per connection\n{sel.label()}", 4),
                                           base / name))
        sel = data.Selection(start, end, pop, rollout, "all")
        for metric in FIGURE_METRICS:
            rows = data.pdf_rows(wh, sel, metric, PDF_BINS_PER_OCTAVE)
            written.append(render.save_png(render.pdf_figure(rows, metric, f"PDF of {metric}\n{sel.label()}",
                                                             PDF_BINS_PER_OCTAVE),
                                           base / f"pdf_{metric}.png"))
            rows = data.cdf_rows(wh, sel, metric)
            written.append(render.save_png(render.cdf_figure(rows, metric, f"CDF of {metric}\n{sel.label()}"),
                                           base / f"cdf_{metric}.png"))
        md = base / "summary.md"
        md.write_text(summary_markdown(wh, sel) + "\n")
        written.append(md)
    return written
