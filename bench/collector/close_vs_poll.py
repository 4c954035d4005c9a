"""Polling only vs close records: per-connection distributions of one real run, in SQL.

Input: the JSON lines of one `ccab-collector run --output stdout` (tcp_sample/1 and tcp_conn/1
records of the same connections; bench/collector/close_vs_poll.sh makes them). They are loaded
through the production loader path (`ccab.ingest.loader.load_files`) into a fresh embedded
warehouse, and two per-connection grains are computed in ClickHouse SQL:

(a) polling only — each connection rebuilt from its snapshots, as the hourly job must without
    close records: its last sample's counters, duration = last - first sample it was seen in;
(b) close records — the kernel's final counters at close (tcp_conn/1), duration = open duration.

Prints a Markdown table (connections, bytes, quantiles of bytes acked, duration, retrans %, RTT)
and writes a PNG of the four per-connection PDFs (log bins, zeros stated in the legend).

Usage: .venv/bin/python bench/collector/close_vs_poll.py RECORDS.jsonl [--png PATH] [--md PATH]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from ccab.base import schema as migrate
from ccab.base.config import REPO_ROOT
from ccab.base.warehouse import ChdbWarehouse
from ccab.ingest.loader import load_files
from matplotlib.figure import Figure

#: per-connection values of each grain; one row per connection
GRAINS = {
    "polling only": """
        SELECT host, sock_id,
               argMax(bytes_acked, ts_ms)                                          AS bytes_acked,
               toFloat64(max(ts_ms) - min(ts_ms))                                  AS duration_ms,
               argMax(if(bytes_sent > 0, 100 * bytes_retrans / bytes_sent, NULL), ts_ms) AS retrans_pct,
               argMax(rtt_us, ts_ms) / 1000                                        AS rtt_ms
        FROM tcp_samples GROUP BY host, sock_id""",
    "close records": """
        SELECT host, sock_id,
               any(bytes_acked)                                                    AS bytes_acked,
               toFloat64(any(coalesce(duration_ms, seen_duration_ms)))             AS duration_ms,
               any(if(bytes_sent > 0, 100 * bytes_retrans / bytes_sent, NULL))      AS retrans_pct,
               any(rtt_us) / 1000                                                  AS rtt_ms
        FROM tcp_conns GROUP BY host, sock_id""",
}
METRICS = (("bytes_acked", "bytes acked"), ("duration_ms", "duration ms"), ("retrans_pct", "retrans %"),
           ("rtt_ms", "RTT ms (srtt at the end)"))


def summarise(wh: ChdbWarehouse) -> dict[str, dict]:
    out = {}
    for name, sql in GRAINS.items():
        row = {}
        n, total = wh.query(f"SELECT count(), sum(bytes_acked) FROM ({sql})").rows[0]
        row["connections"], row["bytes_total"] = int(n), int(total or 0)
        for m, _label in METRICS:
            q = wh.query(f"""SELECT quantilesExactLow(0.1, 0.5, 0.9, 0.99)({m}), avg({m}), countIf({m} = 0),
                                    countIf({m} IS NULL), groupArray(toFloat64({m}))
                             FROM ({sql})""").rows[0]
            row[m] = {"q": [float(v) for v in q[0]], "mean": float(q[1] or 0), "zero": int(q[2]),
                      "values": np.array([v for v in q[4] if v is not None], dtype=float)}
        out[name] = row
    return out


def table(s: dict[str, dict]) -> str:
    a, b = s["polling only"], s["close records"]
    lines = ["| per connection | polling only | close records |", "|---|---:|---:|",
             f"| connections | {a['connections']:,} | {b['connections']:,} |",
             f"| bytes acked, total | {a['bytes_total']:,} | {b['bytes_total']:,} |"]
    for m, label in METRICS:
        for i, p in enumerate(("p10", "p50", "p90", "p99")):
            lines.append(f"| {label} {p} | {a[m]['q'][i]:,.4g} | {b[m]['q'][i]:,.4g} |")
        lines.append(f"| {label} mean | {a[m]['mean']:,.4g} | {b[m]['mean']:,.4g} |")
        lines.append(f"| {label} = 0 (connections) | {a[m]['zero']:,} | {b[m]['zero']:,} |")
        lines.append(f"| {label}: connections with a value | {len(a[m]['values']):,} | {len(b[m]['values']):,} |")
    return "\n".join(lines)


def figure(s: dict[str, dict], title: str) -> Figure:
    fig = Figure(figsize=(11, 7), layout="constrained")
    axes = fig.subplots(2, 2)
    colors = {"polling only": "#c44e52", "close records": "#4c72b0"}
    for ax, (m, label) in zip(axes.flat, METRICS):
        pos = np.concatenate([s[g][m]["values"] for g in s])
        pos = pos[pos > 0]
        if not len(pos):
            ax.set_title(f"{label}: no value > 0")
            continue
        edges = np.logspace(np.log10(pos.min()), np.log10(pos.max()) + 1e-9, 41)
        for g, row in s.items():
            v = row[m]["values"]
            share_zero = (v == 0).mean() if len(v) else 0
            h, _ = np.histogram(v[v > 0], bins=edges)
            frac = h / max(len(v), 1)
            ax.step(edges[:-1], frac, where="post", color=colors[g],
                    label=f"{g}: {len(v):,} conns" + (f", {share_zero:.0%} at 0" if share_zero else ""))
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("share of connections per bin")
        ax.legend(fontsize=8)
    fig.suptitle(title)
    return fig


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", type=Path, help="the collector's JSON lines (tcp_sample/1 + tcp_conn/1)")
    p.add_argument("--png", type=Path, default=REPO_ROOT / "docs" / "collector" / "close-vs-poll.png",
                   help="where the figure goes (default %(default)s)")
    p.add_argument("--md", type=Path, help="also write the table to this file")
    p.add_argument("--title", default="per-connection PDFs of one run: polling only vs close records",
                   help="figure title")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cvp-wh-"))
    try:
        wh = ChdbWarehouse(tmp)
        migrate.migrate(wh, log=lambda _m: None)
        report = load_files(wh, [args.records])
        if report.dead:
            print(f"dead letters: {dict(report.dead)}", file=sys.stderr)
        s = summarise(wh)
        wh.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    md = table(s)
    print(md)
    if args.md:
        args.md.write_text(md + "\n")
    args.png.parent.mkdir(parents=True, exist_ok=True)
    figure(s, args.title).savefig(args.png, dpi=110)
    print(f"figure: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
