"""The judge's inputs, read from ClickHouse: host-level sums and histograms of a window (thin I/O).

Everything here is one aggregate query whose result has a row per host (or per host-hour, per
minute): ClickHouse merges the host-hour rollups (``cohort_hourly``'s sums; ``cohort_cells_hourly``'s
histogram cells summed by bin); Python receives small host-level summaries and never a connection row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
from ccab.base.chtime import sql_time
from ccab.base.warehouse import Warehouse
from ccab.cohorts import networks
from ccab.judge.stats import HostArrays

def _host_sums(group: str, where: str) -> str:
    """One row per ``group`` with the window's sums (``cohort_hourly``) and merged histogram (the
    cells of ``cohort_cells_hourly`` summed by bin: ``bins`` ascending, ``counts``)."""
    return f"""
WITH sums AS (
    SELECT {group},
           sum(n) AS n, sum(n_zero) AS n_zero, sum(n_above_50pct) AS n_above, sum(value_sum) AS value_sum,
           sum(ratio_num) AS ratio_num, sum(ratio_den) AS ratio_den
    FROM cohort_hourly WHERE {where}
    GROUP BY {group}
),
hists AS (
    SELECT {group}, arraySort(groupArray((bin, c))) AS cells
    FROM (SELECT {group}, bin, sum(count) AS c FROM cohort_cells_hourly WHERE {where} GROUP BY {group}, bin)
    GROUP BY {group}
)
SELECT {'s.segment, ' if 'segment' in group else ''}s.metric, {'s.arm' if 'arm' in group else "'' AS arm"}, s.host, s.n, s.n_zero, s.n_above, s.value_sum,
       s.ratio_num, s.ratio_den, arrayMap(x -> x.1, h.cells) AS bins, arrayMap(x -> x.2, h.cells) AS counts
FROM sums AS s LEFT JOIN hists AS h USING ({group})
ORDER BY {group}
"""


_HOST_SUMS = _host_sums("metric, arm, host", """pop = {pop:String} AND rollout_id = {rollout:String}
      AND segment = {segment:String} AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
      AND has({metrics:Array(String)}, metric) AND has({arms:Array(String)}, arm)
      AND ({kernel:String} = '' OR kernel = {kernel:String})""")


_SEGMENTS_HOST_SUMS = _host_sums("segment, metric, arm, host", """pop = {pop:String} AND rollout_id = {rollout:String}
      AND has({segments:Array(String)}, segment) AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
      AND has({metrics:Array(String)}, metric) AND has({arms:Array(String)}, arm)""")


@dataclass
class HostRow:
    arm: str
    host: str
    n: float
    n_zero: float
    n_above: float
    value_sum: float
    ratio_num: float
    ratio_den: float
    bins: list[int]
    counts: list[int]


def host_rows(wh: Warehouse, pop: str, rollout_id: str, segment: str, start: datetime, end: datetime,
              metrics: list[str], arms: list[str], kernel: str = "") -> dict[str, list[HostRow]]:
    """metric -> one row per (arm, host) with the window's sums and merged histogram (only the
    hosts' rows on ``kernel`` when given)."""
    res = wh.query(_HOST_SUMS, params={"pop": pop, "rollout": rollout_id, "segment": segment,
                                       "a": sql_time(start), "b": sql_time(end),
                                       "metrics": list(metrics), "arms": list(arms), "kernel": kernel})
    out: dict[str, list[HostRow]] = {}
    for metric, arm, host, n, nz, na, vs, rn, rd, bins, counts in res.rows:
        out.setdefault(metric, []).append(HostRow(arm, host, float(n), float(nz), float(na), float(vs or 0),
                                                  float(rn or 0), float(rd or 0), bins, counts))
    return out


def segments_host_rows(wh: Warehouse, pop: str, rollout_id: str, segments: list[str], start: datetime,
                       end: datetime, metrics: list[str], arms: list[str]) -> dict[str, dict[str, list[HostRow]]]:
    """segment -> :func:`host_rows` of that segment, for many segments in one query (a segment
    without rows maps to ``{}``)."""
    out: dict[str, dict[str, list[HostRow]]] = {s: {} for s in segments}
    if not segments:
        return out
    res = wh.query(_SEGMENTS_HOST_SUMS, params={"pop": pop, "rollout": rollout_id, "segments": list(segments),
                                                "a": sql_time(start), "b": sql_time(end),
                                                "metrics": list(metrics), "arms": list(arms)})
    for segment, metric, arm, host, n, nz, na, vs, rn, rd, bins, counts in res.rows:
        out[segment].setdefault(metric, []).append(HostRow(arm, host, float(n), float(nz), float(na), float(vs or 0),
                                                           float(rn or 0), float(rd or 0), bins, counts))
    return out


