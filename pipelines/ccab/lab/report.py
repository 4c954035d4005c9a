"""``ccab lab report RUN_DIR``: PNGs + a self-contained ``index.html`` from ``results.json`` and
``run.json`` (no warehouse needed; ``ccab lab analyze`` refreshes results.json from it).

Figures are pure (results in, matplotlib Figure out); ``render_html`` is the only place that
knows the page layout, so it can be swapped for the canary report's renderer.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ccab.plots.render import ARM_COLORS

CC_COLORS = {"cubic": ARM_COLORS[0], "bbr": ARM_COLORS[1], "reno": ARM_COLORS[2], "bbr2": ARM_COLORS[3]}
FLOW_STYLES = ("-", "--", ":", "-.")


def _cc_color(cc: str) -> str:
    return CC_COLORS.get(cc, ARM_COLORS[hash(cc) % len(ARM_COLORS)])


def _first_rep(cases: list[dict]) -> list[dict]:
    seen, out = set(), []
    for c in cases:
        if c["case"] not in seen:
            seen.add(c["case"])
            out.append(c)
    return out


# --- figures ------------------------------------------------------------------------------------------


def case_figure(case: dict, rate_mbit: float) -> Figure:
    """Goodput, cwnd and RTT over time per flow (Brakmo's per-run graphs)."""
    fig = Figure(figsize=(8, 7.2), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    for i, (name, s) in enumerate(sorted(case["series"].items())):
        t = np.array(s["t_s"], dtype=float)
        g = np.array([np.nan if x is None else x / 1e6 for x in s["goodput_bps"]])
        kw = {"color": _cc_color(s["cc"]), "linestyle": FLOW_STYLES[i % len(FLOW_STYLES)], "label": f"{name} ({s['cc']})"}
        axes[0].plot(t, g, marker=".", **kw)
        axes[1].plot(t, s["cwnd"], **kw)
        axes[2].plot(t, np.array(s["rtt_us"]) / 1000, **kw)
    axes[0].axhline(rate_mbit, color="0.6", linewidth=0.8)
    axes[0].text(0, rate_mbit, f" bottleneck {rate_mbit:g} Mbit/s", va="bottom", fontsize=8, color="0.4")
    for c in case.get("collapses", []):
        axes[0].axvspan(c["from_s"], c["to_s"], color="#c44e52", alpha=0.12)
    axes[0].set_ylabel("goodput (Mbit/s)")
    axes[1].set_ylabel("cwnd (segments)")
    axes[2].set_ylabel("smoothed RTT (ms)")
    axes[2].set_xlabel("time since the case started (s)")
    axes[0].legend(fontsize=8, loc="upper right")
    for ax in axes:
        ax.grid(alpha=0.3)
    sub = f"Jain {case['jain']:.3f}" if case.get("jain") is not None else ""
    fig.suptitle(f"{case['case']} — {_bn_text(case)}  {sub}", fontsize=10)
    return fig


def grid_figure(cases: list[dict], key: str, ylabel: str, scale: float = 1.0) -> Figure:
    """One small panel per case: ``key`` over time for every long flow."""
    n = len(cases)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(3.2 * cols, 2.4 * rows + 0.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=False, squeeze=False)).ravel()
    for ax, case in zip(axes, cases):
        for i, (name, s) in enumerate(sorted(case["series"].items())):
            y = np.array([np.nan if x is None else x * scale for x in s[key]], dtype=float)
            ax.plot(s["t_s"], y, color=_cc_color(s["cc"]), linestyle=FLOW_STYLES[i % 4], linewidth=1)
        ax.set_title(case["case"], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[n:]:
        ax.axis("off")
    fig.supylabel(ylabel, fontsize=9)
    fig.supxlabel("time (s)", fontsize=9)
    ccs = sorted({s["cc"] for c in cases for s in c["series"].values()})
    fig.legend([_line(cc) for cc in ccs], ccs, loc="outside upper right", fontsize=8, ncols=len(ccs))
    return fig


def _line(cc: str):
    from matplotlib.lines import Line2D

    return Line2D([0], [0], color=_cc_color(cc))


def sweep_figure(summary_rows: list[dict], var: str, xlabel: str, log_x: bool = False,
                 normalize: bool = False, mark: float | None = None) -> Figure:
    """Goodput and retransmits vs a swept variable, one line per algorithm, with 95% t-intervals."""
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax_g, ax_r = fig.subplots(1, 2)
    by_cc: dict[str, list[dict]] = {}
    for r in summary_rows:
        if var in r["vars"] and len(r["algorithms"]) == 1:
            by_cc.setdefault(r["algorithms"][0], []).append(r)
    for cc, rs in sorted(by_cc.items()):
        rs.sort(key=lambda r: float(r["vars"][var]))
        x = np.array([float(r["vars"][var]) for r in rs])
        g = np.array([r["sum_goodput_mbit"]["mean"] or 0 for r in rs])
        gci = np.array([r["sum_goodput_mbit"]["ci"] or 0 for r in rs])
        if normalize and g.max() > 0:
            gci, g = gci / g.max(), g / g.max()
        rt = np.array([r["retrans_pct"]["mean"] or 0 for r in rs])
        rci = np.array([r["retrans_pct"]["ci"] or 0 for r in rs])
        ax_g.errorbar(x, g, yerr=gci, marker="o", color=_cc_color(cc), label=cc, capsize=3)
        ax_r.errorbar(x, rt, yerr=rci, marker="o", color=_cc_color(cc), label=cc, capsize=3)
    if mark is not None:
        ax_g.axhline(mark, color="0.5", linestyle="--", linewidth=0.8)
        ax_g.text(0.01, mark, f" {mark:.0%} of best", va="bottom", fontsize=8, color="0.4",
                  transform=ax_g.get_yaxis_transform())
    for ax in (ax_g, ax_r):
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if log_x:
            ax.set_xscale("symlog", linthresh=0.1) if min(float(r["vars"][var]) for rs in by_cc.values() for r in rs) == 0 \
                else ax.set_xscale("log", base=2)
    if log_x:
        from matplotlib.ticker import FuncFormatter

        for ax in (ax_g, ax_r):
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax_g.set_ylabel("goodput (share of the best)" if normalize else "goodput (Mbit/s)")
    ax_r.set_ylabel("retransmitted bytes (%)")
    ax_g.legend(fontsize=8)
    return fig


def latency_figure(summary_rows: list[dict]) -> Figure:
    """Client-side latency of each request size class per case: p50, p99, p99.9 (log scale)."""
    rows = [r for r in summary_rows if r.get("classes")]
    fig = Figure(figsize=(9, 3.8), layout="constrained")
    ax = fig.subplots()
    labels, width = [], 0.25
    xs = np.arange(len(rows) * 2)
    i = 0
    for r in rows:
        for size in sorted(r["classes"], key=int):
            c = r["classes"][size]
            for j, (q, alpha) in enumerate((("p50_ms", 1.0), ("p99_ms", 0.7), ("p999_ms", 0.4))):
                v = c[q]["mean"]
                if v is not None:
                    ax.bar(i + (j - 1) * width, v, width, color=_cc_color(r["algorithms"][0]), alpha=alpha,
                           yerr=c[q]["ci"] or 0, capsize=2)
            labels.append(f"{r['case']}\n{_human(int(size))}")
            i += 1
    ax.set_xticks(range(i), labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("request latency (ms), client side")
    ax.set_title("p50 / p99 / p99.9 (darker → lighter)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    del xs
    return fig


def share_figure(cases: list[dict]) -> Figure:
    """Goodput per flow over the all-flows-active window, stacked, per case (first repeat)."""
    fig = Figure(figsize=(max(5, 1.2 * len(cases) + 2), 3.6), layout="constrained")
    ax = fig.subplots()
    for i, c in enumerate(cases):
        bottom = 0.0
        for f in sorted(c["flows"], key=lambda f: f["flow"]):
            v = f["goodput_bps"] / 1e6
            ax.bar(i, v, bottom=bottom, color=_cc_color(f["cc"]), edgecolor="white")
            ax.text(i, bottom + v / 2, f"{f['flow']}\n{f['cc']}", ha="center", va="center", fontsize=7)
            bottom += v
    ax.set_xticks(range(len(cases)), [c["case"] for c in cases], fontsize=8, rotation=20)
    ax.set_ylabel("goodput, all flows active (Mbit/s)")
    ax.grid(alpha=0.3, axis="y")
    return fig


# --- tables -----------------------------------------------------------------------------------------------


def _ci(m: dict | None, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    if not m or m.get("mean") is None:
        return "–"
    s = fmt.format(m["mean"] * scale)
    if m.get("ci") is not None:
        s += " ± " + fmt.format(m["ci"] * scale)
    return s


def _human(n: int) -> str:
    for unit, div in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def _bn_text(case: dict) -> str:
    b = case["bottleneck"]
    s = f"{b['rate_mbit']:g} Mbit/s, buffer {b['buffer_bdp']:g} BDP ({case['buffer_bytes'] // 1000} kB)"
    if float(b.get("loss_pct", 0)):
        s += f", loss {b['loss_pct']:g}%"
    return s


def table(headers: list[str], rows: list[list]) -> str:
    h = "".join(f"<th>{html.escape(str(x))}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def summary_table(summary: dict) -> str:
    rows = []
    for r in summary["cases"]:
        by_cc = ", ".join(f"{cc} {_ci(m, '{:.1f}')}" for cc, m in r["goodput_by_cc_mbit"].items())
        rows.append([r["case"], " vs ".join(r["algorithms"]), r["repeats"], _ci(r["sum_goodput_mbit"], "{:.1f}"),
                     _ci(r["utilization"], "{:.0f}%", 100), _ci(r["jain"], "{:.3f}"), _ci(r["retrans_pct"], "{:.2f}"),
                     f"{r['collapse_rate']:.0%}", _ci(r["rtt_p50_ms"], "{:.1f}"), by_cc])
    return table(["case", "algorithms", "runs", "goodput sum (Mbit/s)", "utilization", "Jain", "retrans (%)",
                  "collapse rate", "RTT p50 (ms)", "goodput by algorithm (Mbit/s)"], rows)


def flows_table(cases: list[dict]) -> str:
    rows = []
    for c in cases:
        for f in c["flows"]:
            rows.append([c["case_id"], f["flow"], f["cc"], f"{f['goodput_bps'] / 1e6:.2f}", f"{f['retrans_pct']:.2f}",
                         f["total_retrans"], f"{f['rtt_p50_ms']:.1f}", f"{f['rtt_p95_ms']:.1f}", f"{f['cwnd_avg']:.0f}",
                         "yes " + ", ".join(f"{x['from_s']}–{x['to_s']} s" for x in c["collapses"] if x["flow"] == f["flow"])
                         if any(x["flow"] == f["flow"] for x in c["collapses"]) else "no"])
    return table(["run", "flow", "cc", "goodput (Mbit/s)", "retrans (%)", "retransmits", "RTT p50 (ms)",
                  "RTT p95 (ms)", "cwnd avg", "collapse"], rows)


def pivot_table(summary: dict, var: str, metric: str, fmt: str, label: str) -> str:
    vals = sorted({float(r["vars"][var]) for r in summary["cases"] if var in r["vars"]})
    ccs = sorted({r["algorithms"][0] for r in summary["cases"] if var in r["vars"] and len(r["algorithms"]) == 1})
    rows = []
    for cc in ccs:
        row = [cc]
        for v in vals:
            r = next((r for r in summary["cases"] if r["algorithms"] == [cc] and float(r["vars"].get(var, -1)) == v), None)
            row.append(_ci(r[metric], fmt) if r else "–")
        rows.append(row)
    return table([f"{label} \\ {var}"] + [f"{v:g}" for v in vals], rows)


def classes_table(summary: dict, results: dict) -> str:
    rows = []
    for r in summary["cases"]:
        for size, c in sorted((r.get("classes") or {}).items(), key=lambda kv: int(kv[0])):
            rows.append([r["case"], _human(int(size)), c["n"], _ci(c["p50_ms"], "{:.1f}"), _ci(c["p99_ms"], "{:.1f}"),
                         _ci(c["p999_ms"], "{:.1f}"), _ci(c["goodput_p50_bps"], "{:.2f}", 1e-6)])
    out = table(["case", "size", "requests", "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "per-request goodput p50 (Mbit/s)"], rows)
    srows = []
    for c in _first_rep(results["cases"]):
        for x in c.get("classes_nginx", []):
            cls = _human(int(x["size_class"])) if x["size_class"].isdigit() else x["size_class"]
            srows.append([c["case_id"], x["cc"], cls, x["requests"], f"{int(x['bytes']) / 1e6:.1f}",
                          f"{int(x['bytes']) * 8 / 1e6 / max(1e-9, c.get('duration_s', 1)):.2f}",
                          f"{x['rt_p50_ms']:.0f}", f"{x['rt_p99_ms']:.0f}",
                          "–" if x["bulk_goodput_bps"] is None or (isinstance(x["bulk_goodput_bps"], float) and math.isnan(x["bulk_goodput_bps"]))
                          else f"{x['bulk_goodput_bps'] / 1e6:.2f}"])
    out += "<p>nginx's view (http_requests; request_time ends when the last byte is written to the socket):</p>"
    out += table(["run", "cc", "class", "requests", "MB sent", "Mbit/s over the case", "request_time p50 (ms)", "p99 (ms)",
                  "bulk goodput (Mbit/s)"], srows)
    return out


# --- the page ---------------------------------------------------------------------------------------------

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
.meta{color:#555;font-size:.9em} table{border-collapse:collapse;font-size:.85em;margin:.6em 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} img{max-width:100%;border:1px solid #eee;margin:.4em 0}
.note{background:#fff8e1;border-left:4px solid #e0b000;padding:.5em 1em;font-size:.9em}
"""


def render_html(title: str, meta_lines: list[str], notes: list[str], sections: list[tuple[str, str]]) -> str:
    """The page: title, metadata, notes, then (heading, HTML fragment) sections. Swap this for the
    canary report's renderer when it exists."""
    meta = "<br>".join(html.escape(x) for x in meta_lines)
    note = "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)
    body = "".join(f"<h2>{html.escape(h)}</h2>\n{frag}\n" for h, frag in sections)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1><p class='meta'>{meta}</p>{note}{body}"
            f"</body></html>\n")


def _img(out: Path, name: str, fig: Figure) -> str:
    fig.savefig(out / name, dpi=110)
    return f'<img src="{name}" alt="{html.escape(name)}">'


def notes_for(run: dict) -> list[str]:
    notes = []
    if not run["environment"].get("netem"):
        notes.append("No netem on this kernel: no delay is added. The base RTT is the veth path (~0.05 ms) and "
                     "every millisecond of RTT is queueing in the bottleneck buffer; buffers are sized in BDPs of "
                     f"the nominal RTT ({run['yaml'].get('bottleneck', {}).get('rtt_ms', 20)} ms).")
    if not run["environment"].get("fq"):
        notes.append("No fq qdisc: BBR paces with its internal (TCP-layer) pacing.")
    if run.get("algorithms_unavailable"):
        notes.append(f"Unavailable on this kernel, not run: {', '.join(run['algorithms_unavailable'])} "
                     f"(cases: {', '.join(run['cases_unavailable'])}). Offered: "
                     f"{' '.join(run['environment']['cc_available'])}.")
    setters = {h["agent"]["setter"] for c in run["cases"] for h in c["hosts"].values()}
    if "lab-fallback" in setters:
        notes.append("Congestion control was set by the lab's fallback (bin/ccab-agent not built), not by the agent.")
    notes.append("Machine shared with other work (2 cores): expect run-to-run noise; repeat with --repeat N.")
    return notes


def build(run_dir: Path, out: Path | None = None) -> Path:
    run = json.loads((run_dir / "run.json").read_text())
    res = json.loads((run_dir / "results.json").read_text())
    out = out or run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    kind = res["kind"]
    summary = res["summary"]
    first = _first_rep(res["cases"])
    rate = float(run["yaml"].get("bottleneck", {}).get("rate_mbit", 20))
    sections: list[tuple[str, str]] = [("Summary (mean ± 95% t-interval over repeats)", summary_table(summary))]
    if kind == "buffer-sweep":
        sections.append(("Goodput and retransmits vs buffer", _img(out, "buffer_sweep.png", sweep_figure(
            summary["cases"], "buffer_bdp", "bottleneck buffer (BDP)", log_x=True))))
        sections.append(("Goodput (Mbit/s)", pivot_table(summary, "buffer_bdp", "sum_goodput_mbit", "{:.1f}", "cc")))
        sections.append(("Retransmitted bytes (%)", pivot_table(summary, "buffer_bdp", "retrans_pct", "{:.2f}", "cc")))
        sections.append(("RTT p50 (ms)", pivot_table(summary, "buffer_bdp", "rtt_p50_ms", "{:.1f}", "cc")))
    if kind == "loss-resilience":
        sections.append(("Goodput vs random loss", _img(out, "loss_resilience.png", sweep_figure(
            summary["cases"], "loss_pct", "random loss (%)", log_x=True, normalize=True, mark=0.75))))
        l75 = [[cc, ("> " if v["censored"] == ">max" else "≤ " if v["censored"] == "<=min" else "")
                + (f"{v['loss_pct']:g}%" if v["loss_pct"] is not None else "–")]
               for cc, v in sorted(summary.get("loss_at_75pct", {}).items())]
        sections.append(("Loss rate at which each algorithm keeps 75% of its best goodput",
                         table(["cc", "loss at 75% goodput"], l75)))
        sections.append(("Goodput (Mbit/s)", pivot_table(summary, "loss_pct", "sum_goodput_mbit", "{:.1f}", "cc")))
    if kind == "size-fairness":
        sections.append(("Small-request latency", _img(out, "size_latency.png", latency_figure(summary["cases"]))))
        sections.append(("Goodput and latency per size class", classes_table(summary, res)))
    if kind == "fairness":
        sections.append(("Goodput shares", _img(out, "fairness_shares.png", share_figure(first))))
    if kind in ("fairness", "size-fairness"):
        for c in first:
            name = f"case_{c['case']}.png"
            sections.append((f"{c['case']}: goodput, cwnd and RTT per flow",
                             _img(out, name, case_figure(c, float(c["bottleneck"]["rate_mbit"])))))
    else:
        sections.append(("Goodput over time per case", _img(out, "goodput_grid.png",
                                                             grid_figure(first, "goodput_bps", "goodput (Mbit/s)", 1e-6))))
        sections.append(("cwnd over time per case", _img(out, "cwnd_grid.png", grid_figure(first, "cwnd", "cwnd (segments)"))))
    sections.append(("Per flow", flows_table(res["cases"])))
    rows = res["rows"]
    meta_lines = [
        f"rollout_id {run['rollout_id']} · PoP lab · seed {run['seed']} · repeats {run['repeat']}",
        f"kernel {run['kernel']} · algorithms offered: {' '.join(run['environment']['cc_available'])} · "
        f"delay emulation: {run['delay_emulation']} · {run['environment'].get('nginx', '')}",
        f"warehouse rows: tcp_samples {rows['tcp_rows']:,}, http_requests {rows['http_rows']:,} · "
        f"sockets' cc seen: {', '.join(rows['ccs'])}",
    ]
    page = render_html(f"ccab lab — {run['experiment']}", meta_lines, notes_for(run), sections)
    (out / "index.html").write_text(page)
    return out / "index.html"
