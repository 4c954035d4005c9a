"""The canary report of one rollout: ``index.html`` + PNGs in one movable folder.

``build_report(wh, rollout_id, out_dir, pop="", t_from=None, t_to=None) -> ReportResult`` reads the
judge's newest window for the rollout (:mod:`ccab.report.data`), renders the Dropbox-style figures
with :mod:`ccab.plots` and writes the page with :mod:`ccab.report.html`. Re-running overwrites the
folder's files; nothing else is written (the warehouse is only read).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ccab.base.config import settings
from ccab.base.contracts import rollout_id_problem
from ccab.base.vocabulary import get as get_metric
from ccab.base.vocabulary import shown_in
from ccab.base.vocabulary import zero_base_text
from ccab.base.warehouse import Warehouse
from ccab.judge.model import HIGHER_IS_WORSE
from ccab.plots import data as plot_data
from ccab.plots import render
from ccab.report import html as h
from ccab.report import precision
from ccab.report.data import ReportData, load

#: the metrics of the per-arm PDFs and CDFs: vocabulary.shown_in("report")
DISTRIBUTIONS = tuple(m.name for m in shown_in("report"))
HEATMAPS = (("rtt_us:retrans_pct", "heatmap_rtt_retrans.png", "RTT × retransmitted %"),
            ("rtt_us:inflight_bytes", "heatmap_rtt_inflight.png", "RTT × bytes in flight"))
HEATMAP_SEGMENT = "bulk"      # Dropbox looked at bulk flows (>= 1 MiB) only
PDF_BINS_PER_OCTAVE = 4       # finer bins alias on in-flight bytes (MSS multiples)

DECISION_KIND = {"rollback": "bad", "halt": "bad", "continue": "info", "pass": "good",
                 "no_decision": "warn", "inconclusive_by_design": "warn"}
DECISION_MEANING = {
    "rollback": "A page-severity guardrail regressed or a circuit breaker tripped: the treatment is rolled back.",
    "halt": "The rollout stops where it is until someone looks: a ticket-severity guardrail regressed, or "
            "after the planned looks a guardrail could not be shown to be within its margin.",
    "continue": "Nothing is shown to be worse yet, but not every guardrail is proven within its margin "
                "(or this is not the last planned look): keep going.",
    "pass": "Every guardrail is proven within its margin at the last planned look and every data-quality "
            "gate held: safe to promote.",
    "no_decision": "A data-quality gate failed: the numbers cannot be trusted, so nothing is decided "
                   "(this is never a pass).",
    "inconclusive_by_design": "Too few hosts per arm: even a huge effect could not reach the required "
                              "significance. Add hosts or run longer looks; the estimates are shown anyway.",
}
OUTCOME_KIND = {"regression": "bad", "improvement": "good", "non_inferior": "good", "no_difference": "neutral",
                "inconclusive": "warn", "inconclusive_by_design": "warn", "shift": "info"}
SEVERITY_KIND = {"page": "bad", "ticket": "warn", "info": "info"}
STATUS_KIND = {"pass": "good", "fail": "bad", "skipped": "neutral"}
STAT_ORDER = {"ratio": 0, "mean": 1, "p10": 2, "p50": 3, "p90": 4, "p99": 5, "share_above:50": 6, "shift": 7}


@dataclass
class ReportResult:
    index: Path
    figures: list[Path] = field(default_factory=list)
    data: ReportData | None = None
    rollout_id: str = ""
    #: why the page shows no data yet (a rollout that has assignments but no rollups), else ""
    pending: str = ""

    def as_dict(self) -> dict:
        d = self.data
        return {"index": str(self.index), "figures": [str(p) for p in self.figures],
                "rollout_id": d.rollout_id if d else self.rollout_id, "judged": bool(d and d.judged),
                "pending": self.pending,
                "window_start": d.window_start.isoformat() if d else None,
                "window_end": d.window_end.isoformat() if d else None,
                "decisions": {f"{v['pop']}/{v['treatment_arm']}": v["decision"] for v in (d.verdicts if d else [])}}


def _pending_report(wh: Warehouse, rollout_id: str, pop: str, out_dir: Path | None) -> ReportResult | None:
    """The page of a rollout whose hosts were assigned but whose data is not rolled up yet; None
    when the rollout has no assignment either."""
    hosts, pops, first_ms, last_ms = wh.query(
        """SELECT uniqExact(host), arrayStringConcat(arraySort(groupUniqArray(pop)), ', '),
                  min(issued_at_ms), max(issued_at_ms)
           FROM assignments WHERE rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})""",
        params={"r": rollout_id, "pop": pop}).rows[0]
    if not hosts:
        return None
    first = datetime.fromtimestamp(first_ms / 1000, timezone.utc)
    last = datetime.fromtimestamp(last_ms / 1000, timezone.utc)
    pending = (f"{hosts} host(s) in {pops} assigned between {_when(first)} and {_when(last)}; no hour of their "
               f"data is rolled up yet")
    out = Path(out_dir) if out_dir is not None else default_out_dir(rollout_id)
    out.mkdir(parents=True, exist_ok=True)
    section = h.Section("Nothing to show yet", h.join(
        h.para(f"Rollout {rollout_id}: {pending}."),
        h.para("The hourly job rolls up each complete UTC hour of the hosts' connections (or run "
               "`ccab analyze --from HOUR --to HOUR` for the hours you need); the judge then compares the arms "
               "at the rollout's looks. This page fills in when the first hour is rolled up: run `ccab report` "
               "again then.")), "pending")
    title = f"Canary report — {rollout_id}"
    subtitle = f"PoP {pop or pops} · not rolled up yet"
    generated = f"Generated by `ccab report --rollout {rollout_id}` at {_when(datetime.now(timezone.utc))}."
    index = h.write_page(out / "index.html", h.render_page(title, [section], subtitle, generated))
    return ReportResult(index, rollout_id=rollout_id, pending=pending)


def default_out_dir(rollout_id: str) -> Path:
    """``$CCAB_DATA_DIR/reports/<rollout_id>/`` — where the alerts' ``report_url`` points.
    ``ValueError`` for an id that is not one path component (``..``, ``/``, NUL)."""
    problem = rollout_id_problem(rollout_id)
    if problem:
        raise ValueError(f"rollout id {rollout_id!r:.80} cannot name a report folder: {problem}; pass --out DIR")

    return settings().data_dir / "reports" / rollout_id


# --- formatting ------------------------------------------------------------------------------------

def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def fmt_value(metric: str, statistic: str, v) -> str:
    """A statistic's value in the metric's display unit (ratio of sums scaled like the metric)."""
    if not _finite(v):
        return "–"
    m = get_metric(metric)
    if statistic.startswith("share_above"):
        return f"{100 * v:.2f}% of conns"
    if statistic == "shift":
        return "–"
    # the judge stores a ratio of sums already in the metric's unit (× ratio_scale): scale once
    x = v / m.scale
    return f"{x:,.3g} {m.unit}"


def fmt_row_effect(r: dict) -> str:
    """A stored result's effect: relative, or from a zero base the difference ('+2.3 ms from 0')."""
    return zero_base_text(r["metric"], r["statistic"], r["estimate"], r["value_treatment"], r["value_control"]) \
        or fmt_effect(r["statistic"], r["estimate"])