_PRE_HOST_SUMS = _host_sums("metric, host", """pop = {pop:String} AND segment = 'all'
      AND has({hosts:Array(String)}, host) AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
      AND has({metrics:Array(String)}, metric)""")


def pre_period_rows(wh: Warehouse, pop: str, hosts: list[str], start: datetime, end: datetime,
                    metrics: list[str]) -> dict[str, list[HostRow]]:
    """metric -> one row per host (arm ``''``) with the hosts' sums over ``[start, end)`` whatever
    rollout or arm their rows carry: before a rollout the records carry none, so the pre-period is
    recognised by host."""
    res = wh.query(_PRE_HOST_SUMS, params={"pop": pop, "hosts": list(hosts), "a": sql_time(start),
                                           "b": sql_time(end), "metrics": list(metrics)})
    out: dict[str, list[HostRow]] = {}
    for metric, arm, host, n, nz, na, vs, rn, rd, bins, counts in res.rows:
        out.setdefault(metric, []).append(HostRow(arm, host, float(n), float(nz), float(na), float(vs or 0),
                                                  float(rn or 0), float(rd or 0), bins, counts))
    return out


#: client-speed bands (Mbit/s of a prefix's pre-period median goodput), Dropbox-like
SPEED_BANDS_MBPS: tuple[tuple[str, float, float], ...] = (
    ("speed:<1Mbps", 0.0, 1.0), ("speed:1-10Mbps", 1.0, 10.0), ("speed:10-50Mbps", 10.0, 50.0),
    ("speed:>50Mbps", 50.0, float("inf")))
#: requests whose goodput says something about the client's path (smaller ones are RTT-bound)
SPEED_MIN_BODY_BYTES = 100_000


def prefix_speed_bands(wh: Warehouse, pop: str, start: datetime, end: datetime,
                       min_requests: int = 3) -> dict[str, str]:
    """client prefix -> speed band from its median nginx goodput in ``[start, end)`` — the
    pre-period: pre-treatment by construction (never the experiment window's outcomes)."""
    res = wh.query("""SELECT peer_prefix, quantileExact(0.5)(goodput_bps), count() FROM http_requests
                      WHERE pop = {pop:String} AND ts_ms >= {a:Int64} AND ts_ms < {b:Int64}
                        AND body_bytes_sent >= {min_body:UInt64} AND goodput_bps > 0 AND peer_prefix IS NOT NULL
                      GROUP BY peer_prefix HAVING count() >= {k:UInt32}""",
                   params={"pop": pop, "a": int(start.timestamp() * 1000), "b": int(end.timestamp() * 1000),
                           "min_body": SPEED_MIN_BODY_BYTES, "k": min_requests})
    out = {}
    for prefix, median_bps, _n in res.rows:
        mbps = float(median_bps) / 1e6
        for name, lo, hi in SPEED_BANDS_MBPS:
            if lo <= mbps < hi:
                out[prefix] = name
    return out


def host_goodput_by_band(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime,
                         bands: dict[str, str]) -> list[tuple[str, str, str, int, float]]:
    """(band, arm, host, requests, mean log goodput) in the window, prefixes banded by ``bands``."""
    if not bands:
        return []
    prefixes = sorted(bands)
    res = wh.query("""SELECT transform(assumeNotNull(peer_prefix), {p:Array(String)}, {b:Array(String)}, '') AS band,
                             arm, host, count(), avg(log(goodput_bps))
                      FROM http_requests
                      WHERE pop = {pop:String} AND rollout_id = {r:String}
                        AND ts_ms >= {a:Int64} AND ts_ms < {e:Int64}
                        AND body_bytes_sent >= {min_body:UInt64} AND goodput_bps > 0 AND peer_prefix IS NOT NULL
                      GROUP BY band, arm, host HAVING band != '' ORDER BY band, arm, host""",
                   params={"p": prefixes, "b": [bands[x] for x in prefixes], "pop": pop, "r": rollout_id,
                           "a": int(start.timestamp() * 1000), "e": int(end.timestamp() * 1000),
                           "min_body": SPEED_MIN_BODY_BYTES})
    return [(band, arm, host, int(n), float(m)) for band, arm, host, n, m in res.rows]


def first_assignment_ms(wh: Warehouse, pop: str, rollout_id: str) -> int | None:
    """When the controller first assigned a host of ``pop`` in this rollout (None without one)."""
    res = wh.query("""SELECT count(), min(issued_at_ms) FROM assignments
                      WHERE pop = {pop:String} AND rollout_id = {r:String}""", params={"pop": pop, "r": rollout_id})
    cnt, lo = res.rows[0]
    return int(lo) if cnt else None


