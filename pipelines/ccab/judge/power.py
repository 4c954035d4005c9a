"""Power: how many hosts per arm, for how long, to see a given change — answered before the canary.

With host randomization the noise that matters is the **between-host** spread of the statistic
(a host's p10 goodput differs from another's for reasons that have nothing to do with the
algorithm), and more connections stop helping once each host has many (docs/reference/
statistics.md). So the power of a comparison comes from the historical host-level data:

1. for a window length ``d`` (1 h, 6 h, 24 h, …), cut the history into consecutive windows of
   ``d`` hours and compute each host's statistic in each window, in ClickHouse, from the rollup
   histograms and sums;
2. ``σ_d`` = the pooled between-host standard deviation of log(statistic) (within arm and window);
3. a relative change ``mde`` is ``δ = log(1 + mde)`` on that scale: Cohen's ``d = δ / σ_d``, and
   ``statsmodels.stats.power.TTestIndPower`` gives the hosts per arm for the power asked, or the
   power of a given number of hosts.

The judge's tests are host-permutation tests of pooled statistics; for hosts of similar size their
power is that of the host-level t-test (checked by simulation in tests/test_judge_power.py).

With the pre-period adjustment (:func:`ccab.judge.stats.adjusted_effect`) the host-level variance
shrinks by ``ρ²``, the squared correlation of a host's statistic with its own earlier value; the
table estimates it from consecutive windows of the history and shows the hosts needed both ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import numpy as np
# scipy and statsmodels are imported in the functions that use them: together ~1.5 s at import,
# which every command that reaches the judge (the rollout CLI, the controller) would pay
from ccab.base.chtime import sql_time
from ccab.base.warehouse import Warehouse
from ccab.judge.model import QUANTILES, SHARE_ABOVE, check_statistic

DEFAULT_DURATIONS_H = (1, 6, 24, 72, 168)


def sigma_from_host_stats(groups: list[np.ndarray]) -> tuple[float, int]:
    """Pooled within-group SD of log(statistic): ``groups`` are per-window (and arm) arrays of host
    statistics. Returns (σ, degrees of freedom); values <= 0 are dropped (no log)."""
    ss, df = 0.0, 0
    for g in groups:
        v = np.log(np.asarray([x for x in g if x > 0 and math.isfinite(x)], dtype=np.float64))
        if v.size >= 2:
            ss += float(((v - v.mean()) ** 2).sum())
            df += v.size - 1
    return (math.sqrt(ss / df) if df else math.nan), df


def predicted_power(mde: float, sigma_log: float, g_treatment: int, g_control: int, alpha: float = 0.05,
                    alternative: str = "two-sided") -> float:
    """Power of a host-level comparison to detect a relative change ``mde``."""
    from statsmodels.stats.power import TTestIndPower
    if not (sigma_log > 0 and math.isfinite(sigma_log)):
        return math.nan
    d = abs(math.log1p(mde)) / sigma_log
    alt = "larger" if alternative != "two-sided" else "two-sided"
    return float(TTestIndPower().power(effect_size=d, nobs1=g_treatment, alpha=alpha, ratio=g_control / g_treatment,
                                       alternative=alt))


def hosts_needed(mde: float, sigma_log: float, power: float = 0.8, alpha: float = 0.05,
                 alternative: str = "two-sided", max_hosts: int = 100_000) -> int | None:
    """Smallest number of hosts per arm (equal arms) with at least ``power``; None if beyond ``max_hosts``."""
    if not (sigma_log > 0 and math.isfinite(sigma_log)) or mde == 0:
        return None
    lo, hi = 2, 2
    while predicted_power(mde, sigma_log, hi, hi, alpha, alternative) < power:
        lo, hi = hi, hi * 2
        if hi > max_hosts:
            return None
    while lo < hi:
        mid = (lo + hi) // 2
        if predicted_power(mde, sigma_log, mid, mid, alpha, alternative) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo


_HOST_WINDOW_STATS = """
WITH {p:Float64} AS level
SELECT w, arm, host,
       multiIf({stat:String} = 'mean', value_sum / n,
               {stat:String} = 'ratio', if(ratio_den > 0, ratio_num / ratio_den, nan),
               {stat:String} = 'share', n_above / n,
               -- quantile from the merged histogram (zeros first, then the fine bins)
               greatest(1, ceil(level * n)) <= n_zero, 0,
               exp2((arrayElement(arrayMap(x -> x.1, h), arrayFirstIndex(c -> c >= greatest(1, ceil(level * n)) - n_zero,
                                                        arrayCumSum(arrayMap(x -> x.2, h)))) + 0.5) / 128)) AS value
