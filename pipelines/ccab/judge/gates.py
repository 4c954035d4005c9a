"""Data-quality gates (pure): any failure means "no decision", never "pass".

- ``arm_hosts``: each arm has at least 2 hosts with data (a host-level comparison needs them).
- ``host_completeness``: every expected host (seen in the window, or assigned by the controller)
  has connections in every hour of the window. A host missing data is attrition, not a smaller
  sample; hours not loaded yet (late data) fail the same way.
- ``sampling_rate``: per host, sampled tcp connections per nginx request. Hosts of one PoP serve the
  same client mix, so the ratio is the same up to noise unless sampling changed: a host off the
  PoP median by more than 2× fails, and an arm whose hosts differ from control's (Welch t on the
  log ratio, p < 0.001, and more than 10 %) fails — halved sampling on one arm is caught.
- ``cc_compliance``: share of a host's connections whose own ``cc`` is not its arm's (sockets opened
  before a flip keep the old algorithm): above 1 % fails.
- ``traffic_share``: each host's share of the PoP's requests vs the pre-period (before the rollout
  touched it): a host whose share moved by more than ×1.5 fails. Skipped without a pre-period.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import datetime

import numpy as np
# scipy and statsmodels are imported in the functions that use them: together ~1.5 s at import,
# which every command that reaches the judge (the rollout CLI, the controller) would pay
from ccab.base.chtime import hours_between, sql_time
from ccab.judge.model import GateCheck

CC_COMPLIANCE_MAX = 0.01
SAMPLING_HOST_FACTOR = 2.0
SAMPLING_ARM_P = 0.001
SAMPLING_ARM_MIN_DIFF = 0.10
TRAFFIC_SHARE_FACTOR = 1.5


def window_hours(start: datetime, end: datetime) -> list[str]:
    """The UTC hours of ``[start, end)`` as the warehouse writes them."""
    return [sql_time(h) for h in hours_between(start, end)]


def arm_hosts_gate(hosts_by_arm: dict[str, set[str]], arms: list[str]) -> list[GateCheck]:
    out = []
    for arm in arms:
        g = len(hosts_by_arm.get(arm, ()))
        out.append(GateCheck("arm_hosts", arm, "", "pass" if g >= 2 else "fail", g, 2,
                             f"{g} host(s) with data" + ("" if g >= 2 else "; a host-level comparison needs at least 2")))
    return out


def completeness_gate(host_hours: list[tuple[str, str, list[str]]], expected: dict[str, str],
                      hours: list[str]) -> list[GateCheck]:
    """``host_hours``: (arm, host, hours with data); ``expected``: host -> arm of every host that
    should report (seen in the window or assigned)."""
    seen = {host: (arm, set(hs)) for arm, host, hs in host_hours}
    out = []
    for host in sorted(expected):
        arm = expected[host]
        have = seen.get(host, (arm, set()))[1]
        missing = [h for h in hours if h not in have]
        status = "fail" if missing else "pass"
        detail = "all hours present" if not missing else (
            f"no data in {len(missing)} of {len(hours)} hour(s): {_hours_text(missing)}")
        out.append(GateCheck("host_completeness", arm, host, status, len(missing), 0, detail))
    return out


def _hours_text(hours: list[str]) -> str:
    short = [h[:13] + "h" for h in hours]
    return ", ".join(short[:6]) + (f" … (+{len(short) - 6})" if len(short) > 6 else "")


def sampling_gate(conns: dict[str, int], requests: dict[str, float], arm_of: dict[str, str],
                  control_arm: str) -> list[GateCheck]:
    """``conns``: host -> sampled tcp connections; ``requests``: host -> nginx requests."""
    from scipy import stats as sps
    ratio = {h: conns[h] / requests[h] for h in conns if requests.get(h, 0) > 0 and conns[h] > 0}
    out: list[GateCheck] = []
    if len(ratio) < 2:
        return [GateCheck("sampling_rate", "", "", "skipped", math.nan, SAMPLING_HOST_FACTOR,
                          "fewer than 2 hosts with both tcp samples and nginx requests")]
    med = float(np.median(list(ratio.values())))
    for h in sorted(ratio):
        f = ratio[h] / med
        bad = f > SAMPLING_HOST_FACTOR or f < 1 / SAMPLING_HOST_FACTOR
        out.append(GateCheck("sampling_rate", arm_of.get(h, ""), h, "fail" if bad else "pass", f,
                             SAMPLING_HOST_FACTOR,
                             f"{ratio[h]:.4f} sampled connections per request, {f:.2f}× the PoP median"))
    for h in sorted(set(conns) - set(ratio)):
        out.append(GateCheck("sampling_rate", arm_of.get(h, ""), h, "fail", 0.0, SAMPLING_HOST_FACTOR,
                             "tcp samples but no nginx requests (or none sampled) in the window"))
    by_arm: dict[str, list[float]] = defaultdict(list)
    for h, r in ratio.items():
        by_arm[arm_of.get(h, "")].append(math.log(r))
    ctl = by_arm.get(control_arm, [])
    for arm, logs in sorted(by_arm.items()):
        if arm == control_arm or len(logs) < 2 or len(ctl) < 2:
            continue
        t = sps.ttest_ind(logs, ctl, equal_var=False)
        diff = math.exp(np.mean(logs) - np.mean(ctl)) - 1
        bad = t.pvalue < SAMPLING_ARM_P and abs(diff) > SAMPLING_ARM_MIN_DIFF
        out.append(GateCheck("sampling_rate", arm, "", "fail" if bad else "pass", diff, SAMPLING_ARM_MIN_DIFF,
                             f"sampled connections per request {diff:+.1%} vs {control_arm} "
                             f"(Welch p={t.pvalue:.2g})"))
    return out


def cc_gate(cc_counts: list[tuple[str, str, str, int]], expected_cc: dict[str, str]) -> list[GateCheck]:
    """``cc_counts``: (arm, host, cc, connections); ``expected_cc``: host -> the cc it should run."""
    per_host: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for arm, host, cc, n in cc_counts:
        per_host[(arm, host)][cc] += n
    out = []
    for (arm, host), cnt in sorted(per_host.items()):
        want = expected_cc.get(host)
        total = sum(cnt.values())
        if not want or not total:
            continue
        wrong = total - cnt.get(want, 0)
        share = wrong / total
        others = ", ".join(f"{c} {n}" for c, n in cnt.most_common() if c != want)
        out.append(GateCheck("cc_compliance", arm, host, "fail" if share > CC_COMPLIANCE_MAX else "pass", share,
                             CC_COMPLIANCE_MAX,
                             f"{share:.2%} of {total} connections not {want}" + (f" ({others})" if others else "")))
    return out


def expected_cc_by_host(cc_counts: list[tuple[str, str, str, int]], assigned: dict[str, tuple[str, str]]) -> dict[str, str]:
    """host -> expected cc: the controller's assignment when there is one, else the arm's majority cc."""
    arm_cc: dict[str, Counter] = defaultdict(Counter)
    host_arm = {}
    for arm, host, cc, n in cc_counts:
        arm_cc[arm][cc] += n
        host_arm[host] = arm
    out = {}
    for host, arm in host_arm.items():
        if host in assigned and assigned[host][0] == arm:
            out[host] = assigned[host][1]
        elif arm_cc[arm]:
            out[host] = arm_cc[arm].most_common(1)[0][0]
    return out


def traffic_share_gate(window: dict[str, float], pre: dict[str, float], arm_of: dict[str, str]) -> list[GateCheck]:
    hosts = sorted(set(window) & set(pre))
    if len(hosts) < 2 or not sum(pre[h] for h in hosts):
        return [GateCheck("traffic_share", "", "", "skipped", math.nan, TRAFFIC_SHARE_FACTOR,
                          "no pre-period requests for these hosts (nothing to compare with)")]
    tw = sum(window[h] for h in hosts)
    tp = sum(pre[h] for h in hosts)
    out = []
    for h in hosts:
        f = (window[h] / tw) / (pre[h] / tp) if pre[h] else math.inf
        bad = f > TRAFFIC_SHARE_FACTOR or f < 1 / TRAFFIC_SHARE_FACTOR
        out.append(GateCheck("traffic_share", arm_of.get(h, ""), h, "fail" if bad else "pass", f, TRAFFIC_SHARE_FACTOR,
                             f"share of the PoP's requests {window[h] / tw:.2%} vs {pre[h] / tp:.2%} before "
                             f"the rollout ({f:.2f}×)"))
    return out


def failed_for_arm(gates: list[GateCheck], treatment_arm: str, control_arm: str) -> list[str]:
    """Failed gate descriptions that affect a treatment-vs-control comparison."""
    out = []
    for g in gates:
        if g.status != "fail" or g.arm not in (treatment_arm, control_arm, ""):
            continue
        where = f"{g.arm}/{g.host}" if g.host else (g.arm or "rollout")
        out.append(f"{g.gate} {where}: {g.detail}")
    return out
