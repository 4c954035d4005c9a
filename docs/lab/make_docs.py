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
        rtts = sorted({float(c["bottleneck"]["rtt_ms"]) for c in run["cases"]})
        paths = sorted({c["bottleneck"].get("path", "tbf") for c in run["cases"]})
        sub = f"rtt{rtts[0]:g}ms" if paths == ["link"] and len(rtts) == 1 else "nodelay"
        dest = HERE / run["experiment"] / sub
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for png in sorted((rd / "report").glob("*.png")):
            shutil.copy(png, dest / png.name)
        s = res["summary"]
        print(f"\n### {run['experiment']} ({sub}) — `{run['rollout_id']}` (repeats: {run['repeat']}, seed {run['seed']}, "
              f"delay: {run.get('delay_emulation')})\n")
        idle = [c["base_rtt"]["min_ms"] for c in run["cases"] if c.get("base_rtt")]
        if idle:
            print(f"idle RTT through the link (TCP handshake, min per case): {min(idle):.2f}–{max(idle):.2f} ms\n")
        print(f"rows: tcp_samples {res['rows']['tcp_rows']}, http_requests {res['rows']['http_rows']}; "
              f"unavailable: {', '.join(run['algorithms_unavailable']) or 'none'}\n")
        kind = res["kind"]
        if kind == "fairness":
            print(md(["case", "runs", "goodput sum (Mbit/s)", "Jain", "retrans (%)", "collapse rate", "RTT p50 (ms)",
                      "goodput by cc (Mbit/s)"],
                     [[r["case"], r["repeats"], ci(r["sum_goodput_mbit"], "{:.1f}"), ci(r["jain"], "{:.3f}"),
                       ci(r["retrans_pct"]), f"{r['collapse_rate']:.0%}", ci(r.get("rtt_p50_ms"), "{:.0f}"),
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
            print("\nQueueing delay p50 = RTT p50 − min RTT (ms):\n")
            print(pivot(s, "buffer_bdp", "queue_delay_p50_ms", "{:.1f}"))
        elif kind == "cellular":
            rows = []
            for c in res["cases"]:
                for f in c["flows"]:
                    rows.append([c["case"], c["rep"], f["cc"], f"{float(c['bottleneck']['rate_mbit']):.1f}",
                                 f"{f['goodput_bps'] / 1e6:.2f}", f"{f['min_rtt_ms']:.1f}",
                                 f"{f['rtt_p50_ms']:.0f}", f"{f['queue_delay_p50_ms']:.0f}",
                                 f"{f['queue_delay_p95_ms']:.0f}", f"{f['retrans_pct']:.2f}"])
            print(md(["case", "rep", "cc", "trace mean (Mbit/s)", "goodput (Mbit/s)", "min RTT (ms)", "RTT p50 (ms)",
                      "queue delay p50 (ms)", "queue delay p95 (ms)", "retrans (%)"], rows))
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
