"""Copy the figures of lab runs into docs/lab/<experiment>/ and print their tables as Markdown.

    .venv/bin/python docs/lab/make_docs.py RUN_DIR [RUN_DIR ...] > /tmp/tables.md

(each RUN_DIR already has report/ from `ccab lab run` or `ccab lab report`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def ci(m, fmt="{:.2f}", scale=1.0):
    if not m or m.get("mean") is None:
        return "–"
    s = fmt.format(m["mean"] * scale)
    return s + (" ± " + fmt.format(m["ci"] * scale) if m.get("ci") is not None else "")


def md(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def pivot(summary, var, metric, fmt):
    vals = sorted({float(r["vars"][var]) for r in summary["cases"] if var in r["vars"]})
    ccs = sorted({r["algorithms"][0] for r in summary["cases"] if var in r["vars"]})
    rows = []
    for cc in ccs:
        row = [cc]
        for v in vals:
            r = next((r for r in summary["cases"] if r["algorithms"] == [cc] and float(r["vars"][var]) == v), None)
            row.append(ci(r[metric], fmt) if r else "–")
        rows.append(row)
    return md([f"cc \\ {var}"] + [f"{v:g}" for v in vals], rows)


def main(run_dirs: list[str]) -> None:
    for rd in map(Path, run_dirs):
        run = json.loads((rd / "run.json").read_text())
        res = json.loads((rd / "results.json").read_text())
        dest = HERE / run["experiment"]
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for png in sorted((rd / "report").glob("*.png")):
            shutil.copy(png, dest / png.name)
        s = res["summary"]
        print(f"\n### {run['experiment']} — `{run['rollout_id']}` (repeats: {run['repeat']}, seed {run['seed']})\n")
        print(f"rows: tcp_samples {res['rows']['tcp_rows']}, http_requests {res['rows']['http_rows']}; "
              f"unavailable: {', '.join(run['algorithms_unavailable']) or 'none'}\n")
        kind = res["kind"]
        if kind == "fairness":
            print(md(["case", "runs", "goodput sum (Mbit/s)", "Jain", "retrans (%)", "collapse rate",
                      "goodput by cc (Mbit/s)"],
                     [[r["case"], r["repeats"], ci(r["sum_goodput_mbit"], "{:.1f}"), ci(r["jain"], "{:.3f}"),
                       ci(r["retrans_pct"]), f"{r['collapse_rate']:.0%}",
                       ", ".join(f"{k} {ci(v, '{:.1f}')}" for k, v in r["goodput_by_cc_mbit"].items())]
                      for r in s["cases"]]))
        elif kind == "size-fairness":
            rows = []
            for r in s["cases"]:
                for size, c in sorted(r["classes"].items(), key=lambda kv: int(kv[0])):
                    rows.append([r["case"], f"{int(size) // 1024} KB", c["n"], ci(c["p50_ms"], "{:.0f}"),
                                 ci(c["p99_ms"], "{:.0f}"), ci(c["p999_ms"], "{:.0f}"),
                                 ci(c["goodput_p50_bps"], "{:.2f}", 1e-6)])
            print(md(["case", "size", "requests", "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "per-request goodput p50 (Mbit/s)"], rows))
            print()
            print(md(["case", "stream goodput (Mbit/s)"], [[r["case"], ci(r["sum_goodput_mbit"], "{:.1f}")] for r in s["cases"]]))
        elif kind == "buffer-sweep":
            print("Goodput of the two flows (Mbit/s):\n")
            print(pivot(s, "buffer_bdp", "sum_goodput_mbit", "{:.1f}"))
            print("\nRetransmitted bytes (%):\n")
            print(pivot(s, "buffer_bdp", "retrans_pct", "{:.2f}"))
            print("\nRTT p50 (ms):\n")
            print(pivot(s, "buffer_bdp", "rtt_p50_ms", "{:.1f}"))
        elif kind == "loss-resilience":
            print("Goodput (Mbit/s):\n")
            print(pivot(s, "loss_pct", "sum_goodput_mbit", "{:.1f}"))
            print("\nRetransmitted bytes (%):\n")
            print(pivot(s, "loss_pct", "retrans_pct", "{:.2f}"))
            print("\nLoss rate at which each algorithm keeps 75% of its best goodput:\n")
            print(md(["cc", "loss at 75%"], [[cc, (">" if v["censored"] == ">max" else "") + f"{v['loss_pct']:g}%"]
                                            for cc, v in sorted(s["loss_at_75pct"].items())]))


if __name__ == "__main__":
    main(sys.argv[1:])
