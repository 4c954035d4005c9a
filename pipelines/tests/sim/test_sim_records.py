"""ccab sim records: exactly the contract's fields and types, mutually consistent counters,
deterministic output. Runs the `tiny` scenario (cubic, bbr and bbr2 hosts) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ccab.cli import main

# Written from contracts/CONTRACTS.md, independently of the generator. "int?" = int or null.
TCP_SAMPLE_FIELDS = {
    "schema": "str", "ts_ms": "int", "pop": "str", "host": "str", "kernel": "str", "arm": "str",
    "rollout_id": "str", "cc": "str", "cc_version": "int?", "sock_id": "str", "peer_prefix": "str",
    "local_port": "int", "state": "str", "rtt_us": "int", "rttvar_us": "int", "min_rtt_us": "int",
    "rto_ms": "int?", "mss": "int", "cwnd": "int", "ssthresh": "int?", "unacked": "int", "sacked": "int",
    "lost": "int", "retrans_out": "int", "total_retrans": "int", "reordering": "int?", "bytes_sent": "int",
    "bytes_acked": "int", "bytes_retrans": "int", "bytes_received": "int", "segs_out": "int", "segs_in": "int",
    "data_segs_out": "int", "data_segs_in": "int", "delivery_rate_bps": "int", "pacing_rate_bps": "int",
    "delivered": "int", "app_limited": "bool", "busy_ms": "int", "rwnd_limited_ms": "int",
    "sndbuf_limited_ms": "int", "notsent_bytes": "int", "send_q_bytes": "int", "recv_q_bytes": "int",
    "snd_wnd": "int", "rcv_space": "int", "lastsnd_ms": "int?", "lastrcv_ms": "int?", "lastack_ms": "int?",
    "bbr_bw_bps": "int?", "bbr_min_rtt_us": "int?", "bbr_pacing_gain": "float?", "bbr_cwnd_gain": "float?",
    "sample_rate": "float",
}
HTTP_REQUEST_FIELDS = {
    "schema": "str", "ts_ms": "int", "pop": "str", "host": "str", "kernel": "str", "arm": "str",
    "rollout_id": "str", "cc": "str", "peer_prefix": "str", "conn_serial": "int", "conn_requests": "int",
    "method": "str", "status": "int", "bytes_sent": "int", "body_bytes_sent": "int",
    "request_time_ms": "float", "tcpinfo_rtt_us": "int?", "tcpinfo_rttvar_us": "int?",
    "tcpinfo_snd_cwnd": "int?", "tcpinfo_rcv_space": "int?", "sample_rate": "float",
}
PY_TYPE = {"str": str, "int": int, "float": float, "bool": bool}
MIB = 1 << 20


def run_sim(out: Path, *extra: str) -> Path:
    assert main(["sim", "tiny", "--out", str(out), "--no-progress", *extra]) == 0
    return out


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return run_sim(tmp_path_factory.mktemp("sim-tiny"), "--workers", "1")


@pytest.fixture(scope="module")
def tcp(tiny) -> list[dict]:
    return load(tiny / "ccab.tcp.v1.jsonl")


@pytest.fixture(scope="module")
def http(tiny) -> list[dict]:
    return load(tiny / "ccab.http.v1.jsonl")


def check_types(records: list[dict], table: dict[str, str], schema: str) -> None:
    assert records
    for r in records:
        assert list(r) == list(table), f"fields differ: {set(r) ^ set(table)}"
        assert r["schema"] == schema
        for name, kind in table.items():
            v = r[name]
            if kind.endswith("?") and v is None:
                continue
            t = PY_TYPE[kind.rstrip("?")]
            ok = isinstance(v, t) and not (t is int and isinstance(v, bool))
            assert ok, f"{schema}.{name} = {v!r} is not {kind}"


def test_every_record_has_exactly_the_contract_fields_and_types(tcp, http):
    check_types(tcp, TCP_SAMPLE_FIELDS, "tcp_sample/1")
    check_types(http, HTTP_REQUEST_FIELDS, "http_request/1")


def test_metadata_is_consistent(tcp, http, tiny):
    truth = json.loads((tiny / "truth.json").read_text())
    arm_of_host = {h["host"]: h["arm"] for h in truth["hosts"]}
    cc_of_arm = {a["name"]: (a["cc"], a["cc_version"]) for a in truth["arms"]}
    for r in tcp + http:
        assert r["arm"] == arm_of_host[r["host"]]
        assert r["cc"] == cc_of_arm[r["arm"]][0]
        assert r["pop"] == "tst1" and r["rollout_id"] == "tst1-tiny"
        assert r["peer_prefix"].endswith("/24") or r["peer_prefix"].endswith("::/48")
    for r in tcp:
        assert r["cc_version"] == {"cubic": None, "bbr": 1, "bbr2": 2}[r["cc"]]
        assert r["sample_rate"] == 0.5 and r["state"] == "ESTAB" and r["local_port"] == 443
        assert len(r["sock_id"]) == 16 and int(r["sock_id"], 16) >= 0
        is_bbr = r["cc"] in ("bbr", "bbr2")
        assert (r["bbr_bw_bps"] is not None) == is_bbr
        assert (r["bbr_pacing_gain"] is not None) == is_bbr
    assert {r["sample_rate"] for r in http} == {1.0}
    assert {"GET", "HEAD"} >= {r["method"] for r in http}
    assert any(r["tcpinfo_rtt_us"] is None for r in http) or len(http) < 2000


def cols(records: list[dict], *names: str) -> dict[str, np.ndarray]:
    return {n: np.array([r[n] if r[n] is not None else -1 for r in records], dtype=np.int64) for n in names}


def assert_tcp_counters_consistent(tcp: list[dict]) -> None:
    """Vectorized over every tcp_sample/1 row."""
    c = cols(tcp, "bytes_sent", "bytes_acked", "bytes_retrans", "total_retrans", "retrans_out", "lost",
             "sacked", "unacked", "busy_ms", "rwnd_limited_ms", "sndbuf_limited_ms", "send_q_bytes",
             "notsent_bytes", "cwnd", "mss", "rtt_us", "min_rtt_us", "data_segs_out", "segs_out",
             "data_segs_in", "segs_in", "delivered", "rto_ms", "snd_wnd", "bbr_min_rtt_us", "ssthresh")
    assert (c["bytes_acked"] >= 0).all()
    assert (c["bytes_sent"] >= c["bytes_acked"]).all()
    assert ((c["bytes_retrans"] >= 0) & (c["bytes_retrans"] <= c["bytes_sent"])).all()
    assert (c["total_retrans"] >= c["retrans_out"]).all() and (c["retrans_out"] >= 0).all()
    assert (c["retrans_out"] <= c["lost"]).all()
    assert ((c["bytes_retrans"] > 0) == (c["total_retrans"] > 0)).all()
    assert (c["busy_ms"] >= c["rwnd_limited_ms"] + c["sndbuf_limited_ms"]).all()
    inflight = c["send_q_bytes"] - c["notsent_bytes"]
    assert (inflight >= 0).all(), "send_q >= notsent"
    # in flight (send_q - notsent) fits the window; sacked/lost packets are outside the pipe
    assert (inflight <= (c["cwnd"] + c["sacked"] + c["lost"]) * c["mss"]).all()
    assert (c["unacked"] * c["mss"] >= inflight).all()
    assert (c["unacked"] >= c["sacked"]).all()
    assert (c["min_rtt_us"] <= c["rtt_us"]).all() and (c["min_rtt_us"] > 0).all()
    assert (c["data_segs_out"] * c["mss"] >= c["bytes_sent"]).all()
    assert (c["segs_out"] >= c["data_segs_out"]).all() and (c["segs_in"] >= c["data_segs_in"]).all()
    assert (c["delivered"] * c["mss"] >= c["bytes_acked"]).all()
    assert (c["rto_ms"] >= 200).all()
    assert (c["snd_wnd"] >= c["unacked"] * c["mss"]).all()
    bbr = c["bbr_min_rtt_us"] >= 0
    assert (c["bbr_min_rtt_us"][bbr] >= c["min_rtt_us"][bbr]).all()
    has_retrans = c["total_retrans"] > 0
    assert (c["ssthresh"][~has_retrans] == -1).all(), "ssthresh infinite (null) until the first loss"


def assert_http_consistent(http: list[dict]) -> None:
    c = cols(http, "bytes_sent", "body_bytes_sent", "tcpinfo_snd_cwnd", "tcpinfo_rtt_us", "status")
    rt = np.array([r["request_time_ms"] for r in http])
    assert (c["bytes_sent"] > c["body_bytes_sent"]).all() and (c["body_bytes_sent"] >= 0).all()
    assert (rt >= 0).all() and np.all(rt == np.round(rt)), "nginx logs ms resolution"
    bulk = (c["body_bytes_sent"] >= MIB) & (c["tcpinfo_rtt_us"] > 0)
    assert bulk.any()
    assert (rt[bulk] > 0).all(), "a bulk body cannot leave in 0 ms"
    goodput = c["body_bytes_sent"][bulk] * 8 / (rt[bulk] / 1e3)
    assert goodput.max() < 2.1e9, "faster than any simulated client"
    # goodput vs the window at log time: a connection cannot average more than a few windows per RTT
    window_bps = c["tcpinfo_snd_cwnd"][bulk] * 1448 * 8 / (c["tcpinfo_rtt_us"][bulk] / 1e6)
    assert (goodput <= 2 * window_bps).all()
    assert set(c["status"][c["body_bytes_sent"] >= MIB]) <= {200, 206}


def test_tcp_counters_are_consistent_in_every_record(tcp):
    assert {r["cc"] for r in tcp} == {"cubic", "bbr", "bbr2"}
    assert_tcp_counters_consistent(tcp)


def test_http_records_are_consistent(http):
    assert_http_consistent(http)


def test_counters_grow_over_a_connection_and_the_last_sample_is_the_largest(tcp):
    by_sock: dict[str, list[dict]] = {}
    for r in tcp:
        by_sock.setdefault(r["sock_id"], []).append(r)
    multi = [v for v in by_sock.values() if len(v) > 1]
    assert len(multi) > 50
    for samples in multi:
        samples.sort(key=lambda r: r["ts_ms"])
        assert len({(r["host"], r["peer_prefix"], r["cc"]) for r in samples}) == 1
        for key in ("bytes_acked", "bytes_retrans", "total_retrans", "busy_ms", "bytes_received", "data_segs_in"):
            seq = [r[key] for r in samples]
            assert seq == sorted(seq), (key, seq)
        steps = np.diff([r["ts_ms"] for r in samples])
        assert (steps % 10_000 == 0).all() and (steps > 0).all()


def test_same_seed_same_bytes_different_seed_different(tmp_path, tiny):
    again = run_sim(tmp_path / "again", "--workers", "2")  # also: worker count does not matter
    other = run_sim(tmp_path / "other", "--seed", "8")
    for name in ("ccab.tcp.v1.jsonl", "ccab.tcp_conn.v1.jsonl", "ccab.http.v1.jsonl"):
        assert (again / name).read_bytes() == (tiny / name).read_bytes()
        assert (other / name).read_bytes() != (tiny / name).read_bytes()
    t1, t2 = (json.loads((d / "truth.json").read_text()) for d in (tiny, again))
    t1.pop("run"), t2.pop("run")
    assert t1 == t2


def test_connections_override_and_hours(tmp_path):
    out = run_sim(tmp_path / "n", "--connections", "1500", "--hours", "0.5")
    truth = json.loads((out / "truth.json").read_text())
    assert truth["total_connections"] == 1500
    assert sum(h["connections"] for h in truth["hosts"]) == 1500
    assert truth["scenario"]["duration_h"] == 0.5
    ts = [r["ts_ms"] for r in load(out / "ccab.tcp.v1.jsonl")]
    start = 1763640000000  # tiny starts 2025-11-20T12:00:00Z
    assert min(ts) >= start and max(ts) < start + 1800 * 1000


def test_truth_records_planted_and_realised(tiny):
    truth = json.loads((tiny / "truth.json").read_text())
    assert truth["seed"] == 7 and truth["scenario"]["name"] == "tiny"
    assert {a["name"] for a in truth["arms"]} == {"control", "bbr1", "bbr2"}
    bbr2 = next(a for a in truth["arms"] if a["name"] == "bbr2")
    assert bbr2["cc_model"]["high_loss_tail_share"] > 0
    assert set(bbr2["realised"]["all"]) >= {"retrans_pct_p50", "high_loss_share", "inflight_bytes_p50",
                                             "goodput_mbps_p10", "goodput_mbps_p50", "goodput_mbps_p90"}
    for h in truth["hosts"]:
        assert set(h["effect_multiplier"]) == {"goodput", "rtt", "retrans", "inflight", "rwnd_limited"}
        assert abs(sum(h["client_mix"].values()) - 1) < 1e-6
    assert len(truth["prefixes"]["rows"]) == 300
    assert truth["records"]["tcp_sample/1"] == len((tiny / "ccab.tcp.v1.jsonl").read_text().splitlines())
    assert truth["records"]["tcp_conn/1"] == len((tiny / "ccab.tcp_conn.v1.jsonl").read_text().splitlines())


def test_close_records_are_the_final_state_of_every_sampled_connection(tiny):
    """One tcp_conn/1 per sampled connection that closed: valid, unique, and never behind that
    connection's last tcp sample (counters are final at close)."""
    from ccab.base.contracts import validate

    closes = load(tiny / "ccab.tcp_conn.v1.jsonl")
    assert closes and all(validate(r) == [] for r in closes)
    assert len({r["sock_id"] for r in closes}) == len(closes)
    last = {}
    for r in load(tiny / "ccab.tcp.v1.jsonl"):
        if r["ts_ms"] >= last.get(r["sock_id"], {}).get("ts_ms", -1):
            last[r["sock_id"]] = r
    seen = [c for c in closes if c["sock_id"] in last]
    assert seen and len(seen) < len(closes)  # most short connections close between two polls
    for c in seen:
        s = last[c["sock_id"]]
        assert c["ts_ms"] >= s["ts_ms"] and c["bytes_acked"] >= s["bytes_acked"] and c["busy_ms"] >= s["busy_ms"]
        assert c["arm"] == s["arm"] and c["cc"] == s["cc"] and c["peer_prefix"] == s["peer_prefix"]


def test_plot_is_written(tmp_path):
    png = tmp_path / "pdfs.png"
    run_sim(tmp_path / "p", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
