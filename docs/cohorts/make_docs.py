"""Regenerate the cohort docs from a simulated canary: the PNGs in docs/cohorts/ and the example
outputs in sql/README.md (every ```text block right after a ```sql block is replaced by what the
query returns).

    .venv/bin/python docs/cohorts/make_docs.py [--data-dir DIR]

Runs `ccab sim canary-tyo1 --hours 6` (deterministic: seed 20201), loads it, runs
`ccab analyze` and renders the figures — about a minute. The data dir (a temp dir by default)
is left in place when given.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START = datetime(2025, 11, 20, tzinfo=timezone.utc)
END = datetime(2025, 11, 20, 6, tzinfo=timezone.utc)
FIGURES = {
    "heatmap_rtt_retrans.png": ("heatmap", "rtt_us:retrans_pct"),
    "heatmap_rtt_inflight.png": ("heatmap", "rtt_us:inflight_bytes"),
    "pdf_retrans_pct.png": ("pdf", "retrans_pct"),
    "pdf_inflight_bytes_per_sample.png": ("pdf", "inflight_bytes_per_sample"),
    "pdf_rtt_us.png": ("pdf", "rtt_us"),
    "cdf_goodput_bps.png": ("cdf", "goodput_bps"),
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, help="CCAB_DATA_DIR to use (default: a temp dir, removed after)")
    args = p.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="ccab-docs-"))
    os.environ["CCAB_DATA_DIR"] = str(data_dir)
    os.environ.pop("CCAB_CLICKHOUSE_URL", None)
    from ccab import cli

    sim = data_dir / "sim"
    if not (sim / "truth.json").exists():
        assert cli.main(["sim", "canary-tyo1", "--hours", "6", "--out", str(sim), "--no-progress"]) == 0
        assert cli.main(["load", *map(str, sorted(sim.glob("*.jsonl")))]) == 0
    assert cli.main(["analyze", "--from", "2025-11-20T00:00Z", "--to", "2025-11-20T06:00Z", "--no-progress"]) == 0

    from ccab.report.daily import PDF_BINS_PER_OCTAVE
    from ccab.pipeline import open_warehouse as warehouse
    from ccab.plots import data, render
    from ccab.cli.query import format_table

    out = REPO / "docs" / "cohorts"
    with warehouse() as wh:
        for name, (kind, what) in FIGURES.items():
            if kind == "heatmap":
                sel = data.Selection(START, END, "tyo1", "tyo1-bbr-canary", "bulk")
                fig = render.heatmap_figure(data.heatmap_rows(wh, sel, what, 4), what,
                                            f"{what} per bulk connection\n{sel.label()}", 4)
            elif kind == "pdf":
                sel = data.Selection(START, END, "tyo1", "tyo1-bbr-canary", "all")
                fig = render.pdf_figure(data.pdf_rows(wh, sel, what, PDF_BINS_PER_OCTAVE), what,
                                        f"PDF of {what}\n{sel.label()}", PDF_BINS_PER_OCTAVE)
            else:
                sel = data.Selection(START, END, "tyo1", "tyo1-bbr-canary", "all")
                fig = render.cdf_figure(data.cdf_rows(wh, sel, what), what, f"CDF of {what}\n{sel.label()}")
            print("wrote", render.save_png(fig, out / name))

        readme = REPO / "sql" / "README.md"
        text = readme.read_text()

        def fill(m: re.Match) -> str:
            res = wh.query(m.group(1))
            return f"```sql\n{m.group(1)}```\n\n```text\n{format_table(res, 40)}\n```"

        readme.write_text(re.sub(r"```sql\n(.*?)```\n\n```text\n.*?```", fill, text, flags=re.S))
        print("updated", readme)
    if not args.data_dir:
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
