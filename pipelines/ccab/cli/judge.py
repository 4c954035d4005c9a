"""``ccab alerts`` (what on-call reads) and ``ccab power`` (what a traffic team asks before a canary).

The judge itself runs from ``ccab analyze`` (pipelines/ccab/cli/analyze.py → pipelines/ccab/pipeline.py)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import timedelta

ALERTS_EPILOG = """\
examples:
  ccab alerts                                   # the page and ticket alerts (what on-call acts on)
  ccab alerts --severity all                    # also the informational findings
  ccab alerts --rollout tyo1-bbr-canary --severity page
  ccab alerts --json --rollout tyo1-bbr-canary  # the contract's fields, one JSON array
  ccab alerts --notify http://alertmanager:9093/api/v2/alerts --severity page   # (re)send to a webhook

alert_id is stable for a finding: re-running an analysis updates the alert instead of adding one.
action says what the rollout controller did: none, halted, rolled_back, promoted. An alert it acted
on, or one that was resolved, is sent to --notify as resolved (endsAt set): the summary line says so.
Alerts judged on a window that ended before the rollout's first assignment (a ccab_compare run over
pre-rollout hours) are not findings about the rollout: they are counted, not listed.
"""

POWER_EPILOG = """\
examples:
  ccab power --metric goodput_bps --statistic p10 --mde 0.05
  ccab power --metric retrans_pct --statistic ratio --mde 0.10 --pop tyo1 --arm control --hosts 7

