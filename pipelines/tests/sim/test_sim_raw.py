"""ccab sim --raw: the nginx lines and ss snapshots carry the same facts as the JSONL records.

The parsers here are small, independent re-implementations written from docs/reference/nginx.md and
docs/reference/ss_tcp_info_bbr.md (not the generator's code), so a format drift on either side fails.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest
from ccab.cli import main
from paths import VECTORS


@pytest.fixture(scope="module")
def raw_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim-raw")
    assert main(["sim", "tiny", "--out", str(out), "--raw", "--no-progress", "--workers", "1"]) == 0
    return out


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- nginx ----------------------------------------------------------------------------------

def parse_nginx_ccab(line: str) -> dict:
    """An http_request/1 (without host metadata) from one `ccab` log_format line."""
    d = json.loads(line)
    addr = ipaddress.ip_address(d["remote_addr"])
    net = ipaddress.ip_network(f"{addr}/{24 if addr.version == 4 else 48}", strict=False)

    def opt(v: str):
        return None if v in ("", "-") else int(v)

    msec = d["msec"]
    return {
        "ts_ms": int(round(msec * 1000)),
        "peer_prefix": str(net),
        "remote_addr": d["remote_addr"],
        "conn_serial": d["connection"],
        "conn_requests": d["connection_requests"],
        "method": d["request_method"],
        "status": d["status"],
        "bytes_sent": d["bytes_sent"],
        "body_bytes_sent": d["body_bytes_sent"],
        "request_time_ms": round(d["request_time"] * 1000, 3),
        "tcpinfo_rtt_us": opt(d["tcpinfo_rtt"]),
        "tcpinfo_rttvar_us": opt(d["tcpinfo_rttvar"]),
        "tcpinfo_snd_cwnd": opt(d["tcpinfo_snd_cwnd"]),
        "tcpinfo_rcv_space": opt(d["tcpinfo_rcv_space"]),
    }


NGINX_KEYS = ["msec", "remote_addr", "connection", "connection_requests", "request_method", "status",
              "bytes_sent", "body_bytes_sent", "request_time", "tcpinfo_rtt", "tcpinfo_rttvar",
              "tcpinfo_snd_cwnd", "tcpinfo_rcv_space"]


def test_nginx_lines_round_trip_to_the_jsonl_records(raw_run):
    records = jsonl(raw_run / "ccab.http.v1.jsonl")
    by_key = {(r["host"], r["conn_serial"], r["conn_requests"]): r for r in records}
    assert len(by_key) == len(records)
    seen = 0
    for log in sorted((raw_run / "nginx").glob("*/access.log")):
        host = log.parent.name
        for line in log.read_text().splitlines():
            assert list(json.loads(line)) == NGINX_KEYS, "the ccab log_format, key for key"
            assert re.search(r'"msec":\d+\.\d{3},', line) and re.search(r'"request_time":\d+\.\d{3},', line)
            got = parse_nginx_ccab(line)
            rec = by_key[(host, got["conn_serial"], got["conn_requests"])]
            assert ipaddress.ip_address(got.pop("remote_addr")) in ipaddress.ip_network(rec["peer_prefix"])
            for k, v in got.items():
                assert rec[k] == v, (k, v, rec[k])
            seen += 1
    assert seen == len(records)


# ---- ss -------------------------------------------------------------------------------------

SS_HEAD = re.compile(r"^(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(.*)$")


def parse_ss_line(line: str) -> dict:
    """Key fields of one `ss -tinHOe state established` line (iproute2 >= 5.2, -n rates)."""
    m = SS_HEAD.match(line)
    assert m, line
    recv_q, send_q, local, peer, rest = m.groups()
    out: dict = {"recv_q_bytes": int(recv_q), "send_q_bytes": int(send_q), "local": local, "peer": peer}
    bbr = re.search(r"bbr:\(([^)]*)\)", rest)
    if bbr:
        kv = dict(p.split(":", 1) for p in bbr.group(1).split(","))
        out["bbr_bw_bps"] = int(kv["bw"].removesuffix("bps"))
        out["bbr_min_rtt_us"] = round(float(kv["mrtt"]) * 1000)
        out["bbr_pacing_gain"] = float(kv["pacing_gain"])
        out["bbr_cwnd_gain"] = float(kv["cwnd_gain"])
        out["bbr_version"] = int(kv.get("version", 1))
        rest = rest[: bbr.start()] + rest[bbr.end():]
    tokens = rest.split()
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("cubic", "bbr", "bbr2", "reno"):
            out["cc"] = t
        elif t in ("send", "pacing_rate", "delivery_rate"):
            out[t] = int(tokens[i + 1].removesuffix("bps"))
            i += 1
        elif t == "app_limited":
            out["app_limited"] = True
        elif ":" in t:
            k, v = t.split(":", 1)
            out[k] = v
        i += 1
    return out


def to_record_fields(p: dict) -> dict:
    """Contract fields from parsed ss tokens (hidden-when-zero -> 0 where ss documents it)."""
    rtt, rttvar = (float(x) for x in p["rtt"].split("/"))
    retrans_out, total_retrans = (int(x) for x in p.get("retrans", "0/0").split("/"))
    return {
        "cc": p["cc"], "send_q_bytes": p["send_q_bytes"], "recv_q_bytes": p["recv_q_bytes"],
        "rtt_us": rtt * 1000, "rttvar_us": rttvar * 1000, "min_rtt_us": float(p["minrtt"]) * 1000,
        "rto_ms": int(p["rto"]), "mss": int(p["mss"]), "cwnd": int(p["cwnd"]),
        "ssthresh": int(p["ssthresh"]) if "ssthresh" in p else None,
        "bytes_sent": int(p["bytes_sent"]), "bytes_retrans": int(p.get("bytes_retrans", 0)),
        "bytes_acked": int(p["bytes_acked"]), "bytes_received": int(p.get("bytes_received", 0)),
        "segs_out": int(p["segs_out"]), "segs_in": int(p["segs_in"]),
        "data_segs_out": int(p["data_segs_out"]), "data_segs_in": int(p.get("data_segs_in", 0)),
        "unacked": int(p.get("unacked", 0)), "retrans_out": retrans_out, "total_retrans": total_retrans,
        "lost": int(p.get("lost", 0)), "sacked": int(p.get("sacked", 0)),
        "reordering": int(p.get("reordering", 3)), "notsent_bytes": int(p.get("notsent", 0)),
        "delivery_rate_bps": p.get("delivery_rate", 0), "pacing_rate_bps": p["pacing_rate"],
        "delivered": int(p.get("delivered", 0)), "app_limited": p.get("app_limited", False),
        "busy_ms": int(p["busy"].removesuffix("ms")) if "busy" in p else 0,
        "rwnd_limited_ms": int(p["rwnd_limited"].split("ms")[0]) if "rwnd_limited" in p else 0,
        "sndbuf_limited_ms": int(p["sndbuf_limited"].split("ms")[0]) if "sndbuf_limited" in p else 0,
        "snd_wnd": int(p.get("snd_wnd", 0)), "rcv_space": int(p["rcv_space"]),
        "lastsnd_ms": int(p.get("lastsnd", 0)), "lastrcv_ms": int(p.get("lastrcv", 0)),
        "lastack_ms": int(p.get("lastack", 0)), "local_port": int(p["local"].rsplit(":", 1)[1]),
        "bbr_bw_bps": p.get("bbr_bw_bps"), "bbr_min_rtt_us": p.get("bbr_min_rtt_us"),
        "bbr_pacing_gain": p.get("bbr_pacing_gain"), "bbr_cwnd_gain": p.get("bbr_cwnd_gain"),
    }


def close(a: float, b: float) -> bool:
    """`%g` keeps 6 significant digits of milliseconds."""
    return abs(a - b) <= max(1.0, 1e-5 * abs(b))


def test_ss_snapshots_carry_the_records_key_fields(raw_run):
    records = jsonl(raw_run / "ccab.tcp.v1.jsonl")
    by_tick: dict[tuple[str, int], list[dict]] = {}
    for r in records:
        by_tick.setdefault((r["host"], r["ts_ms"]), []).append(r)
    files = sorted((raw_run / "ss").glob("*/*.txt"))
    assert len(files) == len(by_tick)
    n = 0
    for f in files:
        recs = by_tick[(f.parent.name, int(f.stem))]
        lines = f.read_text().splitlines()
        assert len(lines) == len(recs)
        for line, rec in zip(lines, recs):
            p = parse_ss_line(line)
            got = to_record_fields(p)
            for k, v in got.items():
                if k in ("rtt_us", "rttvar_us", "min_rtt_us"):
                    assert close(v, rec[k]), (k, v, rec[k], line)
                elif k == "bbr_min_rtt_us" and v is not None:
                    assert close(v, rec[k])
                else:
                    assert v == rec[k], (k, v, rec[k], line)
            peer_ip = p["peer"].rsplit(":", 1)[0].strip("[]")
            assert ipaddress.ip_address(peer_ip) in ipaddress.ip_network(rec["peer_prefix"])
            if rec["cc"] == "bbr2":
                assert p["bbr_version"] == 2 and "phase:" in line
            n += 1
    assert n == len(records)


def test_ss_lines_look_like_iproute2(raw_run):
    vector = VECTORS / "ss_tinHOe_iproute2-6.1.txt"
    text = "".join(f.read_text() for f in sorted((raw_run / "ss").glob("*/*.txt"))[:200])
    order = ["ts", "sack", "wscale:", "rto:", "rtt:", "mss:", "pmtu:", "rcvmss:", "advmss:", "cwnd:",
             "bytes_sent:", "bytes_acked:", "segs_out:", "segs_in:", "data_segs_out:", "send", "pacing_rate",
             "rcv_space:", "rcv_ssthresh:", "minrtt:"]
    for line in text.splitlines():
        tokens = line.split(" <-> ")[1].split()
        pos = [next(i for i, t in enumerate(tokens) if t == o or (o.endswith(":") and t.startswith(o)))
               for o in order]
        assert pos == sorted(pos), line
        assert re.match(r"^\d+ +\d+ +\S+:\d+ \S+:\d+ (timer:\(on,[0-9.]+(ms|sec),0\) )?uid:33 ino:\d+ sk:[0-9a-f]+ ", line)
    if vector.exists():  # the contract vector has the same shape of socket columns and -e details
        for line in vector.read_text().splitlines():
            assert re.match(r"^\d+ +\d+ +\S+:\d+ \S+:\d+ (timer:\([a-z]+,[0-9.]+(ms|sec),\d+\) )?ino:\d+ sk:[0-9a-f]+ ", line)


def test_a_chunk_of_several_slices_loses_no_record_and_keys_each_by_its_host(tmp_path, monkeypatch):
    """Issue #17: the canary demo's JSONL had 40 records fewer than its nginx logs. A chunk's
    records come in slices of SLICE_ROWS lines; pairing them with the hosts by
    ``zip(hosts, lines)`` swallowed one host per slice boundary, so the last records of each chunk
    were dropped (JSONL and Kafka) and later Kafka keys named the wrong host. Small slices make
    every chunk cross several boundaries."""
    from ccab_workshop.sim import records as rec

    monkeypatch.setattr(rec, "SLICE_ROWS", 97)
    out = tmp_path / "sim"
    assert main(["sim", "tiny", "--out", str(out), "--raw", "--no-progress", "--workers", "1"]) == 0
    nginx = sum(len(p.read_text().splitlines()) for p in (out / "nginx").glob("*/access.log"))
    http = jsonl(out / "ccab.http.v1.jsonl")
    assert len(http) == nginx
    from ccab_workshop.sim.generator import iter_chunks, records
    from ccab_workshop.sim.scenario import load_scenario
    from ccab_workshop.sim.world import build_world

    world = build_world(load_scenario("tiny"), chunk_target=50_000, raw=False)
    n = 0
    for chunk in iter_chunks(world, 1):
        for _topic, key, line in records(world, chunk):
            assert json.loads(line)["host"] == key.decode()
            n += 1
    assert n == len(http) + len(jsonl(out / "ccab.tcp.v1.jsonl")) + len(jsonl(out / "ccab.tcp_conn.v1.jsonl"))
