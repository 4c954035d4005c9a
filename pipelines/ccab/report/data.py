"""What the canary report shows, read from the warehouse (the judge's tables and the rollups).

Judge tables are ReplacingMergeTree: read with FINAL, and of several judged windows take the
newest (largest ``window_end``, then the latest ``computed_seq``). All aggregation over hosts and
hours happens in SQL; only the per-host median is read in Python from the merged histogram.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from ccab.base.bins import Histogram
from ccab.base.chtime import parse_sql_time, sql_time
from ccab.base.warehouse import Warehouse


@dataclass
class ReportData:
    rollout_id: str
    pop: str                      # '' = every PoP of the rollout
    window_start: datetime
    window_end: datetime
    judged: bool                  # a judge window was found
    pops: list[str] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)
    alerts: list[dict] = field(default_factory=list)
    gates: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    hosts: list[dict] = field(default_factory=list)
    arms: list[dict] = field(default_factory=list)


def judged_window(wh: Warehouse, rollout_id: str, pop: str = "", t_from: datetime | None = None,
                  t_to: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The newest judged window of the rollout (inside ``[t_from, t_to)`` when given), or None."""
    res = wh.query(
        """SELECT window_start, window_end FROM judge_verdicts FINAL
           WHERE rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})
             AND window_start >= {a:DateTime('UTC')} AND window_end <= {b:DateTime('UTC')}
           ORDER BY window_end DESC, computed_seq DESC, window_start ASC LIMIT 1""",
        params={"r": rollout_id, "pop": pop, "a": sql_time(t_from or datetime(1970, 1, 1, tzinfo=timezone.utc)),
                "b": sql_time(t_to or datetime(2105, 1, 1, tzinfo=timezone.utc))})
    if not res.rows:
        return None
    return parse_sql_time(res.rows[0][0]), parse_sql_time(res.rows[0][1])


def rollup_window(wh: Warehouse, rollout_id: str, pop: str = "") -> tuple[datetime, datetime] | None:
    """First hour and end of the last hour of the rollout's rollups, or None."""
    res = wh.query("""SELECT count(), min(hour), max(hour) FROM cohort_hourly
                      WHERE rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})""",
                   params={"r": rollout_id, "pop": pop})
    n, lo, hi = res.rows[0]
    if not n:
        return None
    return parse_sql_time(lo), parse_sql_time(hi) + timedelta(hours=1)


def _judge_params(d: ReportData) -> dict:
    return {"r": d.rollout_id, "pop": d.pop, "ws": sql_time(d.window_start), "we": sql_time(d.window_end)}


_WINDOW = """rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})
             AND window_start = {ws:DateTime('UTC')} AND window_end = {we:DateTime('UTC')}"""


def load(wh: Warehouse, rollout_id: str, pop: str = "", t_from: datetime | None = None,
         t_to: datetime | None = None) -> ReportData | None:
    """Everything the report shows, or None when the rollout has neither judge rows nor rollups.

    Window: the newest judged window (within ``[t_from, t_to)`` if given); with no judged window,
    ``[t_from, t_to)`` or the rollout's whole rollup span (figures and hosts only)."""
    win = judged_window(wh, rollout_id, pop, t_from, t_to)
    judged = win is not None
    if win is None:
        span = rollup_window(wh, rollout_id, pop)
        if span is None and (t_from is None or t_to is None):
            return None
        win = (t_from or span[0], t_to or span[1])
    d = ReportData(rollout_id, pop, win[0], win[1], judged)
    p = _judge_params(d)
    if judged:
        d.verdicts = wh.query(f"""SELECT pop, treatment_arm, control_arm, decision, reasons, alert_ids, gates_failed,
                                         look, looks_planned, computed_seq
                                  FROM judge_verdicts FINAL WHERE {_WINDOW}
                                  ORDER BY pop, treatment_arm""", params=p).dicts()
        d.gates = wh.query(f"""SELECT pop, gate, arm, host, status, value, threshold, detail
                               FROM judge_gates FINAL WHERE {_WINDOW}
                               ORDER BY pop, status = 'pass', gate, arm, host""", params=p).dicts()
        d.results = wh.query(f"""SELECT pop, treatment_arm, control_arm, metric, statistic, segment, role, method,
                                        hosts_treatment, hosts_control, value_treatment, value_control, estimate,
                                        ci_low, ci_high, p_value, q_value, alpha_look, min_attainable_p, margin,
                                        severity, outcome, adjustment, variance_reduction
                                 FROM judge_results FINAL WHERE {_WINDOW}
                                 ORDER BY pop, role, metric, statistic, segment, treatment_arm""", params=p).dicts()
        ids = sorted({a for v in d.verdicts for a in v["alert_ids"]})
        d.alerts = wh.query(f"""SELECT alert_id, kind, severity, action, metric, statistic, segment, treatment_arm,
                                       direction, estimate, ci_low, ci_high, p_value, summary, description,
                                       report_url, pop
                                FROM alerts FINAL WHERE {_WINDOW}
                                ORDER BY severity = 'page' DESC, severity = 'ticket' DESC, kind, treatment_arm,
                                         metric, statistic, segment""", params=p).dicts()
        for a in d.alerts:
            a["evidence"] = a["alert_id"] in ids
    d.pops = sorted({r[0] for r in wh.query(
        """SELECT DISTINCT pop FROM cohort_hourly WHERE rollout_id = {r:String}
           AND ({pop:String} = '' OR pop = {pop:String})
           AND hour >= {ws:DateTime('UTC')} AND hour < {we:DateTime('UTC')}""", params=p).rows}
                    | {v["pop"] for v in d.verdicts})
    d.hosts = host_breakdown(wh, d)
    d.arms = arm_overview(wh, d)
    return d