how: the history (--from/--to, default: every hour in the rollups) is cut into windows of 1 h,
6 h, 24 h, 72 h and 168 h; in each window every host's statistic is computed in ClickHouse from
the rollups; the between-host spread of log(statistic) gives the hosts per arm a host-randomized
comparison needs (statsmodels TTestIndPower). Use control or pre-rollout hosts (--arm) so a real
effect does not inflate the spread.
"""


def register(sub) -> None:
    a = sub.add_parser("alerts", help="list the judge's alerts (or send them to a webhook)",
                       description="The alerts the statistical judge raised: guardrail regressions, circuit "
                                   "breaker trips, failed data-quality gates (page/ticket) and informational "
                                   "findings (info).",
                       epilog=ALERTS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--rollout", default="", metavar="ID", help="only this rollout")
    a.add_argument("--severity", default=None, choices=["page", "ticket", "info", "all"],
                   help="only this severity; all = every alert including the informational findings "
                        "(default: page and ticket)")
    a.add_argument("--kind", action="append", default=[],
                   choices=["guardrail", "breaker", "gate", "info", "segment", "shift"], help="only these kinds")
    a.add_argument("--json", action="store_true", help="print a JSON array with the contract's fields")
    a.add_argument("--notify", metavar="URL", help="POST the selected alerts to this Alertmanager-compatible URL")
    a.set_defaults(func=run_alerts)

    v = sub.add_parser("verdicts", help="the judge's latest decision per rollout and treatment arm, with reasons",
                       description="The newest judged window per (pop, rollout): each treatment arm's decision "
                                   "(rollback, halt, continue, pass, no_decision, inconclusive_by_design) and why.")
    v.add_argument("--rollout", default="", metavar="ID", help="only this rollout")
    v.add_argument("--json", action="store_true", help="print the verdicts as a JSON array")
    v.set_defaults(func=run_verdicts)

    p = sub.add_parser("power", help="hosts per arm x duration needed to detect a change",
                       description="Hosts per arm and canary duration needed to detect a relative change of a "
                                   "statistic, from the historical host-level variance in the rollups.",
                       epilog=POWER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--metric", required=True, help="e.g. goodput_bps, retrans_pct, rtt_us")
    p.add_argument("--statistic", required=True, help="mean | ratio | p10 | p50 | p90 | p99 | share_above:50")
    p.add_argument("--mde", type=float, required=True, metavar="REL",
                   help="minimum detectable relative change, e.g. 0.05 for 5%%")
    p.add_argument("--power", type=float, default=0.8, help="target power (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default: %(default)s)")
    p.add_argument("--one-sided", action="store_true", help="a one-sided (guardrail) test")
    p.add_argument("--pop", default="", help="only this PoP's hosts")
    p.add_argument("--arm", default="", help="only this arm's hosts (e.g. control)")
    p.add_argument("--hosts", type=int, default=None, metavar="G", help="also show the power with G hosts per arm")
    p.add_argument("--from", dest="t_from", metavar="ISO", help="history start (default: first rollup hour)")
    p.add_argument("--to", dest="t_to", metavar="ISO", help="history end (default: end of the last rollup hour)")
    p.add_argument("--json", action="store_true", help="print the table as a JSON array")
    p.set_defaults(func=run_power)


def check_rollout(wh, rollout_id: str) -> None:
    """A UserError (exit 2) naming the known rollouts when ``rollout_id`` is none of them."""
    from ccab.base.errors import UserError
    from ccab.judge.store import known_rollouts

    if not rollout_id:
        return
    from ccab.rollout.state import StateError, Store

    try:  # started here but nothing in the warehouse yet: known, just no alerts or verdicts
        if Store.for_rollout(rollout_id).exists():
            return
    except StateError:
        pass
    known = known_rollouts(wh)
    if rollout_id not in known:
        shown = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        raise UserError(f"--rollout {rollout_id!r}: no such rollout in the warehouse (known: {shown or 'none'})")


def run_alerts(args: argparse.Namespace) -> int:
    from urllib.parse import urlsplit

    from ccab.base.errors import UserError
    from ccab.base.warehouse import WarehouseError
    from ccab.judge.alerts.notify import notify
    from ccab.judge.alerts.store import before_rollout, read_alerts
    from ccab.pipeline import open_warehouse as warehouse

    if args.notify:
        url = urlsplit(args.notify)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise UserError(f"--notify {args.notify!r} is not an http(s) URL "
                            "(e.g. http://alertmanager:9093/api/v2/alerts)")
    severity = args.severity or "acting"
    try:
        with warehouse() as wh:
            check_rollout(wh, args.rollout)
            alerts = read_alerts(wh, rollout_id=args.rollout, severity="" if severity in ("all", "acting") else severity,
                                 kinds=args.kind)
            early = before_rollout(wh, alerts)
    except WarehouseError as exc:
        print(f"ccab alerts: {exc}", file=sys.stderr)
        return 1
    alerts = [a for a in alerts if a.alert_id not in early]
    hidden = 0
    if severity == "acting":  # the default: what on-call acts on; info findings counted, not listed
        hidden = sum(1 for a in alerts if a.severity not in ("page", "ticket"))
        alerts = [a for a in alerts if a.severity in ("page", "ticket")]
    if args.notify:
        try:
            sent = notify(args.notify, alerts)
        except RuntimeError as exc:
            print(f"ccab alerts: {exc}", file=sys.stderr)
            return 1
        resolved = sum(1 for a in alerts if a.status == "resolved")
        print(f"sent {sent} alert(s) to {args.notify}"
              + (f", {resolved} of them as resolved (already acted on or resolved: Alertmanager closes them, "
                 f"no new page)" if resolved else ""), file=sys.stderr)
    if args.json:
        keys = ("alert_id", "ts_ms", "rollout_id", "pop", "metric", "statistic", "segment", "treatment_arm",
                "control_arm", "direction", "estimate", "ci_low", "ci_high", "p_value", "severity", "action")
        extra = ("kind", "first_seen_ms", "summary", "description", "report_url", "window_start", "window_end")
        print(json.dumps([{k: a.as_dict()[k] for k in keys + extra} for a in alerts], indent=1))
        return 0
    if not alerts:
        print(("no page or ticket alerts" if severity == "acting" else "no alerts")
              + (f" for {args.rollout}" if args.rollout else ""))
    from ccab.cli.common import printable

    for a in alerts:
        print(f"[{a.severity:6s}] {printable(a.summary)}  (action: {a.action}; id {a.alert_id})")
        if a.severity != "info":
            print(f"         {printable(a.description)}")
    if hidden:
        print(f"({hidden} informational finding(s) not shown: ccab alerts --severity info, or --severity all)")
    if early:
        print(f"({len(early)} alert(s) from windows that ended before their rollout's first assignment not shown: "
              f"not about the rollout)")
    return 0


_LATEST_VERDICTS = """
SELECT pop, rollout_id, treatment_arm, control_arm, decision, reasons, alert_ids, gates_failed,
       toString(window_start) AS window_start, toString(window_end) AS window_end, look, looks_planned