def segments_present(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime,
                     families: tuple[str, ...]) -> list[str]:
    """Segments of the window's rollups whose name starts with one of ``families`` (sorted)."""
    res = wh.query("""SELECT DISTINCT segment FROM cohort_hourly
                      WHERE pop = {pop:String} AND rollout_id = {rollout:String}
                        AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
                        AND arrayExists(f -> startsWith(segment, f), {fams:Array(String)})
                      ORDER BY segment""",
                   params={"pop": pop, "rollout": rollout_id, "a": sql_time(start), "b": sql_time(end),
                           "fams": list(families)})
    return [r[0] for r in res.rows]


def host_arrays(rows: list[HostRow], treatment_arm: str, control_arm: str) -> HostArrays:
    """Stack the two arms' host rows into :class:`HostArrays` (hosts with no value dropped)."""
    rows = [r for r in rows if r.arm in (treatment_arm, control_arm) and r.n > 0]
    all_bins = np.unique(np.concatenate([np.asarray(r.bins, dtype=np.int64) for r in rows])) if rows else \
        np.zeros(0, dtype=np.int64)
    hist = np.zeros((len(rows), all_bins.size))
    for i, r in enumerate(rows):
        if r.bins:
            hist[i, np.searchsorted(all_bins, np.asarray(r.bins, dtype=np.int64))] = r.counts

    def col(name):
        return np.array([getattr(r, name) for r in rows], dtype=np.float64)

    return HostArrays(treated=np.array([r.arm == treatment_arm for r in rows], dtype=bool), n=col("n"),
                      n_zero=col("n_zero"), n_above=col("n_above"), value_sum=col("value_sum"),
                      ratio_num=col("ratio_num"), ratio_den=col("ratio_den"), bins=all_bins, hist=hist,
                      hosts=tuple(r.host for r in rows))


def arms_in(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime) -> list[str]:
    res = wh.query("""SELECT DISTINCT arm FROM cohort_hourly
                      WHERE pop = {pop:String} AND rollout_id = {r:String}
                        AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')} ORDER BY arm""",
                   params={"pop": pop, "r": rollout_id, "a": sql_time(start), "b": sql_time(end)})
    return [a for (a,) in res.rows]


def hosts_per_kernel(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime) -> dict[str, dict[str, int]]:
    """kernel -> arm -> hosts with connections on that kernel in the window."""
    res = wh.query("""SELECT kernel, arm, uniqExact(host) FROM cohort_hourly
                      WHERE pop = {pop:String} AND rollout_id = {r:String} AND metric = 'rtt_us'
                        AND segment = 'all' AND n > 0
                        AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
                      GROUP BY kernel, arm""",
                   params={"pop": pop, "r": rollout_id, "a": sql_time(start), "b": sql_time(end)})
    out: dict[str, dict[str, int]] = {}
    for kernel, arm, hosts in res.rows:
        out.setdefault(kernel, {})[arm] = int(hosts)
    return out


# ---- data-quality inputs --------------------------------------------------------------------------

def host_hours(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime):
    """(arm, host, hours with connections) from the rollups."""
    res = wh.query("""SELECT arm, host, groupUniqArray(toString(hour)) FROM cohort_hourly
                      WHERE pop = {pop:String} AND rollout_id = {r:String} AND metric = 'rtt_us'
                        AND segment = 'all' AND n > 0
                        AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
                      GROUP BY arm, host ORDER BY arm, host""",
                   params={"pop": pop, "r": rollout_id, "a": sql_time(start), "b": sql_time(end)})
    return [(arm, host, sorted(hours)) for arm, host, hours in res.rows]


def host_cc_counts(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime,
                   segment: str = "all"):
    """(arm, host, cc, connections) from the rollups, of one segment (default: all)."""
    res = wh.query("""SELECT arm, host, cc, sum(n) FROM cohort_hourly
                      WHERE pop = {pop:String} AND rollout_id = {r:String} AND metric = 'rtt_us'
                        AND segment = {s:String} AND hour >= {a:DateTime('UTC')} AND hour < {b:DateTime('UTC')}
                      GROUP BY arm, host, cc ORDER BY arm, host, cc""",
                   params={"pop": pop, "r": rollout_id, "s": segment, "a": sql_time(start), "b": sql_time(end)})
    return [(arm, host, cc, int(n)) for arm, host, cc, n in res.rows]


