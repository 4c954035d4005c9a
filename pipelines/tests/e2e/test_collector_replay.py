"""The simulator's raw sources through the real collector (what ``make demo`` runs per host).

``ccab sim tiny --raw`` writes, per host, ``ss/<host>/<tick_ts_ms>.txt`` (``ss -tinHOe state
established`` snapshots of the sampled sockets) and ``nginx/<host>/access.log`` (the ``ccab`` JSON
log_format), next to its own ``tcp_sample/1`` / ``http_request/1`` JSONL. One
``ccab-collector run --once`` per host reads both (``--ss-replay-dir``, the nginx tailer from the
beginning of the file); its records must be the simulator's:

- ``http_request/1``: record for record, every field;
- ``tcp_sample/1``: the same number per host and tick, and per tick the same multiset of the fields
  the ss text carries. ``sock_id`` differs (the simulator's is its own hash), ``cc_version`` is
  only known from the text for bbr2, and values ss prints with ``%g`` (RTTs in ms) are compared
  after the same rounding; ``lastsnd/lastrcv/lastack`` (and ``snd_wnd`` without a 5.4 token) are
  hidden by ss when 0, which the parser reads as null.

``test_replay_to_kafka`` runs the demo's exact command line for one host against a broker
(``fresh_topic``) and reads the topics back.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from ccab.cli import main

# tcp_sample/1 fields the ss text carries (ts_ms and the host metadata are compared separately).
SS_FIELDS = [
    "cc", "peer_prefix", "local_port", "state", "rtt_us", "rttvar_us", "min_rtt_us", "rto_ms", "mss", "cwnd",
    "ssthresh", "unacked", "sacked", "lost", "retrans_out", "total_retrans", "reordering", "bytes_sent",
    "bytes_acked", "bytes_retrans", "bytes_received", "segs_out", "segs_in", "data_segs_out", "data_segs_in",
    "delivery_rate_bps", "pacing_rate_bps", "delivered", "app_limited", "busy_ms", "rwnd_limited_ms",
    "sndbuf_limited_ms", "notsent_bytes", "send_q_bytes", "recv_q_bytes", "snd_wnd", "rcv_space",
    "lastsnd_ms", "lastrcv_ms", "lastack_ms", "bbr_bw_bps", "bbr_min_rtt_us", "bbr_pacing_gain", "bbr_cwnd_gain",
]
MS_G_FIELDS = {"rtt_us", "rttvar_us", "min_rtt_us", "bbr_min_rtt_us"}  # printed as ms with %g
HIDDEN_WHEN_ZERO = {"lastsnd_ms", "lastrcv_ms", "lastack_ms", "snd_wnd"}  # ss hides 0; parsed as null


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    assert main(["sim", "tiny", "--out", str(out), "--raw", "--connections", "400", "--no-progress",
                 "--workers", "1"]) == 0
    return out


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def host_setup(sim: Path, work: Path) -> dict[str, dict]:
    """Per simulated host: what its collector is told (the demo writes the same files)."""
    truth = json.loads((sim / "truth.json").read_text())
    sc = truth["scenario"]
    cc_of = {a["name"]: a["cc"] for a in sc["arms"]}
    hosts = {}
    for h in truth["hosts"]:
        d = work / h["host"]
        (d / "proc/sys/net/ipv4").mkdir(parents=True)
        (d / "proc/sys/net/ipv4/tcp_congestion_control").write_text(cc_of[h["arm"]] + "\n")
        (d / "state.json").write_text(json.dumps({"rollout_id": sc["rollout_id"], "arm": h["arm"],
                                                  "cc": cc_of[h["arm"]], "generation": 1}))
        hosts[h["host"]] = {
            "pop": sc["pop"], "kernel": h["kernel"], "dir": d,
            "tcp_rate": sc["sampling"]["tcp_sample_rate"], "http_rate": sc["sampling"]["http_sample_rate"],
        }
    return hosts


def collector_args(sim: Path, host: str, h: dict) -> list[str]:
    """The per-host command line of the demo (minus --output and the Kafka flags)."""
    d = h["dir"]
    return [
        "run", "--once", "--host", host, "--pop", h["pop"], "--kernel", h["kernel"],
        "--rollout-state-file", str(d / "state.json"), "--path-procfs", str(d / "proc"),
        "--state-dir", str(d / "collector"), "--metrics-addr", "", "--log-level", "warn",
        "--nginx-paths", str(sim / "nginx" / host / "access.log"), "--nginx-format", "json",
        "--nginx-start-at", "beginning", "--sample-rate", str(h["http_rate"]),
        "--ss-replay-dir", str(sim / "ss" / host), "--ss-replay-source-sample-rate", str(h["tcp_rate"]),
        "--tcp-info-salt", "demo-salt",
    ]


def as_ss_prints(field: str, v):
    """What the parser reads back from what ss printed for the simulator's value v."""
    if v is None:
        return None
    if field in MS_G_FIELDS:
        return int((Decimal(f"{v / 1000:g}") * 1000).to_integral_value())
    if field in HIDDEN_WHEN_ZERO and v == 0:
        return None
    return v


