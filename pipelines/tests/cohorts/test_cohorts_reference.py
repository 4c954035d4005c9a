"""An independent reference for the cohort rollups, computed in plain Python from the records.

Written from the spec (docs/cohorts/README.md), not from the SQL: connections are grouped with
dicts, a connection's hour is the hour of its globally last sample, bins use ``math.log2``.
Other tests compare the job's ClickHouse rollups with it (``assert_rollups_match``); the tests in
this file check the reference itself against numbers worked out by hand.
"""

from __future__ import annotations

import json
import math

import pytest
from cohort_reference import (MIB, T0, actual_heatmap, actual_rollup, assert_rollups_match, connections,
                              expected_heatmap, expected_rollup)
from factories import http_request, tcp_sample


def toy_records():
    """Three connections on one host, worked out by hand in the tests below.

    A: samples 12:10 and 12:50 -> hour 12, 2 % retransmits, busy at 12:10 only (in flight 3000)
    B: samples 12:55 and 13:05 -> hour 13 (its last sample), no bytes sent: retrans_pct missing
    C: one sample 12:30, bulk (2 MiB acked), 60 % retransmits -> above 50 %
    """
    common = dict(host="edge-tyo1-01", arm="control", cc="cubic", cc_version=None, peer_prefix="10.0.0.0/24",
                  sample_rate=0.5, notsent_bytes=0, rwnd_limited_ms=0, sndbuf_limited_ms=0)
    tcp = [
        tcp_sample(0, ts_ms=T0 + 600_000, sock_id="A", send_q_bytes=3000, bytes_sent=1000, bytes_retrans=10,
                   bytes_acked=900, busy_ms=10, rtt_us=30000, min_rtt_us=10000, **common),
        tcp_sample(1, ts_ms=T0 + 3_000_000, sock_id="A", send_q_bytes=0, bytes_sent=5000, bytes_retrans=100,
                   bytes_acked=5000, busy_ms=50, rtt_us=40000, min_rtt_us=10000, **common),
        tcp_sample(2, ts_ms=T0 + 3_300_000, sock_id="B", send_q_bytes=0, bytes_sent=0, bytes_retrans=0,
                   bytes_acked=0, busy_ms=0, rtt_us=20000, min_rtt_us=30000, **common),
        tcp_sample(3, ts_ms=T0 + 3_900_000, sock_id="B", send_q_bytes=0, bytes_sent=0, bytes_retrans=0,
                   bytes_acked=0, busy_ms=0, rtt_us=20000, min_rtt_us=30000, **common),
        tcp_sample(4, ts_ms=T0 + 1_800_000, sock_id="C", send_q_bytes=0, bytes_sent=10_000_000,
                   bytes_retrans=6_000_000, bytes_acked=2 * MIB, busy_ms=100, rtt_us=100000, min_rtt_us=60000,
                   **common),
    ]
    http = [http_request(0, ts_ms=T0 + 1_000, host="edge-tyo1-01", peer_prefix="10.0.0.0/24", body_bytes_sent=2 * MIB,
                         request_time_ms=1000.0, sample_rate=1.0),
            http_request(1, ts_ms=T0 + 2_000, host="edge-tyo1-01", peer_prefix="10.9.9.0/24", body_bytes_sent=8 * MIB,
                         request_time_ms=0.0, sample_rate=1.0),
            http_request(2, ts_ms=T0 + 3_000, host="edge-tyo1-01", body_bytes_sent=1000, request_time_ms=1.0)]
    return tcp, http


def test_reference_assigns_connections_to_the_hour_of_their_last_sample():
    tcp, _ = toy_records()
    conns = {c["host"] + "/" + str(c["retrans_pct"]): c for c in connections(tcp)}
    hours = sorted((c["hour"], c["retrans_pct"]) for c in connections(tcp))
    assert hours == [("2025-11-20 12:00:00", 2.0), ("2025-11-20 12:00:00", 60.0), ("2025-11-20 13:00:00", None)]
    a = next(c for c in conns.values() if c["retrans_pct"] == 2.0)
    assert a["inflight_bytes"] == 3000 and a["rtt_us"] == 40000 and not a["is_bulk"]


def test_reference_rollup_by_hand():
    tcp, http = toy_records()
    exp = expected_rollup(tcp, http)
    k = ("2025-11-20 12:00:00", "tyo1", "r1", "control", "6.1.0-18-amd64", "cubic", 0, "edge-tyo1-01")
    retrans = exp[k + ("all", "retrans_pct")]
    assert (retrans.n, retrans.n_zero, retrans.n_missing, retrans.n_above_50pct) == (2, 0, 0, 1)
    assert (retrans.ratio_num, retrans.ratio_den) == (6_000_100, 10_005_000)
    assert retrans.hist == {math.floor(math.log2(2.0) * 128): 1, math.floor(math.log2(60.0) * 128): 1}
    assert retrans.weight_sum == 4.0
    assert exp[k + ("bulk", "retrans_pct")].n == 1
    # prefix 10.0.0.0/24 in hour 12: min RTTs 10000, 10000, 30000, 60000 -> lower median 10000
    assert exp[k + ("rtt:0-20ms", "retrans_pct")].n == 2
    b = exp[("2025-11-20 13:00:00",) + k[1:] + ("all", "retrans_pct")]
    assert (b.n, b.n_missing) == (0, 1)
    # in hour 13 B's prefix has one sample with min RTT 30 ms
    assert ("2025-11-20 13:00:00",) + k[1:] + ("rtt:20-50ms", "rtt_us") in exp
    per_sample = exp[k + ("all", "inflight_bytes_per_sample")]
    assert (per_sample.n, per_sample.n_zero) == (4, 3)
    goodput = exp[k + ("all", "goodput_bps")]
    assert (goodput.n, goodput.n_missing, goodput.value_sum) == (1, 1, 2 * MIB * 8)
    assert exp[k + ("rtt:unknown", "goodput_bps")].n_missing == 1
    assert exp[k + ("size:4-16MiB", "goodput_bps")].n_missing == 1


def test_job_matches_the_hand_checked_reference(warehouse, tmp_path):
    from datetime import datetime, timezone

    from ccab.cohorts.job import run_window
    from ccab.ingest.loader import load_files

    tcp, http = toy_records()
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in tcp + http))
    report = load_files(warehouse, [path])
    assert not report.dead, report.dead
    run_window(warehouse, datetime(2025, 11, 20, 12, tzinfo=timezone.utc), datetime(2025, 11, 20, 14, tzinfo=timezone.utc))
    assert_rollups_match(expected_rollup(tcp, http), actual_rollup(warehouse))
    assert expected_heatmap(tcp) == actual_heatmap(warehouse)


@pytest.mark.parametrize("value, expected", [(1.0, 0), (2.0, 128), (0.5, -128), (3.0, 202), (1e-6, -2552)])
def test_bin_edges(value, expected):
    from ccab.base.bins import bin_lower, bin_upper, fine_bins

    assert math.floor(math.log2(value) * 128) == expected == int(fine_bins([value])[0])
    assert bin_lower(expected) <= value < bin_upper(expected)
