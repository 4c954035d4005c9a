"""An independent reference of the cohort rollups, written from the docs in plain Python (not the
SQL): the hourly job is checked against it. Helpers only; its own tests are in
cohorts/test_cohorts_reference.py."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable


HOUR_MS = 3_600_000
MIB = 1 << 20
ZERO_BIN = -(2**31)


# --------------------------------------------------------------------------- the reference


@dataclass
class Stats:
    n: int = 0
    n_zero: int = 0
    n_missing: int = 0
    n_above_50pct: int = 0
    value_sum: float = 0.0
    value_sum_sq: float = 0.0
    ratio_num: float = 0.0
    ratio_den: float = 0.0
    weight_sum: float = 0.0
    hist: dict = field(default_factory=dict)

    def add(self, metric: str, value, num: float = 0.0, den: float = 0.0, weight: float = 1.0) -> None:
        valid = value is not None and math.isfinite(value) and value >= 0
        if not valid:
            self.n_missing += 1
            return
        self.n += 1
        self.value_sum += value
        self.value_sum_sq += value * value
        self.ratio_num += num
        self.ratio_den += den
        self.weight_sum += weight
        if value == 0:
            self.n_zero += 1
        else:
            b = math.floor(math.log2(value) * 128)
            self.hist[b] = self.hist.get(b, 0) + 1
        if metric.endswith("_pct") and value > 50:
            self.n_above_50pct += 1


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def hour_str(ts_ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts_ms // HOUR_MS * 3600, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def rtt_class(median_us: int) -> str:
    for bound, label in ((20000, "rtt:0-20ms"), (50000, "rtt:20-50ms"), (100000, "rtt:50-100ms"),
                         (200000, "rtt:100-200ms")):
        if median_us < bound:
            return label
    return "rtt:200ms+"


def prefix_classes(tcp: Iterable[dict]) -> dict[tuple[str, str, str], str]:
    """(hour, pop, prefix) -> RTT class from the lower median of the hour's samples' min_rtt_us."""
    values = defaultdict(list)
    for r in tcp:
        values[(hour_str(r["ts_ms"]), r["pop"], r["peer_prefix"])].append(r["min_rtt_us"])
    return {k: rtt_class(sorted(v)[(len(v) - 1) // 2]) for k, v in values.items()}


def connections(tcp: list[dict], bulk_min: int = MIB, closes: list[dict] = ()) -> list[dict]:
    """One dict per connection (the per-connection grain): its close record's values when it has
    one (tcp_conn/1, hour of the close), else its last sample's; in-flight bytes are the mean of
    its busy samples in that hour, None when no sample saw it busy."""
    by_conn = defaultdict(list)
    for r in tcp:
        by_conn[(r["host"], r["sock_id"])].append(r)
    closed = {}
    for r in closes:
        closed.setdefault((r["host"], r["sock_id"]), r)
    classes = prefix_classes(tcp)
    out = []
    keys = set(by_conn) | set(closed)
    for key in keys:
        samples = sorted(by_conn.get(key, []), key=lambda r: r["ts_ms"])
        last = closed.get(key) or samples[-1]
        hour = hour_str(last["ts_ms"])
        in_hour = [r for r in samples if hour_str(r["ts_ms"]) == hour]
        busy = [r["send_q_bytes"] - r["notsent_bytes"] for r in in_hour if r["send_q_bytes"] > r["notsent_bytes"]]
        bbr_min_rtt = last.get("bbr_min_rtt_us") if key not in closed else (
            in_hour[-1]["bbr_min_rtt_us"] if in_hour else None)
        sent, busy_ms = last["bytes_sent"], last["busy_ms"]
        out.append({
            "hour": hour, "pop": last["pop"], "rollout_id": last["rollout_id"], "arm": last["arm"],
            "kernel": last["kernel"], "cc": last["cc"], "cc_version": last["cc_version"] or 0,
            "host": last["host"], "peer_prefix": last["peer_prefix"],
            "rtt_class": classes.get((hour, last["pop"], last["peer_prefix"]), "rtt:unknown"),
            "is_bulk": (last["bytes_acked"] or 0) >= bulk_min, "weight": 1 / last["sample_rate"],
            "bytes_retrans": last["bytes_retrans"], "bytes_sent": sent, "busy_ms": busy_ms,
            "rwnd_limited_ms": last["rwnd_limited_ms"], "sndbuf_limited_ms": last["sndbuf_limited_ms"],
            "retrans_pct": 100 * last["bytes_retrans"] / sent if sent else None,
            "inflight_bytes": sum(busy) / len(busy) if busy else None,
            "rtt_us": last["rtt_us"], "min_rtt_us": last["min_rtt_us"], "bbr_min_rtt_us": bbr_min_rtt,
            "delivery_rate_bps": last["delivery_rate_bps"],
            "rwnd_limited_pct": 100 * last["rwnd_limited_ms"] / busy_ms if busy_ms else None,
            "sndbuf_limited_pct": 100 * last["sndbuf_limited_ms"] / busy_ms if busy_ms else None,
            "rto_count": last.get("total_rto"),
            "source": "close" if key in closed else "poll",
        })
    return out


def _key(d: dict, segment: str, metric: str) -> tuple:
    return (d["hour"], d["pop"], d["rollout_id"], d["arm"], d["kernel"], d["cc"], int(d["cc_version"]), d["host"],
            segment, metric)


UNKNOWN_NETWORK = ("access:unknown", "country:unknown", "asn:unknown")


def expected_rollup(tcp: list[dict], http: list[dict], bulk_min: int = MIB, closes: list[dict] = (),
                    network_of=lambda prefix: UNKNOWN_NETWORK) -> dict[tuple, Stats]:
    """cohort_hourly as the spec defines it, keyed like :func:`actual_rollup`. ``network_of``: a
    peer prefix's (access, country, asn) segments (default: no networks loaded, all unknown)."""
    out: dict[tuple, Stats] = defaultdict(Stats)
    conns = connections(tcp, bulk_min, closes)
    for c in conns:
        segments = ["all", c["rtt_class"]] + (["bulk"] if c["is_bulk"] else []) + list(network_of(c["peer_prefix"]))
        rtt, mn = c["rtt_us"], c["min_rtt_us"]
        queue = rtt - mn if rtt is not None and mn is not None and rtt >= mn else None
        values = [("retrans_pct", c["retrans_pct"], c["bytes_retrans"], c["bytes_sent"]),
                  ("inflight_bytes", c["inflight_bytes"], 0, 0), ("rtt_us", c["rtt_us"], 0, 0),
                  ("min_rtt_us", c["min_rtt_us"], 0, 0), ("bbr_min_rtt_us", c["bbr_min_rtt_us"], 0, 0),
                  ("delivery_rate_bps", c["delivery_rate_bps"], 0, 0),
                  ("rwnd_limited_pct", c["rwnd_limited_pct"], c["rwnd_limited_ms"], c["busy_ms"]),
                  ("sndbuf_limited_pct", c["sndbuf_limited_pct"], c["sndbuf_limited_ms"], c["busy_ms"]),
                  ("rto_count", c["rto_count"], 0, 0),
                  ("queue_delay_us", queue, 0, 0),
                  ("queue_delay_pct", 100 * queue / rtt if queue is not None and rtt else None,
                   queue or 0, rtt or 0)]
        for seg in segments:
            for metric, value, num, den in values:
                out[_key(c, seg, metric)].add(metric, value, num, den, c["weight"])
    classes = prefix_classes(tcp)
    for r in tcp:
        hour = hour_str(r["ts_ms"])
        d = {**r, "hour": hour, "cc_version": r["cc_version"] or 0}
        for seg in ("all", classes[(hour, r["pop"], r["peer_prefix"])]):
            out[_key(d, seg, "inflight_bytes_per_sample")].add(
                "inflight_bytes_per_sample", r["send_q_bytes"] - r["notsent_bytes"], weight=1 / r["sample_rate"])
            out[_key(d, seg, "rtt_us_per_sample")].add("rtt_us_per_sample", r["rtt_us"], weight=1 / r["sample_rate"])
    versions: dict[tuple, int] = {}
    for c in conns:
        k = (c["hour"], c["pop"], c["host"], c["cc"])
        versions[k] = max(versions.get(k, 0), int(c["cc_version"]))
    for r in http:
        if r["body_bytes_sent"] < bulk_min:
            continue
        hour = hour_str(r["ts_ms"])
        d = {**r, "hour": hour, "cc_version": versions.get((hour, r["pop"], r["host"], r["cc"]), 0)}
        rt = r["request_time_ms"]
        value = r["body_bytes_sent"] * 8 / (rt / 1000) if rt > 0 else None
        size = ("size:<4MiB" if r["body_bytes_sent"] < 4 * MIB else
                "size:4-16MiB" if r["body_bytes_sent"] < 16 * MIB else "size:16MiB+")
        for seg in ("all", classes.get((hour, r["pop"], r["peer_prefix"]), "rtt:unknown"), size,
                    *network_of(r["peer_prefix"])):
            out[_key(d, seg, "goodput_bps")].add("goodput_bps", value, r["body_bytes_sent"] * 8, rt / 1000,
                                                 1 / r["sample_rate"])
    return dict(out)


