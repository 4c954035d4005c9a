"""``ccab lab report RUN_DIR``: PNGs + a self-contained ``index.html`` from ``results.json`` and
``run.json`` (no warehouse needed; ``ccab lab analyze`` refreshes results.json from it).

Figures are pure (results in, matplotlib Figure out). The page is rendered by the canary report's
page kit (:mod:`ccab.report.html`): same CSS, header, table of contents, tables and outcome colours
as ``ccab report`` (flow collapse red, unavailable algorithms amber).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from ccab_workshop.lab import spec
from ccab.plots.render import ARM_COLORS
from ccab.report import html as h
from matplotlib.figure import Figure

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


def _unavailable_cases(run: dict) -> list[tuple[str, list[str]]]:
    """(case, its algorithms) of the cases not run because the kernel lacks an algorithm."""
    names = run.get("cases_unavailable") or []
    if not names:
        return []
    try:

        algos = {c.name: list(c.algorithms) for c in spec.expand(run["yaml"]).cases}
    except Exception:  # noqa: BLE001 - a YAML this version cannot expand: still list the names
        algos = {}
    return [(n, algos.get(n, [])) for n in names]


def _collapse_cell(rate: float) -> h.Cell:
    return h.Cell(f"{rate:.0%}", "cell-bad" if rate > 0 else "cell-good")


def _jain_cell(m: dict | None) -> h.Cell | str:
    text = _ci(m, "{:.3f}")
    if not m or m.get("mean") is None:
        return text
    return h.Cell(text, "cell-good" if m["mean"] >= 0.9 else "cell-warn" if m["mean"] >= 0.7 else "cell-bad")


def summary_table(summary: dict, unavailable: list[tuple[str, list[str]]] = ()) -> h.Html:
    rows, kinds = [], []
    for r in summary["cases"]:
        by_cc = ", ".join(f"{cc} {_ci(m, '{:.1f}')}" for cc, m in r["goodput_by_cc_mbit"].items())
        rows.append([r["case"], " vs ".join(r["algorithms"]), r["repeats"], _ci(r["sum_goodput_mbit"], "{:.1f}"),
                     _ci(r["utilization"], "{:.0f}%", 100), _jain_cell(r["jain"]), _ci(r["retrans_pct"], "{:.2f}"),
                     _collapse_cell(r["collapse_rate"]), _ci(r["rtt_p50_ms"], "{:.1f}"), by_cc])
        kinds.append("")
    for name, algos in unavailable:
        rows.append([name, " vs ".join(algos) or "–", 0,
                     h.Cell(h.badge("unavailable on this kernel: not run", "warn"), "cell-warn"),
                     "–", "–", "–", "–", "–", "–"])
        kinds.append("row-neutral")
    return h.table(["case", "algorithms", "runs", "goodput sum (Mbit/s)", "utilization", "Jain", "retrans (%)",
                    "collapse rate", "RTT p50 (ms)", "goodput by algorithm (Mbit/s)"], rows,
                   row_class=lambda i, _r: kinds[i], numeric=(2, 3, 4, 5, 6, 7, 8),
                   caption="Mean ± 95% Student-t half-width over repeats. Jain: green ≥ 0.9, amber ≥ 0.7, red below; "
                           "collapse rate: share of repeats where a flow fell below its collapse threshold (red > 0).")


def flows_table(cases: list[dict]) -> h.Html:
    rows, kinds = [], []
    for c in cases:
        for f in c["flows"]:
            spans = [x for x in c["collapses"] if x["flow"] == f["flow"]]
            collapse = (h.Cell(h.badge("collapse " + ", ".join(f"{x['from_s']}–{x['to_s']} s" for x in spans), "bad"),
                               "cell-bad") if spans else h.Cell("no", "cell-good"))
            rows.append([c["case_id"], f["flow"], f["cc"], f"{f['goodput_bps'] / 1e6:.2f}", f"{f['retrans_pct']:.2f}",
                         f["total_retrans"], f"{f['rtt_p50_ms']:.1f}", f"{f['rtt_p95_ms']:.1f}", f"{f['cwnd_avg']:.0f}",
                         collapse])
            kinds.append("row-bad" if spans else "")
    return h.table(["run", "flow", "cc", "goodput (Mbit/s)", "retrans (%)", "retransmits", "RTT p50 (ms)",
                    "RTT p95 (ms)", "cwnd avg", "collapse"], rows,
                   row_class=lambda i, _r: kinds[i], numeric=range(3, 9), cls="flows")


def pivot_table(summary: dict, var: str, metric: str, fmt: str, label: str, caption: str = "") -> h.Html:
    vals = sorted({float(r["vars"][var]) for r in summary["cases"] if var in r["vars"]})
    ccs = sorted({r["algorithms"][0] for r in summary["cases"] if var in r["vars"] and len(r["algorithms"]) == 1})
    rows = []
    for cc in ccs:
        row = [cc]
        for v in vals:
            r = next((r for r in summary["cases"] if r["algorithms"] == [cc] and float(r["vars"].get(var, -1)) == v), None)
            row.append(_ci(r[metric], fmt) if r else "–")
        rows.append(row)
    return h.table([f"{label} \\ {var}"] + [f"{v:g}" for v in vals], rows, numeric=range(1, len(vals) + 1),
                   caption=caption)


def classes_table(summary: dict, results: dict) -> h.Html:
    rows = []
    for r in summary["cases"]:
        for size, c in sorted((r.get("classes") or {}).items(), key=lambda kv: int(kv[0])):
            rows.append([r["case"], _human(int(size)), c["n"], _ci(c["p50_ms"], "{:.1f}"), _ci(c["p99_ms"], "{:.1f}"),
                         _ci(c["p999_ms"], "{:.1f}"), _ci(c["goodput_p50_bps"], "{:.2f}", 1e-6)])
    client = h.table(["case", "size", "requests", "p50 (ms)", "p99 (ms)", "p99.9 (ms)", "per-request goodput p50 (Mbit/s)"],
                     rows, numeric=range(2, 7), caption="The client's view (request start to last byte received).")
    srows = []
    for c in _first_rep(results["cases"]):
        for x in c.get("classes_nginx", []):
            cls = _human(int(x["size_class"])) if x["size_class"].isdigit() else x["size_class"]
            bulk = x["bulk_goodput_bps"]
            srows.append([c["case_id"], x["cc"], cls, x["requests"], f"{int(x['bytes']) / 1e6:.1f}",
                          f"{int(x['bytes']) * 8 / 1e6 / max(1e-9, c.get('duration_s', 1)):.2f}",
                          f"{x['rt_p50_ms']:.0f}", f"{x['rt_p99_ms']:.0f}",
                          "–" if bulk is None or (isinstance(bulk, float) and math.isnan(bulk)) else f"{bulk / 1e6:.2f}"])
    nginx = h.table(["run", "cc", "class", "requests", "MB sent", "Mbit/s over the case", "request_time p50 (ms)",
                     "p99 (ms)", "bulk goodput (Mbit/s)"], srows, numeric=range(3, 9),
                    caption="nginx's view (http_requests; request_time ends when the last byte is written to the socket).")
    return h.join(client, nginx)


def loss75_table(summary: dict) -> h.Html:
    rows = []
    for cc, v in sorted(summary.get("loss_at_75pct", {}).items()):
        text = (("> " if v["censored"] == ">max" else "≤ " if v["censored"] == "<=min" else "")
                + (f"{v['loss_pct']:g}%" if v["loss_pct"] is not None else "–"))
        rows.append([cc, h.Cell(text, "cell-info") if v["censored"] else text])
    return h.table(["cc", "loss at 75% goodput"], rows, numeric=(1,),
                   caption="Linear interpolation between the swept loss rates; '>' = never fell below 75% "
                           "in the sweep, '≤' = already below at the smallest loss rate.")


# --- the page ---------------------------------------------------------------------------------------------


def cellular_table(cases: list[dict]) -> h.Html:
    rows = []
    for c in cases:
        for f in c["flows"]:
            rows.append([c["case"], str(c["rep"]), f["cc"], f"{f['goodput_bps'] / 1e6:.2f}",
                         f"{100 * f['goodput_bps'] / (float(c['bottleneck']['rate_mbit']) * 1e6):.0f}%",
                         f"{f['min_rtt_ms']:.1f}", f"{f.get('queue_delay_p50_ms', 0):.1f}",
                         f"{f.get('queue_delay_p95_ms', 0):.1f}", f"{f['retrans_pct']:.2f}"])
    return h.table(["case", "repeat", "cc", "goodput (Mbit/s)", "of trace mean", "min RTT (ms)",
                    "queue delay p50 (ms)", "queue delay p95 (ms)", "retrans (%)"], rows)


def _img(out: Path, name: str, fig: Figure, caption: str, cls: str = "") -> h.Html:
    fig.savefig(out / name, dpi=110)
    return h.figure(name, caption, cls=cls)


def notes_for(run: dict) -> list[tuple[str, str]]:
    """(badge kind, text) notes about what this run could and could not emulate."""
    notes = []
    if "ccab-link" in run.get("delay_emulation", ""):
        notes.append(("info", "Bottleneck and base delay from ccab-link (a userspace link between TUN devices): "
                              "rates and buffers count IP bytes; the base RTT is rtt_ms (plus ≈ 0.25 ms); the link's "
                              "drops and timing error are in run.json (counters, link_stopped)."))
    if not run["environment"].get("netem") and "none" in run.get("delay_emulation", "none"):
        notes.append(("warn", "No netem on this kernel: no delay is added. The base RTT is the veth path (~0.05 ms) "
                              "and every millisecond of RTT is queueing in the bottleneck buffer; buffers are sized in "
                              f"BDPs of the nominal RTT ({run['yaml'].get('bottleneck', {}).get('rtt_ms', 20)} ms)."))
    if not run["environment"].get("fq"):
        notes.append(("info", "No fq qdisc: BBR paces with its internal (TCP-layer) pacing."))
    if run.get("algorithms_unavailable"):
        notes.append(("warn", f"Unavailable on this kernel, not run: {', '.join(run['algorithms_unavailable'])} "
                              f"(cases: {', '.join(run['cases_unavailable'])}). Offered: "
                              f"{' '.join(run['environment']['cc_available'])}."))
    setters = {h_["agent"]["setter"] for c in run["cases"] for h_ in c["hosts"].values()}
    if "lab-fallback" in setters:
        notes.append(("warn", "Congestion control was set by the lab's fallback (bin/ccab-agent not built), "
                              "not by the agent."))
    notes.append(("neutral", "Machine shared with other work (2 cores): expect run-to-run noise; repeat with --repeat N."))
    return notes


_NOTE_LABEL = {"warn": "caveat", "info": "note", "neutral": "note", "bad": "problem"}


def run_section(run: dict, rows: dict) -> h.Section:
    env = run["environment"]
    unavailable = run.get("algorithms_unavailable") or []
    cohorts = run.get("cohorts") or {}
    rid = run["rollout_id"]
    facts = [
        ("rollout_id", h.Html(f"<code>{h.esc(rid)}</code>")),
        ("PoP", "lab"),
        ("seed · repeats", f"{run['seed']} · {run['repeat']}"),
        ("kernel", run["kernel"]),
        ("algorithms offered", " ".join(env["cc_available"])),
        ("algorithms unavailable", h.Cell(h.join(*[h.join(h.badge(a + ": unavailable, not run", "warn"), " ")
                                                   for a in unavailable]), "cell-warn") if unavailable else "none"),
        ("delay emulation", h.Cell(run["delay_emulation"], "cell-warn" if "none" in run["delay_emulation"] else "")),
        ("nginx", env.get("nginx", "")),
        ("warehouse rows", f"tcp_samples {rows['tcp_rows']:,}, http_requests {rows['http_rows']:,}"),
        ("sockets' cc seen", ", ".join(rows["ccs"])),
        ("cohort rollups", (f"{', '.join(cohorts['hours'])}: {cohorts['summary']}" if cohorts.get("hours")
                            else h.Cell("not computed (run `ccab lab analyze RUN_DIR`)", "cell-warn"))),
    ]
    notes = h.ul([h.join(h.badge(_NOTE_LABEL.get(kind, "note"), kind), " ", text) for kind, text in notes_for(run)])
    howto = h.para(h.Html(
        "The run's rows are in the warehouse under PoP <code>lab</code> and this rollout_id, and in the hourly "
        f"cohort rollups: <code>ccab report --rollout {h.esc(rid)} --pop lab</code>, <code>ccab plot cdf --pop lab "
        f"--rollout {h.esc(rid)} --metric rtt_us --out F.png</code>, the analyst views and the dashboards (arm = the "
        "host's algorithm) work on it. The judge is not run on lab data: 2–3 hosts per comparison make every test "
        "inconclusive by design."))
    lead = (run.get("description") or "").strip() or "What ran, where, and what this machine could not emulate."
    return h.Section("Run", h.join(h.table(["", ""], facts, cls="facts"), notes, howto), "run", lead)


def build(run_dir: Path, out: Path | None = None) -> Path:
    run = json.loads((run_dir / "run.json").read_text())
    res = json.loads((run_dir / "results.json").read_text())
    out = out or run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    kind = res["kind"]
    summary = res["summary"]
    first = _first_rep(res["cases"])
    S = h.Section
    sections: list[h.Section] = [
        run_section(run, res["rows"]),
        S("Summary", summary_table(summary, _unavailable_cases(run)), "summary",
          "Per case over its repeats: goodput over the all-flows-active window, fairness, retransmits, collapses."),
    ]
    if kind == "buffer-sweep":
        sections += [
            S("Goodput and retransmits vs buffer", _img(out, "buffer_sweep.png", sweep_figure(
                summary["cases"], "buffer_bdp", "bottleneck buffer (BDP)", log_x=True),
                "Goodput (left) and retransmitted bytes (right) per algorithm vs the bottleneck buffer; "
                "bars: 95% t-intervals over repeats.", cls="wide"), "buffer-sweep"),
            S("Goodput (Mbit/s)", pivot_table(summary, "buffer_bdp", "sum_goodput_mbit", "{:.1f}", "cc"), "buffer-goodput"),
            S("Retransmitted bytes (%)", pivot_table(summary, "buffer_bdp", "retrans_pct", "{:.2f}", "cc"),
              "buffer-retrans"),
            S("RTT p50 (ms)", pivot_table(summary, "buffer_bdp", "rtt_p50_ms", "{:.1f}", "cc"), "buffer-rtt"),
        ]
    if kind == "loss-resilience":
        sections += [
            S("Goodput vs random loss", _img(out, "loss_resilience.png", sweep_figure(
                summary["cases"], "loss_pct", "random loss (%)", log_x=True, normalize=True, mark=0.75),
                "Goodput as a share of each algorithm's best (left) and retransmitted bytes (right) vs random loss; "
                "dashed: 75% of the best.", cls="wide"), "loss-resilience"),
            S("Loss rate at which each algorithm keeps 75% of its best goodput", loss75_table(summary), "loss-75",
              "The Pantheon/PCC metric."),
            S("Goodput (Mbit/s)", pivot_table(summary, "loss_pct", "sum_goodput_mbit", "{:.1f}", "cc"), "loss-goodput"),
        ]
    if kind == "size-fairness":
        sections += [
            S("Small-request latency", _img(out, "size_latency.png", latency_figure(summary["cases"]),
                                            "Client-side latency per request size class and case: p50, p99, p99.9 "
                                            "(darker → lighter), log scale.", cls="wide"), "latency"),
            S("Goodput and latency per size class", classes_table(summary, res), "classes"),
        ]
    if kind == "fairness":
        sections.append(S("Goodput shares", _img(out, "fairness_shares.png", share_figure(first),
                                                 "Goodput per flow over the window where all flows are active, "
                                                 "stacked per case (first repeat)."), "shares"))
    if kind == "cellular":
        sections.append(S("Goodput and self-inflicted delay", cellular_table(res["cases"]), "cellular",
                          "Per flow: goodput over the window, and queueing delay = smoothed RTT − the connection's "
                          "min RTT (the Verizon LTE metric)."))
    if kind in ("fairness", "size-fairness", "cellular"):
        figs = []
        for c in first:
            name = f"case_{c['case']}.png"
            figs.append(_img(out, name, case_figure(c, float(c["bottleneck"]["rate_mbit"])),
                             f"{c['case']}: goodput, cwnd and smoothed RTT per flow ({_bn_text(c)}); "
                             "red bands: flow collapse."))
        sections.append(S("Goodput, cwnd and RTT per flow over time",
                          h.Html('<div class="figures">' + h.join(*figs) + "</div>"), "per-case",
                          "Brakmo's per-run graphs, first repeat of each case."))
    else:
        sections += [
            S("Goodput over time per case", _img(out, "goodput_grid.png", grid_figure(
                first, "goodput_bps", "goodput (Mbit/s)", 1e-6), "Goodput of every long flow, one panel per case "
                "(first repeat).", cls="wide"), "goodput-grid"),
            S("cwnd over time per case", _img(out, "cwnd_grid.png", grid_figure(first, "cwnd", "cwnd (segments)"),
                                              "Congestion window of every long flow, one panel per case.", cls="wide"),
              "cwnd-grid"),
        ]
    sections.append(S("Per flow", flows_table(res["cases"]), "flows",
                      "Every long flow of every repeat over the all-flows-active window; rows with a flow collapse "
                      "are red."))
    subtitle = (f"{run['kind']} · rollout_id {run['rollout_id']} · PoP lab · "
                f"kernel {run['kernel']} · seed {run['seed']} · {run['repeat']} repeat(s)")
    generated = (f"Generated by `ccab lab report {run_dir}` at "
                 f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.")
    return h.write_page(out / "index.html", h.render_page(f"ccab lab — {run['experiment']}", sections, subtitle,
                                                          generated))
