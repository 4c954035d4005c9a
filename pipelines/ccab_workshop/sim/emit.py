"""From a chunk's arrays to output: contract JSON lines and raw ss / nginx text.

Pure functions of the arrays (and one rng for the few per-record details such as BBRv2's
``extra_acked``); the per-field formatting lives in :mod:`ccab_workshop.sim.records` and
:mod:`ccab_workshop.sim.raw`.
"""

from __future__ import annotations

import numpy as np
from ccab_workshop.sim import model as mdl
from ccab_workshop.sim import records as rec
from ccab_workshop.sim.raw import UNSET_U32, nginx_line, ss_line
from ccab_workshop.sim.timeline import IW_PKTS, Connections, Requests, Snapshots, splitmix64, unit_from_hash
from ccab_workshop.sim.world import World


def _round8(x: np.ndarray) -> np.ndarray:
    """Rates the kernel keeps in bytes/s, printed in bits/s: multiples of 8."""
    return (np.round(np.asarray(x) / 8.0) * 8).astype(np.int64)


def bbr_gains(phase: np.ndarray, cycle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pacing_gain, cwnd_gain) of BBR v1/v2 by phase (0 startup, 2 probe_bw, 3 probe_rtt) and
    PROBE_BW cycle index (0 up 1.25, 1 down 0.75, else 1)."""
    startup = 739 / 256  # 2.88672 (v1, v2)
    probe = np.where(cycle == 0, 1.25, np.where(cycle == 1, 0.75, 1.0))
    pacing = np.where(phase == 0, startup, np.where(phase == 3, 1.0, probe))
    cwnd = np.where(phase == 0, startup, np.where(phase == 3, 1.0, 2.0))
    return pacing, cwnd


def _peer_addresses(world: World, conns: Connections, idx: np.ndarray) -> list[str]:
    h = conns.sock_hash[idx]
    p = conns.prefix[idx]
    heads = world.prefixes.addr_head[p].tolist()
    v6 = world.prefixes.ipv6[p].tolist()
    a = (1 + (h >> np.uint64(20)) % np.uint64(254)).tolist()
    y = (1 + (h >> np.uint64(24)) % np.uint64(0xFFFE)).tolist()
    z = (1 + (h >> np.uint64(40)) % np.uint64(0xFFFE)).tolist()
    return [f"{hd}{yy:x}::{zz:x}" if six else f"{hd}{aa}" for hd, six, aa, yy, zz in zip(heads, v6, a, y, z)]


def _host_fragments(world: World, *, tcp: bool) -> list[str]:
    sc = world.sc
    out = []
    for hi, name in enumerate(world.hosts.names):
        a = int(world.hosts.arm_idx[hi])
        arm = sc.arms[a]
        out.append(rec.host_fragment(pop=sc.pop, host=name, kernel=arm.kernel, arm=arm.name,
                                     rollout_id=sc.rollout_id, cc=arm.cc, cc_version=world.cc_versions[a],
                                     with_cc_version=tcp))
    return out


def tcp_records(world: World, conns: Connections, out: mdl.Outcomes, s: Snapshots,
                rng: np.random.Generator) -> tuple[list[bytes], np.ndarray, list[tuple[int, int, str]]]:
    """``tcp_sample/1`` lines of the snapshots (sorted by time), their host indices, and the raw
    ``ss`` text per (host, tick) when the world is raw."""
    sc = world.sc
    c = s.conn
    m = len(c)
    arm = conns.arm[c]
    ccv = np.array([v or 0 for v in world.cc_versions])[arm]
    is_bbr = np.array([a.cc in ("bbr", "bbr2") for a in sc.arms])[arm]
    pg, cg = bbr_gains(s.bbr_phase, s.bbr_cycle)
    bbr_bw = _round8(s.bbr_bw_bps)
    pacing = np.where(is_bbr, _round8(pg * bbr_bw * 0.99), _round8(s.pacing_rate_bps))
    delivery = _round8(s.delivery_rate_bps)
    v6 = world.prefixes.ipv6[conns.prefix[c]]
    advmss = np.where(v6, 1428, 1448)
    rcv_space = IW_PKTS * advmss
    ts_ms = sc.start_ms + np.round(s.tick_s * 1000).astype(np.int64)
    frag = _host_fragments(world, tcp=True)
    cols = {
        "ts_ms": ts_ms, "host_fragment": np.array(frag, dtype=object)[conns.host[c]],
        "sock_hash": conns.sock_hash[c], "peer_prefix": world.prefixes.label[conns.prefix[c]],
        "local_port": np.full(m, sc.local_port), "rtt_us": s.rtt_us, "rttvar_us": s.rttvar_us,
        "min_rtt_us": s.min_rtt_us, "rto_ms": s.rto_ms, "mss": s.mss, "cwnd": s.cwnd,
        "ssthresh_text": rec.nullable_ints(s.ssthresh, s.ssthresh < 0), "unacked": s.unacked,
        "sacked": s.sacked, "lost": s.lost, "retrans_out": s.retrans_out, "total_retrans": s.total_retrans,
        "reordering": s.reordering, "bytes_sent": s.bytes_sent, "bytes_acked": s.bytes_acked,
        "bytes_retrans": s.bytes_retrans, "bytes_received": s.bytes_received, "segs_out": s.segs_out,
        "segs_in": s.segs_in, "data_segs_out": s.data_segs_out, "data_segs_in": s.data_segs_in,
        "delivery_rate_bps": delivery, "pacing_rate_bps": pacing, "delivered": s.delivered,
        "app_limited_text": np.where(s.app_limited, "true", "false").astype(object), "busy_ms": s.busy_ms,
        "rwnd_limited_ms": s.rwnd_limited_ms, "sndbuf_limited_ms": s.sndbuf_limited_ms,
        "notsent_bytes": s.notsent_bytes, "send_q_bytes": s.send_q_bytes, "snd_wnd": s.snd_wnd,
        "rcv_space": rcv_space, "lastsnd_ms": s.lastsnd_ms, "lastrcv_ms": s.lastrcv_ms,
        "lastack_ms": s.lastack_ms,
        "bbr_fragment": rec.bbr_fragments(is_bbr, bbr_bw, s.bbr_min_rtt_us, pg, cg),
    }
    order = np.argsort(ts_ms, kind="stable")
    blob = rec.tcp_sample_lines(cols, sc.sampling.tcp_sample_rate, order.tolist())
    hosts_out = conns.host[c][order]
    ss: list[tuple[int, int, str]] = []
    if world.raw and m:
        ss = _ss_text(world, conns, out, s, cols, order, is_bbr, ccv, pacing, delivery, bbr_bw, pg, cg,
                      advmss, rcv_space, rng)
    return blob, hosts_out, ss


def tcp_conn_records(world: World, conns: Connections, s: Snapshots, close_s: np.ndarray
                     ) -> tuple[list[bytes], np.ndarray]:
    """``tcp_conn/1`` lines of the connections' final states ``s`` (from
    :func:`ccab_workshop.sim.timeline.close_states`), sorted by close time, and their host indices."""
    sc = world.sc
    c = s.conn
    m = len(c)
    arm = conns.arm[c]
    is_bbr = np.array([a.cc in ("bbr", "bbr2") for a in sc.arms])[arm]
    pg, cg = bbr_gains(s.bbr_phase, s.bbr_cycle)
    pacing = np.where(is_bbr, _round8(pg * _round8(s.bbr_bw_bps) * 0.99), _round8(s.pacing_rate_bps))
    v6 = world.prefixes.ipv6[conns.prefix[c]]
    ts_ms = sc.start_ms + np.round(s.tick_s * 1000).astype(np.int64)
    frag = _host_fragments(world, tcp=True)
    cols = {
        "ts_ms": ts_ms, "host_fragment": np.array(frag, dtype=object)[conns.host[c]],
        "sock_hash": conns.sock_hash[c], "peer_prefix": world.prefixes.label[conns.prefix[c]],
        "local_port": np.full(m, sc.local_port),
        "duration_ms": np.round((close_s[c] - conns.t0_s[c]) * 1000).astype(np.int64),
        "rtt_us": s.rtt_us, "rttvar_us": s.rttvar_us, "min_rtt_us": s.min_rtt_us, "rto_ms": s.rto_ms,
        "mss": s.mss, "cwnd": s.cwnd, "ssthresh_text": rec.nullable_ints(s.ssthresh, s.ssthresh < 0),
        "unacked": s.unacked, "sacked": s.sacked, "lost": s.lost, "retrans_out": s.retrans_out,
        "total_retrans": s.total_retrans, "reordering": s.reordering, "bytes_sent": s.bytes_sent,
        "bytes_acked": s.bytes_acked, "bytes_retrans": s.bytes_retrans, "bytes_received": s.bytes_received,
        "segs_out": s.segs_out, "segs_in": s.segs_in, "data_segs_out": s.data_segs_out,
        "data_segs_in": s.data_segs_in, "delivery_rate_bps": _round8(s.delivery_rate_bps),
        "pacing_rate_bps": pacing, "delivered": s.delivered,
        "app_limited_text": np.where(s.app_limited, "true", "false").astype(object), "busy_ms": s.busy_ms,
        "rwnd_limited_ms": s.rwnd_limited_ms, "sndbuf_limited_ms": s.sndbuf_limited_ms,
        "notsent_bytes": s.notsent_bytes, "snd_wnd": s.snd_wnd, "rcv_space": IW_PKTS * np.where(v6, 1428, 1448),
    }
    order = np.argsort(ts_ms, kind="stable")
    return rec.tcp_conn_lines(cols, sc.sampling.tcp_sample_rate, order.tolist()), conns.host[c][order]


def _ss_text(world, conns, out, s, cols, order, is_bbr, ccv, pacing, delivery, bbr_bw, pg, cg, advmss,
             rcv_space, rng) -> list[tuple[int, int, str]]:
    """Raw ``ss`` lines grouped per (host, tick)."""
    sc = world.sc
    h = world.hosts
    c = s.conn
    peers = _peer_addresses(world, conns, c)
    ports = conns.peer_port[c].tolist()
    host = conns.host[c]
    v6 = world.prefixes.ipv6[conns.prefix[c]]
    serial_rel = conns.serial[c] - h.serial_base[host]
    ino = h.ino_base[host] + 3 * serial_rel
    cookie = h.cookie_base[host] + serial_rel
    bw_lo = np.where(s.total_retrans > 0, _round8(bbr_bw * rng.uniform(0.7, 1.0, len(c))), UNSET_U32 * 8)
    infl_hi = np.where(s.total_retrans > 0, np.ceil(s.cwnd * rng.uniform(1.0, 1.3, len(c))), UNSET_U32).astype(np.int64)
    extra = rng.integers(0, np.maximum(s.cwnd // 4, 1) + 1)
    v2_phase = np.where(s.bbr_phase == 0, 1, np.where(s.bbr_phase == 3, 3,
                        np.where(s.bbr_cycle == 0, 4, np.where(s.bbr_cycle == 1, 5, np.where(s.bbr_cycle == 7, 7, 6)))))
    v2_mode = np.where(s.bbr_phase == 0, 0, np.where(s.bbr_phase == 3, 3, 2))
    groups: dict[tuple[int, int], list[str]] = {}
    ts = cols["ts_ms"]
    arms = sc.arms
    for k in order.tolist():
        hi = int(host[k])
        arm = arms[h.arm_idx[hi]]
        local = f"[{h.local_v6[hi]}]:{sc.local_port}" if v6[k] else f"{h.local_v4[hi]}:{sc.local_port}"
        peer = f"[{peers[k]}]:{ports[k]}" if v6[k] else f"{peers[k]}:{ports[k]}"
        bbr = bool(is_bbr[k])
        r = {
            "recv_q_bytes": 0, "send_q_bytes": int(s.send_q_bytes[k]), "local": local, "peer": peer,
            "timer_ms": int(s.timer_ms[k]), "ino": int(ino[k]), "cookie": int(cookie[k]), "cc": arm.cc,
            "cc_version": int(ccv[k]), "snd_wscale": int(conns.client_wscale[c[k]]),
            "rcv_wscale": int(h.rcv_wscale[hi]), "rto_ms": int(s.rto_ms[k]), "rtt_us": int(s.rtt_us[k]),
            "rttvar_us": int(s.rttvar_us[k]), "mss": int(s.mss[k]), "advmss": int(advmss[k]),
            "cwnd": int(s.cwnd[k]), "ssthresh": None if s.ssthresh[k] < 0 else int(s.ssthresh[k]),
            "bytes_sent": int(s.bytes_sent[k]), "bytes_retrans": int(s.bytes_retrans[k]),
            "bytes_acked": int(s.bytes_acked[k]), "bytes_received": int(s.bytes_received[k]),
            "segs_out": int(s.segs_out[k]), "segs_in": int(s.segs_in[k]),
            "data_segs_out": int(s.data_segs_out[k]), "data_segs_in": int(s.data_segs_in[k]),
            "bbr_bw_bps": int(bbr_bw[k]) if bbr else None, "bbr_min_rtt_us": int(s.bbr_min_rtt_us[k]),
            "bbr_pacing_gain_text": rec.GAIN_TEXT[float(pg[k])], "bbr_cwnd_gain_text": rec.GAIN_TEXT[float(cg[k])],
            "bbr_bw_hi_bps": int(bbr_bw[k]), "bbr_bw_lo_bps": int(bw_lo[k]), "bbr_inflight_hi": int(infl_hi[k]),
            "bbr_inflight_lo": UNSET_U32, "bbr_extra_acked": int(extra[k]), "bbr_mode": int(v2_mode[k]),
            "bbr_phase": int(v2_phase[k]), "lastsnd_ms": int(s.lastsnd_ms[k]),
            "lastrcv_ms": int(s.lastrcv_ms[k]), "lastack_ms": int(s.lastack_ms[k]),
            "pacing_rate_bps": int(pacing[k]), "delivery_rate_bps": int(delivery[k]),
            "delivered": int(s.delivered[k]), "app_limited": bool(s.app_limited[k]),
            "busy_ms": int(s.busy_ms[k]), "rwnd_limited_ms": int(s.rwnd_limited_ms[k]),
            "sndbuf_limited_ms": int(s.sndbuf_limited_ms[k]), "unacked": int(s.unacked[k]),
            "retrans_out": int(s.retrans_out[k]), "total_retrans": int(s.total_retrans[k]),
            "lost": int(s.lost[k]), "sacked": int(s.sacked[k]), "reordering": int(s.reordering[k]),
            "rcv_space": int(rcv_space[k]), "notsent_bytes": int(s.notsent_bytes[k]),
            "min_rtt_us": int(s.min_rtt_us[k]), "snd_wnd": int(s.snd_wnd[k]),
        }
        groups.setdefault((hi, int(ts[k])), []).append(ss_line(r))
    return [(hh, t, "\n".join(v) + "\n") for (hh, t), v in groups.items()]


def http_records(world: World, conns: Connections, reqs: Requests, out: mdl.Outcomes,
                 rng: np.random.Generator) -> tuple[list[bytes], np.ndarray, list[tuple[int, str]]]:
    """``http_request/1`` lines of the requests logged before the horizon and under the http
    sample rate (sorted by time), their host indices, and raw nginx lines per host when raw."""
    sc = world.sc
    with np.errstate(over="ignore"):
        hsh = splitmix64(conns.sock_hash[reqs.conn] ^ ((reqs.index.astype(np.uint64) + np.uint64(1))
                                                       * np.uint64(0xD6E8FEB86659FD93)))
    keep = (reqs.log_s < world.horizon_s) & (unit_from_hash(hsh) < sc.sampling.http_sample_rate)
    idx = np.flatnonzero(keep)
    c = reqs.conn[idx]
    k = len(idx)
    ts_ms = sc.start_ms + np.floor(reqs.log_s[idx] * 1000).astype(np.int64)
    srtt = out.srtt_s[c]
    rtt_us = np.maximum(np.round(srtt * np.exp(0.1 * rng.standard_normal(k)) * 1e6), 1).astype(np.int64)
    rttvar_us = np.maximum(np.round(out.rttvar_s[c] * 1e6), 1).astype(np.int64)
    busy_before = np.cumsum(reqs.transfer_s) - reqs.transfer_s  # only differences within a conn matter
    first_idx = np.flatnonzero(reqs.first)
    seg = np.cumsum(reqs.first) - 1
    elapsed = (busy_before - busy_before[first_idx][seg] + reqs.request_time_ms / 1e3)[idx]
    growth = np.minimum(elapsed / out.min_rtt_s[c], 40.0)  # slow start doubles per (unqueued) RTT
    cwnd = np.minimum(out.cwnd_pkts[c], np.ceil(IW_PKTS * 2.0 ** growth)).astype(np.int64)
    v6 = world.prefixes.ipv6[conns.prefix[c]]
    rcv_space = IW_PKTS * np.where(v6, 1428, 1448)
    missing = rng.random(k) < sc.traffic.tcpinfo_missing_share
    method = np.where(reqs.method_head[idx], "HEAD", "GET")
    body = reqs.body_bytes[idx]
    frag = _host_fragments(world, tcp=False)
    host = conns.host[c]
    cols = {
        "ts_ms": ts_ms, "host_fragment": np.array(frag, dtype=object)[host],
        "peer_prefix": world.prefixes.label[conns.prefix[c]], "conn_serial": conns.serial[c],
        "conn_requests": reqs.index[idx] + 1, "method": method.astype(object), "status": reqs.status[idx],
        "bytes_sent": body + reqs.header_bytes[idx], "body_bytes_sent": body,
        "request_time_ms": reqs.request_time_ms[idx],
        "tcpinfo_fragment": rec.tcpinfo_fragments(missing, rtt_us, rttvar_us, cwnd, rcv_space),
    }
    order = np.argsort(ts_ms, kind="stable")
    blob = rec.http_request_lines(cols, sc.sampling.http_sample_rate, order.tolist())
    nginx: list[tuple[int, str]] = []
    if world.raw and k:
        addrs = _peer_addresses(world, conns, c)
        per_host: dict[int, list[str]] = {}
        for j in order.tolist():
            ti = None if missing[j] else (int(rtt_us[j]), int(rttvar_us[j]), int(cwnd[j]), int(rcv_space[j]))
            per_host.setdefault(int(host[j]), []).append(nginx_line(
                ts_ms=int(ts_ms[j]), remote_addr=addrs[j], connection=int(conns.serial[c[j]]),
                connection_requests=int(reqs.index[idx[j]] + 1), method=str(method[j]),
                status=int(reqs.status[idx[j]]), bytes_sent=int(body[j] + reqs.header_bytes[idx[j]]),
                body_bytes_sent=int(body[j]), request_time_ms=int(reqs.request_time_ms[idx[j]]), tcpinfo=ti))
        nginx = [(hh, "\n".join(v) + "\n") for hh, v in sorted(per_host.items())]
    return blob, host[order], nginx