def coarse_bin(v: float) -> int:
    return ZERO_BIN if v == 0 else math.floor(math.log2(v) * 8)


def expected_heatmap(tcp: list[dict], bulk_min: int = MIB, closes: list[dict] = (),
                     network_of=lambda prefix: UNKNOWN_NETWORK) -> dict[tuple, int]:
    """cohort_heatmap_hourly as the spec defines it; segments all, bulk and the prefix's access type
    (``network_of``: as in :func:`expected_rollup`)."""
    out: dict[tuple, int] = defaultdict(int)
    for c in connections(tcp, bulk_min, closes):
        for pair, x, y in (("rtt_us:retrans_pct", c["rtt_us"], c["retrans_pct"]),
                           ("rtt_us:inflight_bytes", c["rtt_us"], c["inflight_bytes"])):
            if x is None or y is None or y < 0:
                continue
            for seg in ["all", network_of(c["peer_prefix"])[0]] + (["bulk"] if c["is_bulk"] else []):
                out[_key(c, seg, pair) + (coarse_bin(x), coarse_bin(y))] += 1
    return dict(out)


# --------------------------------------------------------------------------- reading the job's output

_KEYS = "hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric"


def actual_rollup(wh) -> dict[tuple, Stats]:
    res = wh.query(f"""SELECT {_KEYS}, sum(n), sum(n_zero), sum(n_missing), sum(n_above_50pct), sum(value_sum),
                              sum(value_sum_sq), sum(ratio_num), sum(ratio_den), sum(weight_sum)
                       FROM cohort_hourly GROUP BY {_KEYS}""")
    out = {}
    for r in res.rows:
        key = tuple(r[:10])
        out[key] = Stats(*[int(x) for x in r[10:14]], *[float(x) for x in r[14:19]], {})
    # the histograms: cells (one row per bin), summed by bin; a cell without its row is an error
    cells = wh.query(f"SELECT {_KEYS}, bin, sum(count) FROM cohort_cells_hourly GROUP BY {_KEYS}, bin").rows
    for r in cells:
        key = tuple(r[:10])
        stats = out.setdefault(key, Stats(0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, {}))
        stats.hist[int(r[10])] = int(r[11])
    return out