FROM judge_verdicts FINAL
WHERE ({r:String} = '' OR rollout_id = {r:String})
  AND (pop, rollout_id, window_end, computed_seq) IN (
        SELECT pop, rollout_id, max(window_end), argMax(computed_seq, (window_end, computed_seq))
        FROM judge_verdicts FINAL GROUP BY pop, rollout_id)
ORDER BY pop, rollout_id, treatment_arm
"""


def run_verdicts(args: argparse.Namespace) -> int:
    from ccab.pipeline import open_warehouse as warehouse

    with warehouse() as wh:
        check_rollout(wh, args.rollout)
        rows = wh.query(_LATEST_VERDICTS, params={"r": args.rollout}).dicts()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no verdicts yet (run ccab analyze, or the ccab_compare DAG)")
        return 0
    from ccab.cli.common import printable

    for r in rows:
        print(printable(f"{r['pop']}/{r['rollout_id']} {r['treatment_arm']} vs {r['control_arm']}: "
                        f"{r['decision'].upper()}  (window {r['window_start']}–{r['window_end']} UTC, "
                        f"look {r['look']}/{r['looks_planned']})"))
        for reason in r["reasons"]:
            print(f"    - {printable(reason)}")
    return 0


def print_verdicts(report) -> None:
    """The judge's verdict per arm and its page/ticket alerts, as on-call reads them (stored values
    printed without their control characters)."""
    from ccab.cli.common import printable as p
    print(f"\njudge, window {report.window_start:%Y-%m-%d %H:%M}–{report.window_end:%Y-%m-%d %H:%M} UTC, "
          f"look {report.look}/{report.looks_planned}:")
    if not report.rollouts:
        print("  nothing to judge (no rollout in this window)")
    for j in report.rollouts:
        if j.error:
            print(p(f"  {j.pop}/{j.rollout_id}: {j.error}"))
        for v in j.verdicts:
            print(p(f"  {j.pop}/{j.rollout_id} {v.treatment_arm} vs {v.control_arm}: {v.decision.upper()}"))
            for reason in v.reasons:
                print(f"    - {p(reason)}")
        skipped = [g for g in j.gates if g.status == "skipped"]
        for g in skipped:
            print(f"    (gate {g.gate} skipped: {g.detail})")
    alerts = [a for a in report.alerts if a.severity in ("page", "ticket")]
    infos = len(report.alerts) - len(alerts)
    print(f"alerts: {len(alerts)} page/ticket, {infos} info (ccab alerts --severity all for all)")
    for a in alerts:
        print(f"  [{a.severity}] {p(a.summary)}")


def run_power(args: argparse.Namespace) -> int:
    from ccab.cli.common import parse_hour
    from ccab.cohorts.job import rollup_span
    from ccab.judge.model import check_statistic
    from ccab.judge.power import history_hours, known_values, power_table
    from ccab.pipeline import open_warehouse as warehouse

    try:
        check_statistic(args.metric, args.statistic)
        if not 0 < abs(args.mde) < 1:
            raise ValueError(f"--mde is a relative change below 1 (0.05 = 5 %), got {args.mde}"
                             + (f"; for {args.mde:g} % give --mde {args.mde / 100:g}" if 1 <= abs(args.mde) < 100 else ""))
        if not 0 < args.power < 1 or not 0 < args.alpha < 0.5:
            raise ValueError("--power must be in (0, 1) and --alpha in (0, 0.5)")
    except ValueError as exc:
        print(f"ccab power: {exc}", file=sys.stderr)
        return 2
    try:
        given = (parse_hour(args.t_from, "--from") if args.t_from else None,
                 parse_hour(args.t_to, "--to") if args.t_to else None)
    except ValueError as exc:
        print(f"ccab power: {exc}", file=sys.stderr)
        return 2
    if given[0] and given[1] and given[0] >= given[1]:
        print(f"ccab power: --from {args.t_from} is not before --to {args.t_to}", file=sys.stderr)
        return 2
    with warehouse() as wh:
        span = rollup_span(wh)
        if span is None:  # an answer, like too little history below: nothing to size a canary from yet
            print("[]" if args.json else
                  "not enough history: the rollups are empty (load data and run `ccab analyze` first)")
            return 0
        try:
            start = parse_hour(args.t_from, "--from") if args.t_from else span[0]
            end = parse_hour(args.t_to, "--to") if args.t_to else span[1]
        except ValueError as exc:
            print(f"ccab power: {exc}", file=sys.stderr)
            return 2
        if start >= end:
            print(f"ccab power: --from {start:%Y-%m-%dT%H:%MZ} is not before --to {end:%Y-%m-%dT%H:%MZ}", file=sys.stderr)
            return 2
        for column, value in (("pop", args.pop), ("arm", args.arm)):
            known = known_values(wh, column) if value else []
            if value and value not in known:
                print(f"ccab power: --{column} {value!r} is not in the rollups (known: {', '.join(known) or 'none'})",
                      file=sys.stderr)
                return 2
        hours = history_hours(wh, args.metric, start, end, args.pop, args.arm)
        rows = power_table(wh, args.metric, args.statistic, args.mde, start=start, end=end, pop=args.pop,
                           arm=args.arm, power=args.power, alpha=args.alpha,
                           alternative="larger" if args.one_sided else "two-sided", hosts_per_arm=args.hosts)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], default=lambda x: None))
        return 0
    span_h = (end - start) / timedelta(hours=1)
    print(f"{args.metric} {args.statistic}: detect {args.mde:+.1%} with power {args.power:.0%} at "
          f"alpha {args.alpha:g} ({'one' if args.one_sided else 'two'}-sided); history {hours} h with rollups "
          f"in {span_h:.0f} h from {start:%Y-%m-%d %H:%M} UTC{' in ' + args.pop if args.pop else ''}"
          f"{', arm ' + args.arm if args.arm else ''}")
    if not rows:  # an answer, like --json's []: the history cannot size a canary yet
        print("not enough history: need at least 2 hosts in one window of 1 h")
        return 0
    g_label = f"power @{args.hosts} hosts" if args.hosts else "power @hosts seen"
    print(f"{'duration':>9} {'windows':>8} {'hosts':>6} {'sd(log) between hosts':>22} {'hosts/arm needed':>17} "
          f"{g_label:>17} {'pre-period var cut':>19} {'hosts/arm adjusted':>19}")
    for r in rows:
        need = "> 100k" if r.hosts_per_arm is None else str(r.hosts_per_arm)
        pw = "n/a" if not math.isfinite(r.power_at_hosts) else f"{r.power_at_hosts:.0%}"
        cut = "n/a" if not math.isfinite(r.variance_reduction) else f"{-r.variance_reduction:+.0%}"
        need_adj = ("n/a" if not math.isfinite(r.sigma_log_adjusted) else
                    "> 100k" if r.hosts_per_arm_adjusted is None else str(r.hosts_per_arm_adjusted))
        print(f"{r.duration_h:>8}h {r.windows:>8} {r.hosts:>6} {r.sigma_log:>22.4f} {need:>17} {pw:>17} "
              f"{cut:>19} {need_adj:>19}")
    print("durations the history cannot show (no window of that many consecutive hours with rollups) are left "
          "out; longer canaries "
          "average out hour-to-hour noise but not the hosts' own differences — the pre-period adjustment "
          "removes the share of them a host's previous window predicts (n/a: fewer than 2 windows)")
    return 0