def fmt_effect(statistic: str, v) -> str:
    if not _finite(v):
        return "–"
    if statistic.startswith("share_above"):
        return f"{100 * v:+.2f} pp"
    if statistic == "shift":
        return f"KS {v:.3f}"
    return f"{v:+.1%}"


def ci_level(r: dict) -> float:
    """The confidence level of the interval the judge stored: a guardrail's is the two-sided
    equivalent of its one-sided test at the look's alpha (1 − 2α, 90 % at α = 0.05); every other
    result's is two-sided 95 %."""
    if r.get("role") == "guardrail" and _finite(r.get("alpha_look")):
        return 1 - 2 * r["alpha_look"]
    return 0.95


def fmt_ci(r: dict) -> str:
    """``[lo, hi] 90%``: the interval with its own level, so two intervals never share a label."""
    if r["statistic"] == "shift" or not _finite(r["ci_low"]):
        return "–"
    return (f"[{fmt_effect(r['statistic'], r['ci_low'])}, {fmt_effect(r['statistic'], r['ci_high'])}] "
            f"{100 * ci_level(r):.4g}%")


def fmt_p(v) -> str:
    if not _finite(v):
        return "–"
    return f"{v:.2g}" if v >= 1e-4 else f"{v:.1e}"


def fmt_margin(r: dict) -> str:
    if not _finite(r.get("margin")):
        return "–"
    sign = "+" if HIGHER_IS_WORSE.get(r["metric"], True) else "−"
    if r["statistic"].startswith("share_above"):
        return f"{sign}{100 * r['margin']:.2f} pp"
    return f"{sign}{r['margin']:.0%}"