def actual_heatmap(wh) -> dict[tuple, int]:
    res = wh.query("""SELECT hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin,
                             sum(connections)
                      FROM cohort_heatmap_hourly GROUP BY ALL""")
    return {tuple(r[:12]): int(r[12]) for r in res.rows}


def assert_rollups_match(expected: dict[tuple, Stats], actual: dict[tuple, Stats]) -> None:
    """Same cohort rows; identical counts and histograms; sums equal to float rounding."""
    missing, extra = set(expected) - set(actual), set(actual) - set(expected)
    assert not missing and not extra, (f"{len(missing)} expected rows missing, e.g. {sorted(missing)[:3]}; "
                                       f"{len(extra)} unexpected rows, e.g. {sorted(extra)[:3]}")
    bad = []
    for key, e in expected.items():
        a = actual[key]
        ints = ("n", "n_zero", "n_missing", "n_above_50pct")
        floats = ("value_sum", "value_sum_sq", "ratio_num", "ratio_den", "weight_sum")
        if any(getattr(e, f) != getattr(a, f) for f in ints) or e.hist != a.hist or any(
                not math.isclose(getattr(e, f), getattr(a, f), rel_tol=1e-9, abs_tol=1e-9) for f in floats):
            bad.append((key, e, a))
    assert not bad, f"{len(bad)} of {len(expected)} rows differ; first: {bad[0]}"


# --------------------------------------------------------------------------- the reference's own tests

T0 = 1763640000000  # 2025-11-20 12:00:00 UTC