def subtract_counts(counts, minus):
    """``counts`` less ``minus`` per (arm, host, cc), at least 0 (a union of overlapping segments
    may subtract a connection twice: the rest is then a lower bound)."""
    less: dict[tuple[str, str, str], int] = {}
    for arm, host, cc, n in minus:
        less[(arm, host, cc)] = less.get((arm, host, cc), 0) + n
    out = [(arm, host, cc, max(0, n - less.get((arm, host, cc), 0))) for arm, host, cc, n in counts]
    return [c for c in out if c[3] > 0]


def segment_conn_counts(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime,
                        segment: tuple[str, ...], segment_cc: dict[str, str]):
    """(arm, host, connections that ran their arm's segment algorithm with a policy_generation, all
    connections) of the segment's clients (the networks dictionary on peer_prefix), from tcp_conns."""
    keys = {"access:": f"concat('access:', {networks.access_sql()})",
            "country:": f"concat('country:', {networks.country_sql()})",
            "asn:": f"concat('asn:', toString({networks.asn_sql()}))"}
    conds = [f"{keys[s[:s.index(':') + 1]]} = {{s{i}:String}}" for i, s in enumerate(segment)]
    params = {"pop": pop, "r": rollout_id, "a": sql_time(start), "b": sql_time(end),
              "arms": list(segment_cc), "ccs": [segment_cc[a] for a in segment_cc],
              **{f"s{i}": s for i, s in enumerate(segment)}}
    res = wh.query(f"""SELECT arm, host,
                              countIf(policy_generation IS NOT NULL
                                      AND cc = {{ccs:Array(String)}}[indexOf({{arms:Array(String)}}, arm)]),
                              count()
                       FROM tcp_conns
                       WHERE pop = {{pop:String}} AND rollout_id = {{r:String}}
                         AND ts >= {{a:DateTime('UTC')}} AND ts < {{b:DateTime('UTC')}}
                         AND ({' OR '.join(conds)})
                       GROUP BY arm, host ORDER BY arm, host""", params=params)
    return [(arm, host, int(a), int(n)) for arm, host, a, n in res.rows]


def assigned_hosts(wh: Warehouse, pop: str, rollout_id: str) -> dict[str, tuple[str, str]]:
    """host -> (arm, cc) of its newest assignment in this rollout (empty without a controller)."""
    res = wh.query("""SELECT host, argMax(arm, generation), argMax(cc, generation) FROM assignments
                      WHERE pop = {pop:String} AND rollout_id = {r:String} GROUP BY host""",
                   params={"pop": pop, "r": rollout_id})
    return {h: (a, c) for h, a, c in res.rows}


def http_requests_per_host(wh: Warehouse, pop: str, rollout_id: str | None, start: datetime, end: datetime):
    """host -> estimated nginx requests (Σ 1/sample_rate) in the window; ``rollout_id=None``: any."""
    res = wh.query("""SELECT host, sum(1 / sample_rate) FROM http_requests
                      WHERE pop = {pop:String} AND ({any:UInt8} OR rollout_id = {r:String})
                        AND ts_ms >= {a:Int64} AND ts_ms < {b:Int64}
                      GROUP BY host""",
                   params={"pop": pop, "r": rollout_id or "", "any": int(rollout_id is None),
                           "a": int(start.timestamp() * 1000), "b": int(end.timestamp() * 1000)})
    return {h: float(c) for h, c in res.rows}


def retrans_by_minute(wh: Warehouse, pop: str, rollout_id: str, start: datetime, end: datetime):
    """(minute, arm, Σbytes_retrans, Σbytes_sent, samples) per minute of the window, for the circuit
    breaker: the retransmitted share of the bytes of the connections sampled that minute. Summed
    in Float64, as the rollups do: a UInt64 sum wraps (one contract-valid sample near 2^64 made
    a minute of 8.4 % retransmits read 0 %). The counters are the samples' cumulative values,
    never differences between samples, so a counter that goes backwards (a reset) is just a
    smaller value, never a huge delta."""
    res = wh.query("""SELECT toStartOfMinute(ts) AS minute, arm, sum(toFloat64(bytes_retrans)), sum(toFloat64(bytes_sent)),
                             count()
                      FROM tcp_samples
                      WHERE pop = {pop:String} AND rollout_id = {r:String}
                        AND ts_ms >= {a:Int64} AND ts_ms < {b:Int64}
                      GROUP BY minute, arm ORDER BY minute, arm""",
                   params={"pop": pop, "r": rollout_id,
                           "a": int(start.timestamp() * 1000), "b": int(end.timestamp() * 1000)})
    return [(str(m), arm, float(x), float(y), int(c)) for m, arm, x, y, c in res.rows]
