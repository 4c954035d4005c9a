"""Lab metrics. SQL over the warehouse (tcp_samples, http_requests) for everything that touches
rows; the pure functions below work on the few per-flow numbers the SQL returns.

- ``flow_series``: per long flow, one row per collector tick: goodput (Δbytes_acked/Δt), cwnd,
  RTT, retransmits (window function in ClickHouse).
- ``flow_window``: per long flow, goodput over a window, retransmits, min RTT.
- ``size_classes``: nginx's view of each size class (count, bytes, request_time quantiles).
- ``jain``, ``collapses``, ``loss_at_fraction``, ``mean_ci``: pure.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

LONG_FLOW_MIN_MS = 2500  # a socket sampled over at least this long is a "long flow"

FLOW_SERIES_SQL = """
WITH long AS (
    SELECT host, sock_id FROM tcp_samples
    WHERE rollout_id = {rollout:String} AND host IN {hosts:Array(String)}
    GROUP BY host, sock_id HAVING max(ts_ms) - min(ts_ms) >= {min_ms:Int64}
),
s AS (
    SELECT host, sock_id, cc, ts_ms, bytes_acked, cwnd, rtt_us, total_retrans, bytes_retrans,
           lagInFrame(bytes_acked, 1, bytes_acked) OVER w AS prev_acked,
           lagInFrame(ts_ms, 1, ts_ms) OVER w AS prev_ts
    FROM tcp_samples
    WHERE rollout_id = {rollout:String} AND (host, sock_id) IN (SELECT host, sock_id FROM long)
    WINDOW w AS (PARTITION BY host, sock_id ORDER BY ts_ms ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT host, sock_id, cc, (ts_ms - {t0_ms:Int64}) / 1000 AS t_s,
       if(ts_ms > prev_ts, (bytes_acked - prev_acked) * 8000 / (ts_ms - prev_ts), NULL) AS goodput_bps,
       cwnd, rtt_us, total_retrans, bytes_retrans
FROM s
ORDER BY host, sock_id, ts_ms
"""

FLOW_WINDOW_SQL = """
SELECT host, sock_id, any(cc) AS cc,
       min(ts_ms) AS first_ms, max(ts_ms) AS last_ms,
       if(max(ts_ms) > min(ts_ms),
          (max(bytes_acked) - min(bytes_acked)) * 8000 / (max(ts_ms) - min(ts_ms)), 0) AS goodput_bps,
       max(bytes_acked) AS acked_bytes, max(bytes_sent) AS sent_bytes, max(bytes_retrans) AS retrans_bytes,
       max(total_retrans) AS retrans_segs, min(min_rtt_us) AS min_rtt_us_min,
       quantileExact(0.5)(rtt_us) AS rtt_p50_us, quantileExact(0.95)(rtt_us) AS rtt_p95_us,
       avg(cwnd) AS cwnd_avg
FROM tcp_samples
WHERE rollout_id = {rollout:String} AND host IN {hosts:Array(String)}
  AND ts_ms BETWEEN {a_ms:Int64} AND {b_ms:Int64}
  AND (host, sock_id) IN (
      SELECT host, sock_id FROM tcp_samples
      WHERE rollout_id = {rollout:String} AND host IN {hosts:Array(String)}
      GROUP BY host, sock_id HAVING max(ts_ms) - min(ts_ms) >= {min_ms:Int64})
GROUP BY host, sock_id
ORDER BY host, first_ms
"""

SIZE_CLASSES_SQL = """
SELECT host, any(cc) AS cc,
       multiIf(has({sizes:Array(UInt64)}, body_bytes_sent), toString(body_bytes_sent),
               body_bytes_sent > {max_size:UInt64}, 'stream', 'partial') AS size_class,
       count() AS requests, sum(body_bytes_sent) AS bytes,
       quantileExact(0.5)(request_time_ms) AS rt_p50_ms, quantileExact(0.99)(request_time_ms) AS rt_p99_ms,
       quantileExact(0.999)(request_time_ms) AS rt_p999_ms,
       avgIf(goodput_bps, body_bytes_sent >= 1048576) AS bulk_goodput_bps  -- NULL (request_time 0) skipped
FROM http_requests
WHERE rollout_id = {rollout:String} AND host IN {hosts:Array(String)}
GROUP BY host, size_class
ORDER BY host, size_class
"""

COUNTS_SQL = """
SELECT (SELECT count() FROM tcp_samples WHERE rollout_id = {rollout:String}) AS tcp_rows,
       (SELECT count() FROM http_requests WHERE rollout_id = {rollout:String}) AS http_rows,
       (SELECT groupUniqArray(cc) FROM tcp_samples WHERE rollout_id = {rollout:String}) AS ccs
"""


TIME_RANGE_SQL = """
SELECT count() AS n, min(ts_ms) AS first_ms, max(ts_ms) AS last_ms
FROM (SELECT ts_ms FROM tcp_samples WHERE rollout_id = {rollout:String}
      UNION ALL SELECT ts_ms FROM http_requests WHERE rollout_id = {rollout:String})
"""


def _arr(xs) -> list:
    """An array query parameter (the warehouse formats and escapes it)."""
    return [int(x) if isinstance(x, int) else str(x) for x in xs]


def counts(wh, rollout: str) -> dict:
    return wh.query(COUNTS_SQL, params={"rollout": rollout}).dicts()[0]


def time_range(wh, rollout: str) -> tuple[int, int] | None:
    """First and last ``ts_ms`` of the rollout's rows (tcp_samples and http_requests), None without rows."""
    r = wh.query(TIME_RANGE_SQL, params={"rollout": rollout}).dicts()[0]
    return (int(r["first_ms"]), int(r["last_ms"])) if int(r["n"]) else None


def flow_series(wh, rollout: str, hosts: list[str], t0_ms: int) -> list[dict]:
    return wh.query(FLOW_SERIES_SQL, params={"rollout": rollout, "hosts": _arr(hosts), "t0_ms": t0_ms,
                                             "min_ms": LONG_FLOW_MIN_MS}).dicts()


def flow_window(wh, rollout: str, hosts: list[str], a_ms: int, b_ms: int) -> list[dict]:
    return wh.query(FLOW_WINDOW_SQL, params={"rollout": rollout, "hosts": _arr(hosts), "a_ms": a_ms, "b_ms": b_ms,
                                             "min_ms": LONG_FLOW_MIN_MS}).dicts()


def size_classes(wh, rollout: str, hosts: list[str], sizes: list[int]) -> list[dict]:
    sizes = sorted(set(sizes)) or [0]
    return wh.query(SIZE_CLASSES_SQL, params={"rollout": rollout, "hosts": _arr(hosts), "sizes": _arr(sizes),
                                              "max_size": max(sizes)}).dicts()


# --- pure metrics ---------------------------------------------------------------------------------------


def jain(xs: Iterable[float]) -> float | None:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = equal shares, 1/n = one flow takes everything."""
    xs = [max(0.0, float(x)) for x in xs]
    if not xs or sum(x * x for x in xs) == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def collapses(series: dict[str, list[tuple[float, float]]], active: dict[str, tuple[float, float]],
              capacity_bps: float, share: float = 0.10, min_s: float = 3.0, warmup_s: float = 2.0) -> list[dict]:
    """Flows whose goodput stayed below ``share`` of their fair share (capacity / flows active at
    that moment) for at least ``min_s`` consecutive seconds, outside ``warmup_s`` after each
    flow's start (Brakmo's "flow collapse"). ``series``: label → [(t_s, goodput_bps)];
    ``active``: label → (start_s, end_s) from the plan."""
    out = []
    for label, pts in series.items():
        start, end = active[label]
        run_from = None
        worst = None
        for t, g in pts:
            if g is None or not (start + warmup_s <= t <= end - 0.5):
                continue
            n = sum(1 for s, e in active.values() if s <= t <= e) or 1
            fair = capacity_bps / n
            if g < share * fair:
                run_from = t if run_from is None else run_from
                if t - run_from >= min_s:
                    worst = (run_from, t)
            else:
                if worst:
                    out.append({"flow": label, "from_s": round(worst[0], 1), "to_s": round(worst[1], 1)})
                    worst = None
                run_from = None
        if worst:
            out.append({"flow": label, "from_s": round(worst[0], 1), "to_s": round(worst[1], 1)})
    return out


def loss_at_fraction(points: list[tuple[float, float]], fraction: float = 0.75) -> dict:
    """Pantheon/PCC random-loss resilience: the loss rate at which goodput falls to ``fraction``
    of the best goodput, linearly interpolated between measured loss rates. ``points``:
    [(loss_pct, goodput)]. Returns {"loss_pct": x or None, "censored": ">max" when never below}."""
    pts = sorted((float(l), float(g)) for l, g in points if g is not None)
    if not pts:
        return {"loss_pct": None, "censored": "no data"}
    best = max(g for _, g in pts)
    target = fraction * best
    prev = None
    for l, g in pts:
        if g < target:
            if prev is None:
                return {"loss_pct": l, "censored": "<=min"}
            l0, g0 = prev
            x = l0 + (g0 - target) * (l - l0) / (g0 - g) if g0 != g else l
            return {"loss_pct": round(x, 3), "censored": None}
        prev = (l, g)
    return {"loss_pct": pts[-1][0], "censored": ">max"}


_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 25: 2.060, 30: 2.042}


def t975(df: int) -> float:
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, df))
    except ImportError:  # pragma: no cover
        return _T975.get(df, 1.96)


def mean_ci(xs: Iterable[float | None]) -> dict:
    """Mean and the half-width of its 95% Student-t interval over repeats (None when n < 2)."""
    v = [float(x) for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not v:
        return {"n": 0, "mean": None, "ci": None}
    if len(v) == 1:
        return {"n": 1, "mean": v[0], "ci": None}
    sd = float(np.std(v, ddof=1))
    return {"n": len(v), "mean": float(np.mean(v)), "ci": t975(len(v) - 1) * sd / math.sqrt(len(v))}


def client_latency(records: list[dict]) -> dict[str, dict]:
    """Client-side latency quantiles per request size (a few hundred values per case)."""
    out: dict[str, dict] = {}
    by_size: dict[int, list[dict]] = {}
    for r in records:
        if r.get("type") == "request":
            by_size.setdefault(int(r["size"]), []).append(r)
    for size, rs in sorted(by_size.items()):
        lat = np.array([r["latency_ms"] for r in rs if r.get("ok")], dtype=float)
        item = {"n": len(rs), "ok": int(len(lat)), "failed": len(rs) - int(len(lat))}
        if len(lat):
            item.update({"p50_ms": float(np.quantile(lat, 0.5)), "p99_ms": float(np.quantile(lat, 0.99)),
                         "p999_ms": float(np.quantile(lat, 0.999)), "mean_ms": float(lat.mean()),
                         "goodput_p50_bps": float(np.median(size * 8 / (lat / 1000)))})
        phases: dict[float, list[float]] = {}
        for r in rs:
            if r.get("ok"):
                phases.setdefault(r["rate_per_s"], []).append(r["latency_ms"])
        item["by_rate"] = {str(k): {"n": len(v), "p99_ms": float(np.quantile(v, 0.99)),
                                    "p50_ms": float(np.quantile(v, 0.5))} for k, v in sorted(phases.items())}
        out[str(size)] = item
    return out