def ss_view(r: dict, *, expected: bool) -> tuple:
    if expected:
        return tuple(as_ss_prints(f, r[f]) for f in SS_FIELDS)
    return tuple(None if (f in HIDDEN_WHEN_ZERO and r[f] == 0) else r[f] for f in SS_FIELDS)


def test_replay_matches_simulator(sim: Path, collector_bin: Path, tmp_path: Path):
    hosts = host_setup(sim, tmp_path)
    want_tcp = defaultdict(list)
    for r in jsonl((sim / "ccab.tcp.v1.jsonl").read_text()):
        want_tcp[r["host"]].append(r)
    want_http = defaultdict(list)
    for r in jsonl((sim / "ccab.http.v1.jsonl").read_text()):
        want_http[r["host"]].append(r)
    assert sum(map(len, want_tcp.values())) > 50 and sum(map(len, want_http.values())) > 100

    for host, h in hosts.items():
        run = subprocess.run([str(collector_bin), *collector_args(sim, host, h), "--output", "stdout"],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        got = jsonl(run.stdout)
        got_tcp = [r for r in got if r["schema"] == "tcp_sample/1"]
        got_http = [r for r in got if r["schema"] == "http_request/1"]
        assert len(got_tcp) + len(got_http) == len(got)

        # http_request/1: the same records, field for field.
        canon = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
        assert sorted(got_http, key=canon) == sorted(want_http[host], key=canon), host

        # tcp_sample/1: the same count per tick, and per tick the same ss-visible fields.
        assert len(got_tcp) == len(want_tcp[host]), host
        assert Counter(r["ts_ms"] for r in got_tcp) == Counter(r["ts_ms"] for r in want_tcp[host])
        assert [r["ts_ms"] for r in got_tcp] == sorted(r["ts_ms"] for r in got_tcp), "ticks out of order"
        by_tick_got, by_tick_want = defaultdict(Counter), defaultdict(Counter)
        for r in got_tcp:
            by_tick_got[r["ts_ms"]][ss_view(r, expected=False)] += 1
            assert (r["pop"], r["host"], r["kernel"], r["sample_rate"]) == (h["pop"], host, h["kernel"], h["tcp_rate"])
            assert len(r["sock_id"]) == 16
            if r["cc"] == "bbr2":
                assert r["cc_version"] == 2
        for r in want_tcp[host]:
            by_tick_want[r["ts_ms"]][ss_view(r, expected=True)] += 1
        assert by_tick_got == by_tick_want, host
        # arm / rollout_id come from the state file, as the simulator has them
        assert {(r["arm"], r["rollout_id"]) for r in got_tcp + got_http} == \
            {(r["arm"], r["rollout_id"]) for r in want_tcp[host] + want_http[host]}


def test_replay_to_kafka(sim: Path, collector_bin: Path, tmp_path: Path, kafka_broker: str, fresh_topic):
    """The demo's command for one host, into Kafka: every record arrives, keyed by host."""
    from confluent_kafka import Consumer

    hosts = host_setup(sim, tmp_path)
    host = sorted(hosts)[0]
    topic_tcp, topic_http = fresh_topic("replay.tcp", 1), fresh_topic("replay.http", 1)
    run = subprocess.run([str(collector_bin), *collector_args(sim, host, hosts[host]), "--output", "kafka",
                          "--kafka-brokers", kafka_broker, "--topic-tcp", topic_tcp, "--topic-http", topic_http],
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    want = Counter()
    for name, topic in (("ccab.tcp.v1.jsonl", topic_tcp), ("ccab.http.v1.jsonl", topic_http)):
        want[topic] = sum(1 for r in jsonl((sim / name).read_text()) if r["host"] == host)
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": f"replay-{topic_tcp}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_tcp, topic_http])
    got = Counter()
    keys = set()
    try:
        idle = 0
        while sum(got.values()) < sum(want.values()) and idle < 30:
            msg = consumer.poll(1.0)
            if msg is None:
                idle += 1
                continue
            assert msg.error() is None, msg.error()
            got[msg.topic()] += 1
            keys.add(msg.key())
            assert json.loads(msg.value())["host"] == host
    finally:
        consumer.close()
    assert got == want
    assert keys == {host.encode()}