FROM (
    SELECT intDiv(toUnixTimestamp(hour) - toUnixTimestamp({a:DateTime('UTC')}), {d:UInt32} * 3600) AS w, arm, host,
           sum(n) AS n, sum(n_zero) AS n_zero, sum(n_above_50pct) AS n_above, sum(value_sum) AS value_sum,
           sum(ratio_num) AS ratio_num, sum(ratio_den) AS ratio_den
    FROM cohort_hourly
    WHERE metric = {metric:String} AND segment = 'all' AND ({pop:String} = '' OR pop = {pop:String})
      AND ({arm:String} = '' OR arm = {arm:String})
      AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
    GROUP BY w, arm, host
    HAVING n > 0
) AS s
LEFT JOIN (
    -- the merged histogram: the window's cells summed by bin, (bin, count) ascending
    SELECT w, arm, host, arraySort(groupArray((bin, c))) AS h
    FROM (SELECT intDiv(toUnixTimestamp(hour) - toUnixTimestamp({a:DateTime('UTC')}), {d:UInt32} * 3600) AS w,
                 arm, host, bin, sum(count) AS c
          FROM cohort_cells_hourly
          WHERE metric = {metric:String} AND segment = 'all' AND ({pop:String} = '' OR pop = {pop:String})
            AND ({arm:String} = '' OR arm = {arm:String})
            AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
          GROUP BY w, arm, host, bin)
    GROUP BY w, arm, host
) AS cells USING (w, arm, host)
WHERE w < {windows:UInt32}
  -- only windows with data in every hour: a gap in the history (18 h without rollups between two
  -- runs) must not pass for a 24 h window that is really a 6 h one
  AND w IN (SELECT intDiv(toUnixTimestamp(hour) - toUnixTimestamp({a:DateTime('UTC')}), {d:UInt32} * 3600) AS w
            FROM cohort_hourly
            WHERE metric = {metric:String} AND segment = 'all' AND ({pop:String} = '' OR pop = {pop:String})
              AND ({arm:String} = '' OR arm = {arm:String})
              AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
            GROUP BY w HAVING uniqExact(hour) = {d:UInt32})
ORDER BY w, arm, host
"""


@dataclass
class PowerRow:
    duration_h: int
    windows: int
    hosts: int
    sigma_log: float
    hosts_per_arm: int | None
    power_at_hosts: float
    #: with the judge's pre-period adjustment: the share of the between-host variance a host's
    #: previous window explains (ρ² of consecutive windows), the adjusted SD and hosts needed
    variance_reduction: float = math.nan
    sigma_log_adjusted: float = math.nan
    hosts_per_arm_adjusted: int | None = None


def variance_reduction_from_windows(table: dict[tuple[int, str], dict[str, float]]) -> tuple[float, int]:
    """ρ² between a host's log statistic in one window and in the previous one (centred per window
    pair, pooled): the share of the between-host variance a pre-period covariate removes
    (Var(adjusted) = (1 − ρ²) Var). Returns (ρ², pairs); NaN with fewer than 3 pairs."""
    by_w: dict[int, dict[str, float]] = {}
    for (w, _arm), values in table.items():
        for h, v in values.items():
            if v > 0 and math.isfinite(v):
                by_w.setdefault(w, {})[h] = math.log(v)
    sxx = syy = sxy = 0.0
    n = 0
    for w in sorted(by_w):
        prev = by_w.get(w - 1)
        if not prev:
            continue
        hosts = sorted(set(prev) & set(by_w[w]))
        if len(hosts) < 2:
            continue
        x = np.array([prev[h] for h in hosts])
        y = np.array([by_w[w][h] for h in hosts])
        x, y = x - x.mean(), y - y.mean()
        sxx, syy, sxy, n = sxx + float(x @ x), syy + float(y @ y), sxy + float(x @ y), n + len(hosts)
    if n < 3 or sxx <= 0 or syy <= 0:
        return math.nan, n
    return sxy * sxy / (sxx * syy), n


def host_window_values(wh: Warehouse, metric: str, statistic: str, duration_h: int, start: datetime,
                       end: datetime, pop: str = "", arm: str = "") -> list[np.ndarray]:
    """Per (window, arm): the hosts' statistic over consecutive ``duration_h``-hour windows."""
    table = host_window_table(wh, metric, statistic, duration_h, start, end, pop, arm)
    return [np.array(list(v.values())) for v in table.values()]