_HOSTS_SQL = """
WITH rows AS (
    SELECT pop, arm, kernel, cc, host, metric, n, n_zero, n_above_50pct, value_sum, ratio_num, ratio_den
    FROM cohort_hourly
    WHERE rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})
      AND segment = 'all' AND hour >= {ws:DateTime('UTC')} AND hour < {we:DateTime('UTC')}
      AND metric IN ('retrans_pct', 'rtt_us', 'inflight_bytes', 'goodput_bps')
)
SELECT pop, arm, host,
       arrayStringConcat(arraySort(groupUniqArray(cc)), '+')                          AS ccs,
       arrayStringConcat(arraySort(groupUniqArray(kernel)), '+')                      AS kernels,
       sumIf(n, metric = 'rtt_us')                                                    AS connections,
       if(sumIf(ratio_den, metric = 'retrans_pct') > 0,
          100 * sumIf(ratio_num, metric = 'retrans_pct') / sumIf(ratio_den, metric = 'retrans_pct'), NULL)
                                                                                      AS retrans_pct_ratio,
       if(sumIf(n, metric = 'retrans_pct') > 0,
          sumIf(n_above_50pct, metric = 'retrans_pct') / sumIf(n, metric = 'retrans_pct'), NULL)
                                                                                      AS share_above_50pct,
       if(sumIf(n, metric = 'rtt_us') > 0,
          sumIf(value_sum, metric = 'rtt_us') / sumIf(n, metric = 'rtt_us'), NULL)    AS rtt_us_mean,
       sumIf(n_zero, metric = 'rtt_us')                                               AS rtt_zero,
       if(sumIf(n, metric = 'inflight_bytes') > 0,
          sumIf(value_sum, metric = 'inflight_bytes') / sumIf(n, metric = 'inflight_bytes'), NULL)
                                                                                      AS inflight_bytes_mean,
       sumIf(n, metric = 'goodput_bps')                                               AS bulk_requests,
       if(sumIf(ratio_den, metric = 'goodput_bps') > 0,
          sumIf(ratio_num, metric = 'goodput_bps') / sumIf(ratio_den, metric = 'goodput_bps'), NULL)
                                                                                      AS goodput_bps_ratio
FROM rows
GROUP BY pop, arm, host
ORDER BY pop, arm = 'control' DESC, arm, host
"""

#: the hosts' rtt_us histograms over the window: their cells summed by bin
_HOST_RTT_CELLS_SQL = """
SELECT pop, arm, host, groupArray((bin, c)) AS cells
FROM (SELECT pop, arm, host, bin, sum(count) AS c FROM cohort_cells_hourly
      WHERE rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})
        AND segment = 'all' AND metric = 'rtt_us' AND hour >= {ws:DateTime('UTC')} AND hour < {we:DateTime('UTC')}
      GROUP BY pop, arm, host, bin)
GROUP BY pop, arm, host
"""


def host_breakdown(wh: Warehouse, d: ReportData) -> list[dict]:
    """One row per (pop, arm, host): connections and the key metrics over the window (segment 'all')."""
    out = []
    cells = {(pop, arm, host): {int(b): int(c) for b, c in bc}
             for pop, arm, host, bc in wh.query(_HOST_RTT_CELLS_SQL, params=_judge_params(d)).rows}
    for r in wh.query(_HOSTS_SQL, params=_judge_params(d)).dicts():
        hist = Histogram(int(r.pop("rtt_zero")), cells.get((r["pop"], r["arm"], r["host"]), {}))
        r["rtt_us_p50"] = hist.quantile(0.5) if hist.n else None
        out.append(r)
    return out


_ARMS_SQL = """
SELECT pop, arm,
       arrayStringConcat(arraySort(groupUniqArray(cc)), '+')      AS ccs,
       arrayStringConcat(arraySort(groupUniqArray(kernel)), '+')  AS kernels,
       uniqExact(host)                                            AS hosts,
       sumIf(n, metric = 'rtt_us')                                AS connections,
       sumIf(n, metric = 'goodput_bps')                           AS bulk_requests,
       uniqExact(hour)                                            AS hours
FROM cohort_hourly
WHERE rollout_id = {r:String} AND ({pop:String} = '' OR pop = {pop:String})
  AND segment = 'all' AND hour >= {ws:DateTime('UTC')} AND hour < {we:DateTime('UTC')}
GROUP BY pop, arm
ORDER BY pop, arm = 'control' DESC, arm
"""


def arm_overview(wh: Warehouse, d: ReportData) -> list[dict]:
    """One row per (pop, arm): algorithm, kernel, hosts, connections, bulk requests, hours."""
    return wh.query(_ARMS_SQL, params=_judge_params(d)).dicts()