def _num(v, fmt: str = ",.3g", scale: float = 1.0) -> str:
    return f"{v / scale:{fmt}}" if _finite(v) else "–"


def _when(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _row_kind(kind: str) -> str:
    return f"row-{kind}"


# --- sections --------------------------------------------------------------------------------------

def _decision_section(d: ReportData) -> h.Section:
    if not d.judged:
        body = h.join(h.para("This rollout has not been judged for this window: run `ccab analyze` (or wait for "
                             "the ccab_compare DAG). The figures and the per-host table below still show the data."))
        return h.Section("Decision", body, "decision", "No judge verdict was found.")
    alerts = {a["alert_id"]: a for a in d.alerts}
    cards = []
    for v in d.verdicts:
        kind = DECISION_KIND.get(v["decision"], "neutral")
        linked = [alerts[i] for i in v["alert_ids"] if i in alerts]
        alert_items = [h.join(h.badge(a["severity"], SEVERITY_KIND.get(a["severity"], "neutral")), " ",
                              h.badge(a["kind"], "neutral"), " ", a["summary"],
                              h.Html(f' <span class="muted">(alert <code>{h.esc(a["alert_id"])}</code>, '
                                     f'action: {h.esc(a["action"])})</span>'))
                       for a in linked]
        where = f"{v['pop']} · " if len(d.pops) > 1 else ""
        parts = [h.Html(f'<h3>{h.esc(where)}{h.esc(v["treatment_arm"])} vs {h.esc(v["control_arm"])}</h3>'),
                 h.Html(f'<div class="decision">{h.badge(v["decision"].replace("_", " "), kind)}</div>'),
                 h.para(DECISION_MEANING.get(v["decision"], ""), "muted"),
                 h.Html("<strong>Reasons</strong>"), h.ul(v["reasons"] or ["(none given)"])]
        if v["gates_failed"]:
            parts += [h.Html("<strong>Failed data-quality gates</strong>"), h.ul(v["gates_failed"])]
        parts += [h.Html("<strong>Evidence: linked alerts</strong>"),
                  h.ul(alert_items) if alert_items else h.para("No page or ticket alert.", "muted")]
        cards.append(h.Html(f'<div class="card {kind}" data-arm="{h.esc(v["treatment_arm"])}" '
                            f'data-decision="{h.esc(v["decision"])}">{h.join(*parts)}</div>'))
    look = d.verdicts[0] if d.verdicts else None
    lead = (f"Judged window {_when(d.window_start)} – {_when(d.window_end)}"
            + (f", look {look['look']} of {look['looks_planned']}" if look else "") + ".")
    return h.Section("Decision per treatment arm", h.Html(f'<div class="cards">{"".join(cards)}</div>'),
                     "decision", lead)


def _arms_section(d: ReportData) -> h.Section:
    rows = [(a["pop"], a["arm"], a["ccs"], a["kernels"], a["hosts"], f"{a['connections']:,}",
             f"{a['bulk_requests']:,}", a["hours"]) for a in d.arms]
    body = h.table(("PoP", "arm", "congestion control", "kernel", "hosts", "connections", "bulk requests", "hours"),
                   rows, numeric=(4, 5, 6, 7))
    return h.Section("Arms", body, "arms",
                     "Whole hosts are assigned to an arm; every connection of a host uses the arm's algorithm.")


def _gates_section(d: ReportData) -> h.Section:
    if not d.judged:
        return h.Section("Data-quality gates", h.para("Not judged.", "muted"), "gates")
    summary: dict[tuple, dict] = {}
    for g in d.gates:
        s = summary.setdefault((g["pop"], g["gate"], g["arm"]), {"pass": 0, "fail": 0, "skipped": 0, "details": []})
        s[g["status"]] = s.get(g["status"], 0) + 1
        if g["status"] != "pass":
            s["details"].append(f"{g['host'] + ': ' if g['host'] else ''}{g['detail']}")
        elif not g["host"]:
            s["details"].append(g["detail"])
    rows, kinds = [], []
    for (pop, gate, arm), s in summary.items():
        status = "fail" if s["fail"] else ("skipped" if s["skipped"] and not s["pass"] else "pass")
        total = s["pass"] + s["fail"] + s["skipped"]
        rows.append((pop, gate, arm or "(rollout)", h.badge(status, STATUS_KIND[status]),
                     f"{s['pass']}/{total}", "; ".join(s["details"][:4]) + (" …" if len(s["details"]) > 4 else "")))
        kinds.append(STATUS_KIND[status] if status != "pass" else "")
    rows_sorted = sorted(zip(rows, kinds), key=lambda rk: (rk[1] != "bad", rk[0][1], rk[0][2]))
    table = h.table(("PoP", "gate", "arm", "status", "checks passed", "detail"), [r for r, _ in rows_sorted],
                    row_class=lambda i, _r: _row_kind(rows_sorted[i][1]) if rows_sorted[i][1] else "",
                    numeric=(4,), cls="gates")
    full = h.table(("PoP", "gate", "arm", "host", "status", "value", "threshold", "detail"),
                   [(g["pop"], g["gate"], g["arm"], g["host"] or "–", h.badge(g["status"], STATUS_KIND.get(g["status"], "neutral")),
                     _num(g["value"], ".4g"), _num(g["threshold"], ".4g"), g["detail"]) for g in d.gates],
                   numeric=(5, 6))
    failed = sum(1 for g in d.gates if g["status"] == "fail")
    lead = ("Every gate held: the comparison is trustworthy." if not failed else
            f"{failed} check(s) failed: the affected arms get no decision until the data are fixed.")
    return h.Section("Data-quality gates", h.join(table, h.details(f"All {len(d.gates)} checks, per host", full)),
                     "gates", lead)


def _effect_rows(results: list[dict], with_segment: bool = False) -> tuple[list, list]:
    rows, kinds = [], []
    for r in sorted(results, key=lambda r: (r["metric"], STAT_ORDER.get(r["statistic"], 9), r["segment"],
                                            r["treatment_arm"])):
        kind = OUTCOME_KIND.get(r["outcome"], "neutral")
        ci = fmt_ci(r)
        q = r["q_value"] if r["role"] != "guardrail" else None
        row = [get_metric(r["metric"]).name, r["statistic"]]
        if with_segment:
            row.append(r["segment"])
        row += [r["treatment_arm"], fmt_value(r["metric"], r["statistic"], r["value_control"]),
                fmt_value(r["metric"], r["statistic"], r["value_treatment"]),
                h.Html(f"<strong>{h.esc(fmt_row_effect(r))}</strong>"), ci,
                fmt_p(r["p_value"]), fmt_p(q) if q is not None else (f"α {fmt_p(r['alpha_look'])}" if _finite(r["alpha_look"]) else "–"),
                fmt_margin(r) + (f" ({r['severity']})" if r["role"] == "guardrail" else ""),
                h.badge(r["outcome"].replace("_", " "), kind),
                h.Html(f'{r["hosts_treatment"]} v {r["hosts_control"]}<span class="sub">{h.esc(r["method"])}</span>')]
        rows.append(row)
        kinds.append(kind)
    return rows, kinds


def _effects_table(results: list[dict], with_segment: bool = False) -> h.Html:
    rows, kinds = _effect_rows(results, with_segment)
    cols = ["metric", "statistic"] + (["segment"] if with_segment else []) + [
        "arm", "control", "arm value", "effect vs control", "interval (level)", "p", "q (BH) / α", "guardrail margin",
        "outcome", "hosts (test)"]
    off = 1 if with_segment else 0
    return h.table(cols, rows, row_class=lambda i, _r: _row_kind(kinds[i]), numeric=tuple(range(3 + off, 10 + off)),
                   cls="effects")


def _pivot_table(results: list[dict], with_segment: bool = False) -> h.Html:
    """One row per metric × statistic; per treatment arm its value, effect [CI], p/q and outcome
    (cells coloured by outcome)."""
    arms = sorted({r["treatment_arm"] for r in results})
    by_key: dict[tuple, dict] = defaultdict(dict)
    for r in results:
        by_key[(r["metric"], r["statistic"], r["segment"])][r["treatment_arm"]] = r
    rows = []
    for (metric, statistic, seg), per_arm in sorted(by_key.items(), key=lambda kv: (
            kv[0][0], STAT_ORDER.get(kv[0][1], 9), kv[0][2])):
        # the control's value from a comparison that has one (an arm without data has none)
        control = next((r["value_control"] for r in per_arm.values() if _finite(r["value_control"])), None)
        row = [metric, statistic] + ([seg] if with_segment else []) + [fmt_value(metric, statistic, control)]
        for arm in arms:
            r = per_arm.get(arm)
            if r is None:
                row += ["–", "–", "–", "–"]
                continue
            kind = OUTCOME_KIND.get(r["outcome"], "neutral")
            ci = fmt_ci(r).replace("–", "")
            row += [fmt_value(metric, statistic, r["value_treatment"]),
                    h.Cell(h.Html(f"<strong>{h.esc(fmt_row_effect(r))}</strong>"
                                  f'<span class="sub">{h.esc(ci.strip())}</span>'), f"cell-{kind}"),
                    h.Html(f'{h.esc(fmt_p(r["q_value"]))}<span class="sub">p {h.esc(fmt_p(r["p_value"]))}</span>'),
                    h.Cell(h.badge(r["outcome"].replace("_", " "), kind), f"cell-{kind}")]
        rows.append(row)
    off = 1 if with_segment else 0
    cols = ["metric", "statistic"] + (["segment"] if with_segment else []) + ["control"]
    for _arm in arms:
        cols += ["value", "effect [interval level]", "q (p)", "outcome"]
    numeric = [2 + off] + [3 + off + 4 * i + j for i in range(len(arms)) for j in (0, 1, 2)]
    groups = [("", 2 + off), ("control", 1)] + [(f"{arm} vs control", 4) for arm in arms]
    return h.table(cols, rows, numeric=numeric, cls="effects pivot", groups=groups)


def _guardrails_section(d: ReportData) -> h.Section:
    if not d.judged:
        return h.Section("Guardrails", h.para("Not judged.", "muted"), "guardrails")
    rows = [r for r in d.results if r["role"] == "guardrail"]
    bad = sum(1 for r in rows if r["outcome"] == "regression")
    # a guardrail restricted to a segment (e.g. queue_delay_us on access:mobile) shows its segment
    body = _effects_table(rows, with_segment=any(r["segment"] != "all" for r in rows)) if rows \
        else h.para("No guardrails were declared.", "muted")
    return h.Section("Guardrails", body, "guardrails",
                     f"Declared before the rollout and tested one-sided against their margin (how much worse is "
                     f"tolerated): regression = the whole interval is beyond the margin; non-inferior = the "
                     f"interval's bad end is within it. {bad} of {len(rows)} regressed.")


def _effects_section(d: ReportData) -> h.Section:
    if not d.judged:
        return h.Section("All effects", h.para("Not judged.", "muted"), "effects")
    by_role = defaultdict(list)
    for r in d.results:
        by_role[r["role"]].append(r)
    seg = by_role["segment"]
    sig_keys = {(r["metric"], r["statistic"], r["segment"]) for r in seg if r["outcome"] in ("regression", "improvement")}
    seg_sig = [r for r in seg if (r["metric"], r["statistic"], r["segment"]) in sig_keys]
    n_sig = sum(1 for r in seg if r["outcome"] in ("regression", "improvement"))
    parts = [
        h.Html("<h3>Every metric × statistic (informational)</h3>"),
        h.para("Two-sided; q is the Benjamini–Hochberg adjusted p over the arm's family. Effects are relative "
               "(treatment / control − 1); shares of connections are differences in percentage points.", "muted"),
        _pivot_table(by_role["info"]) if by_role["info"] else h.para("None.", "muted"),
        h.Html("<h3>Whole-distribution shifts</h3>"),
        h.para("Kolmogorov–Smirnov distance between the arms' pooled distributions, tested by permuting host "
               "labels: a shift can show while the median stays put — look at the PDFs.", "muted"),
        _pivot_table(by_role["shift"]) if by_role["shift"] else h.para("None.", "muted"),
        h.Html("<h3>Segments (heterogeneity)</h3>"),
        h.para(f"Guardrail metrics by pre-treatment client RTT class and response size (never by an outcome); "
               f"{n_sig} of {len(seg)} segment effects are significant after BH — the rows with any are shown.",
               "muted"),
        _pivot_table(seg_sig, with_segment=True) if seg_sig else h.para("None significant.", "muted"),
    ]
    if seg:
        parts.append(h.details(f"All {len(seg)} segment effects", _pivot_table(seg, with_segment=True)))
    counts = defaultdict(int)
    for r in d.results:
        counts[r["outcome"]] += 1
    lead = ", ".join(f"{n} {o.replace('_', ' ')}" for o, n in sorted(counts.items(), key=lambda x: -x[1]))
    return h.Section("All effects", h.join(*parts), "effects", f"{len(d.results)} estimates: {lead}.")


def _alerts_section(d: ReportData) -> h.Section:
    if not d.judged:
        return h.Section("Alerts", h.para("Not judged.", "muted"), "alerts")
    def table(alerts: list[dict]) -> h.Html:
        rows = [(h.badge(a["severity"], SEVERITY_KIND.get(a["severity"], "neutral")), a["kind"], a["treatment_arm"],
                 a["summary"], a["action"], h.Html(f"<code>{h.esc(a['alert_id'])}</code>")) for a in alerts]
        kinds = [SEVERITY_KIND.get(a["severity"], "") if a["severity"] in ("page", "ticket") else "" for a in alerts]
        return h.table(("severity", "kind", "arm", "summary", "action", "alert id"), rows,
                       row_class=lambda i, _r: _row_kind(kinds[i]) if kinds[i] else "")

    # on-call's alerts in view; the informational findings (often > 100) folded away
    acting = [a for a in d.alerts if a["severity"] in ("page", "ticket")]
    info = [a for a in d.alerts if a["severity"] not in ("page", "ticket")]
    body = table(acting) if acting else h.para("No page or ticket alert.", "muted")
    if info:
        body = h.join(body, h.details(f"{len(info)} informational finding(s)", table(info)))
    desc = [h.Html(f"<li><code>{h.esc(a['alert_id'])}</code> — {h.esc(a['description'])}</li>")
            for a in d.alerts if a["severity"] in ("page", "ticket")]
    if desc:
        body = h.join(body, h.details("Descriptions of the page and ticket alerts", h.Html(f"<ul>{''.join(desc)}</ul>")))
    n_act = sum(1 for a in d.alerts if a["severity"] in ("page", "ticket"))
    return h.Section("Alerts", body, "alerts",
                     f"{len(d.alerts)} alert(s) for this window, {n_act} of them page or ticket (on-call); "
                     "info alerts are findings, not actions.")


def _figures(wh: Warehouse, d: ReportData, out: Path) -> tuple[h.Html, h.Html, list[Path]]:
    written: list[Path] = []
    sel = plot_data.Selection(d.window_start, d.window_end, d.pop, d.rollout_id, "all")
    dist = []
    for metric in DISTRIBUTIONS:
        m = get_metric(metric)
        what = m.label or m.name
        pdf = render.save_png(render.pdf_figure(plot_data.pdf_rows(wh, sel, metric, PDF_BINS_PER_OCTAVE), metric,
                                                f"PDF of {m.label} [{m.unit}]\n{sel.label()}", PDF_BINS_PER_OCTAVE),
                              out / f"pdf_{metric}.png")
        cdf = render.save_png(render.cdf_figure(plot_data.cdf_rows(wh, sel, metric),
                                                metric, f"CDF of {m.label} [{m.unit}]\n{sel.label()}"),
                              out / f"cdf_{metric}.png")
        written += [pdf, cdf]
        dist.append(h.Html(f"<h3>{h.esc(m.label)} [{h.esc(m.unit)}]</h3>"))
        dist.append(h.Html('<div class="figures">'
                           + h.figure(pdf.name, f"PDF per arm: {what} per {m.grain}; log x axis, share of exact zeros in the legend.")
                           + h.figure(cdf.name, f"CDF per arm: {what} per {m.grain}; the curve starts at the arm's share of zeros.")
                           + "</div>"))
    heat = []
    hsel = plot_data.Selection(d.window_start, d.window_end, d.pop, d.rollout_id, HEATMAP_SEGMENT)
    for pair, name, label in HEATMAPS:
        png = render.save_png(render.heatmap_figure(plot_data.heatmap_rows(wh, hsel, pair, 4), pair,
                                                    f"{label} per connection (bulk)\n{hsel.label()}", 4), out / name)
        written.append(png)
        heat.append(h.figure(png.name, f"{label}, one panel per arm: share of the arm's bulk connections "
                                       f"(≥ 1 MiB) in each cell; the bottom strip holds connections with 0.",
                             cls="wide"))
    return h.join(*dist), h.join(*heat), written


def _hosts_section(d: ReportData) -> h.Section:
    control = [r["retrans_pct_ratio"] for r in d.hosts if r["arm"] == "control" and _finite(r["retrans_pct_ratio"])]
    base = statistics.median(control) if control else None
    rows, kinds = [], []
    for r in d.hosts:
        rel = (r["retrans_pct_ratio"] / base) if base and _finite(r["retrans_pct_ratio"]) else None
        rows.append((r["pop"], r["arm"], r["ccs"], r["host"], f"{r['connections']:,}",
                     _num(r["retrans_pct_ratio"], ".2f"), f"×{rel:.1f}" if rel is not None else "–",
                     _num(100 * r["share_above_50pct"], ".2f") if _finite(r["share_above_50pct"]) else "–",
                     _num(r["rtt_us_p50"], ".1f", 1000), _num(r["rtt_us_mean"], ".1f", 1000),
                     _num(r["inflight_bytes_mean"], ",.1f", 1024), f"{r['bulk_requests']:,}",
                     _num(r["goodput_bps_ratio"], ".2f", 1e6)))
        kinds.append("bad" if rel is not None and rel >= 3 else ("warn" if rel is not None and rel >= 1.5 else ""))
    body = h.table(("PoP", "arm", "cc", "host", "connections", "retrans % (bytes)", "vs control median",
                    "conns > 50% retrans [%]", "RTT p50 [ms]", "RTT mean [ms]", "in flight mean [KiB]",
                    "bulk requests", "goodput [Mbit/s]"), rows,
                   row_class=lambda i, _r: _row_kind(kinds[i]) if kinds[i] else "", numeric=tuple(range(4, 13)),
                   cls="hosts")
    return h.Section("Per-host breakdown", body, "hosts",
                     "One row per host over the window (segment 'all'). Hosts are the unit of the tests: a single bad "
                     "host shows here first. Rows are amber at ≥ 1.5× and red at ≥ 3× the control hosts' median "
                     "retransmit share. Goodput is bulk body bits / request seconds.")


HOW_TO_READ = h.join(
    h.Html("<h3>What was compared</h3>"),
    h.para("Whole servers (hosts) of a PoP were assigned at random to arms: the control keeps the current "
           "congestion-control algorithm, each treatment arm runs another (e.g. BBRv1, BBRv2). Every connection "
           "a host serves uses its arm's algorithm. Metrics are measured per connection (sampled socket "
           "statistics) and per bulk HTTP request (nginx logs)."),
    h.Html("<h3>Why the tests are host-clustered</h3>"),
    h.para("The unit that was randomized is the host, not the connection. Connections of one host share its "
           "network path, load and hardware, so they are not independent: treating thousands of connections "
           "as independent samples gives confident-looking but wrong answers (in A/A simulations, 66–72% false "
           "positives at α = 0.05). Every test here therefore compares hosts: ratios of host sums with the delta "
           "method, quantiles with a host-clustered interval, and exact host-label permutation tests when there "
           "are few hosts. The effective sample size is the number of hosts, not connections."),
    h.Html("<h3>Inconclusive by design</h3>"),
    h.para("With few hosts per arm, even an exact permutation test has a smallest possible p-value (3 vs 3 hosts: "
           "0.10; 4 vs 4: 0.029; 5 vs 5: 0.008). If that floor is above the α the test needs, no data could "
           "ever show a difference: the judge says 'inconclusive by design' instead of pretending. The cure is "
           "more hosts (or more looks planned ahead), not more connections."),
    h.Html("<h3>Reading the effect table</h3>"),
    h.ul([h.Html("<strong>effect</strong>: treatment relative to control (+20% = 20% higher); for shares of "
                 "connections, the difference in percentage points."),
          h.Html("<strong>95% CI</strong>: where the true effect plausibly lies; <strong>p</strong>: for guardrails, "
                 "one-sided against the margin; <strong>q</strong>: p adjusted for testing many metrics (BH)."),
          h.Html("<strong>guardrail margin</strong>: how much worse is tolerated (e.g. retransmits +25%); "
                 "<strong>page</strong> guardrails roll back, <strong>ticket</strong> guardrails halt."),
          h.Html("Colours: " + h.badge("regression", "bad") + " " + h.badge("improvement", "good") + " "
                 + h.badge("non inferior", "good") + " " + h.badge("no difference", "neutral") + " "
                 + h.badge("inconclusive", "warn") + " " + h.badge("shift", "info"))]),
    h.Html("<h3>Data-quality gates</h3>"),
    h.para("Before any effect counts, the judge checks the data: every host reported every hour, sampling rates "
           "match, connections really used the arm's algorithm (sockets opened before a switch keep the old one), "
           "traffic shares look like the pre-period, and each arm has enough hosts. A failed gate means "
           "'no decision', never 'pass'."),
    h.Html("<h3>Figures</h3>"),
    h.para("PDFs and CDFs pool all connections of an arm over the window, on log axes because RTT, retransmits "
           "and in-flight bytes span decades; exact zeros (e.g. connections with no retransmit) cannot sit on a "
           "log axis, so their share is given in the legend. Heatmaps (as in Dropbox's BBRv2 evaluation) show "
           "how retransmits and in-flight bytes depend on RTT, for bulk connections (≥ 1 MiB)."),
)


def build_report(wh: Warehouse, rollout_id: str, out_dir: Path | None = None, pop: str = "",
                 t_from: datetime | None = None, t_to: datetime | None = None) -> ReportResult | None:
    """Write ``out_dir/index.html`` and its PNGs. A rollout that has hosts assigned but nothing
    rolled up yet (its first hour is not complete) gets a page that says so; None when the
    warehouse knows nothing of the rollout (no assignments, no rollups, no judge rows)."""
    d = load(wh, rollout_id, pop, t_from, t_to)
    if d is None:
        return _pending_report(wh, rollout_id, pop, out_dir)
    out = Path(out_dir) if out_dir is not None else default_out_dir(rollout_id)
    out.mkdir(parents=True, exist_ok=True)
    dist, heat, figures = _figures(wh, d, out)
    where = pop or ", ".join(d.pops) or "all PoPs"
    sections = [
        _decision_section(d),
        _gates_section(d),
        _guardrails_section(d),
        precision.adjustment_section(d),
        precision.share_section(wh, d),
        h.Section("Distributions per arm", dist, "distributions",
                  "Dropbox-style PDFs and CDFs of retransmits, in-flight bytes, RTT and goodput, one line per arm."),
        h.Section("Heatmaps against RTT", heat, "heatmaps",
                  "Does the treatment retransmit more, or keep more bytes in flight, on long paths?"),
        _effects_section(d),
        _hosts_section(d),
        _arms_section(d),
        _alerts_section(d),
        h.Section("How to read this report", HOW_TO_READ, "how-to-read",
                  "For readers who have never seen ccab."),
    ]
    title = f"Canary report — {rollout_id}"
    subtitle = (f"PoP {where} · window {_when(d.window_start)} – {_when(d.window_end)} · "
                + ("judged by the ccab statistical judge" if d.judged else "not judged yet"))
    generated = f"Generated by `ccab report --rollout {rollout_id}` at {_when(datetime.now(timezone.utc))}."
    index = h.write_page(out / "index.html", h.render_page(title, sections, subtitle, generated))
    return ReportResult(index, figures, d)