def host_window_table(wh: Warehouse, metric: str, statistic: str, duration_h: int, start: datetime,
                      end: datetime, pop: str = "", arm: str = "") -> dict[tuple[int, str], dict[str, float]]:
    """(window, arm) -> host -> the host's statistic in that ``duration_h``-hour window."""
    windows = int((end - start).total_seconds() // (duration_h * 3600))
    if windows < 1:
        return {}
    stat = "share" if statistic == SHARE_ABOVE else statistic if statistic in ("mean", "ratio") else "quantile"
    res = wh.query(_HOST_WINDOW_STATS, params={
        "p": QUANTILES.get(statistic, 0.5), "stat": stat, "metric": metric, "pop": pop, "arm": arm,
        "a": sql_time(start), "b": sql_time(end), "d": duration_h, "windows": windows})
    groups: dict[tuple[int, str], dict[str, float]] = {}
    for w, a, host, value in res.rows:
        groups.setdefault((w, a), {})[host] = float(value) if value is not None else math.nan
    return groups


def history_hours(wh: Warehouse, metric: str, start: datetime, end: datetime, pop: str = "", arm: str = "") -> int:
    """Hours with rollups of ``metric`` in ``[start, end)`` (what the history really holds)."""
    res = wh.query(
        """SELECT uniqExact(hour) FROM cohort_hourly
           WHERE metric = {metric:String} AND segment = 'all' AND ({pop:String} = '' OR pop = {pop:String})
             AND ({arm:String} = '' OR arm = {arm:String})
             AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}""",
        params={"metric": metric, "pop": pop, "arm": arm, "a": sql_time(start), "b": sql_time(end)})
    return int(res.rows[0][0])


def known_values(wh: Warehouse, column: str) -> list[str]:
    """The PoPs (``column='pop'``) or arms (``'arm'``) the rollups hold."""
    if column not in ("pop", "arm"):
        raise ValueError(column)
    return [r[0] for r in wh.query(f"SELECT DISTINCT {column} FROM cohort_hourly ORDER BY {column}").rows]


def power_table(wh: Warehouse, metric: str, statistic: str, mde: float, *, start: datetime, end: datetime,
                pop: str = "", arm: str = "", durations_h=DEFAULT_DURATIONS_H, power: float = 0.8,
                alpha: float = 0.05, alternative: str = "two-sided", hosts_per_arm: int | None = None) -> list[PowerRow]:
    """Hosts per arm needed for each window length the history can show, without and with the
    judge's pre-period adjustment (each host's previous window standing in for its pre-period)."""
    check_statistic(metric, statistic)
    out = []
    for d in durations_h:
        table = host_window_table(wh, metric, statistic, d, start, end, pop, arm)
        groups = [np.array(list(v.values())) for v in table.values()]
        sigma, df = sigma_from_host_stats(groups)
        if not df:
            continue
        hosts = max(len(g) for g in groups)
        rho2, _pairs = variance_reduction_from_windows(table)
        sigma_adj = sigma * math.sqrt(1 - rho2) if math.isfinite(rho2) else math.nan
        out.append(PowerRow(d, len(groups), hosts, sigma, hosts_needed(mde, sigma, power, alpha, alternative),
                            predicted_power(mde, sigma, hosts_per_arm or hosts, hosts_per_arm or hosts, alpha,
                                            alternative),
                            rho2, sigma_adj, hosts_needed(mde, sigma_adj, power, alpha, alternative)
                            if math.isfinite(sigma_adj) else None))
    return out
