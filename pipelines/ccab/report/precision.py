"""Report panels of the judge's precision work: the pre-period adjustment per guardrail, and
"effect vs treated share" (does the host-level A/B depend on how many hosts are treated?)."""

from __future__ import annotations

import math
from datetime import datetime

from ccab.base.warehouse import Warehouse
from ccab.judge import data as jdata
from ccab.judge.core import pre_period
from ccab.judge.interference import UnitValues, effect_vs_share
from ccab.judge.model import DEFAULT_PRE_PERIOD_HOURS
from ccab.judge.stats import host_statistic
from ccab.report import html as h
from ccab.report.data import ReportData

SHARE_METRIC, SHARE_STAT, SHARE_P = "goodput_bps", "p50", 0.5


def adjustment_section(d: ReportData) -> h.Section:
    rows = [r for r in d.results if r["role"] == "guardrail"]
    if not rows:
        return h.Section("Pre-period adjustment", h.para("No guardrails judged.", "muted"), "adjustment")
    out = []
    for r in rows:
        vr = r.get("variance_reduction")
        out.append([r["pop"], r["treatment_arm"], r["metric"], r["statistic"],
                    f"{-vr:+.0%}" if isinstance(vr, float) and math.isfinite(vr) else "—",
                    r.get("adjustment") or "not asked"])
    return h.Section("Pre-period adjustment", h.table(["PoP", "arm", "metric", "statistic", "variance", "adjustment"],
                                                      out), "adjustment",
                     "Each guardrail is adjusted for the same hosts' values before the rollout (CUPED with the host "
                     "as the unit): 'variance' is the change of the host-level estimate's variance the adjustment "
                     "bought; 'off' says why a guardrail was tested unadjusted.")


def share_units(wh: Warehouse, d: ReportData) -> list[UnitValues]:
    """One unit per PoP of the rollout: its treated share and hosts' goodput p50, window and pre-period."""
    controls = {pop: sorted({v["control_arm"] for v in d.verdicts if v["pop"] == pop} or {"control"})[0]
                for pop in d.pops}
    return units_of_pops(wh, d.rollout_id, controls, d.window_start, d.window_end)


def units_of_pops(wh: Warehouse, rollout_id: str, control_of: dict[str, str], start: datetime, end: datetime,
                  pre_period_hours: int = DEFAULT_PRE_PERIOD_HOURS, metric: str = SHARE_METRIC,
                  p: float = SHARE_P) -> list[UnitValues]:
    """Per PoP (``control_of``: PoP -> its control arm) of ``rollout_id`` in ``[start, end)``: the
    share of hosts off control, and each host's ``metric`` quantile ``p`` (default goodput p50) in
    the window and in its pre-period, both read from the hourly rollups (host-level histograms)."""
    units = []
    for pop, control in control_of.items():
        arms = jdata.arms_in(wh, pop, rollout_id, start, end)
        treat = [a for a in arms if a != control]
        if not treat or control not in arms:
            continue
        rows = jdata.host_rows(wh, pop, rollout_id, "all", start, end, [metric], arms).get(metric, [])
        arr = jdata.host_arrays(rows, treat[0], control)
        a, b = pre_period(wh, pop, rollout_id, pre_period_hours)
        pre_rows = jdata.pre_period_rows(wh, pop, list(arr.hosts), a, b, [metric]).get(metric, []) \
            if b > a else []
        pre = jdata.host_arrays(pre_rows, "", "")
        y = host_statistic(arr, "quantile", p)
        x_of = dict(zip(pre.hosts, host_statistic(pre, "quantile", p)))
        keep = [i for i, host in enumerate(arr.hosts) if y[i] > 0 and x_of.get(host, 0) > 0]
        if not keep:
            continue
        all_hosts = {r.host for r in rows}
        share = len({r.host for r in rows if r.arm != control}) / max(len(all_hosts), 1)
        units.append(UnitValues(pop, share, arr.treated[keep], y[keep], [x_of[arr.hosts[i]] for i in keep]))
    return units


def share_section(wh: Warehouse, d: ReportData) -> h.Section:
    panel = effect_vs_share(share_units(wh, d))
    rows = [[u, f"{s:.0%}", f"{math.expm1(ab):+.1%} ± {ab_se:.1%}", f"{math.expm1(c):+.1%}", f"{math.expm1(t):+.1%}"]
            for u, s, (ab, ab_se), (c, _), (t, _) in zip(panel.units, panel.shares, panel.ab, panel.control_change,
                                                      panel.treated_change)]
    body = [h.table(["unit", "treated share", "A/B effect", "control vs its pre-period",
                     "treatment vs its pre-period"], rows) if rows else h.para("No unit with both arms.", "muted")]
    if math.isfinite(panel.full_rollout[0]):
        body.append(h.para(f"Full rollout, extrapolated (treatment at 100 % vs control at 0 %): "
                           f"{math.expm1(panel.full_rollout[0]):+.1%} ± {panel.full_rollout[1]:.1%} (log SE); "
                           f"host-level A/B pooled {math.expm1(panel.ab_pooled[0]):+.1%}."))
    body.append(h.para(panel.note, "muted" if not panel.spillover_detected else ""))
    return h.Section("Effect vs treated share", h.join(*body), "treated-share",
                     f"{SHARE_METRIC} {SHARE_STAT} per unit (PoP) with its share of treated hosts. When treatment and "
                     f"control share a bottleneck, the control arm's change from its own pre-period depends on the "
                     f"treated share and the host-level A/B is biased (Spang et al., IMC'21).")
