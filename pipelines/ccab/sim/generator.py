"""Orchestration: scenario -> world -> chunks of connections -> records and summaries.

A run is split into time windows (chunks) of about ``chunk_target`` connections. Chunk ``i``
draws from its own random stream (``SeedSequence([seed, 3, i])``), so the output is the same
byte for byte whatever the number of worker processes; chunks are emitted in order. Memory is
bounded by one chunk per worker. The generator never writes anything: it yields
:class:`ChunkResult` objects, and :func:`records` turns them into ``(topic, key, line)``.
"""

from __future__ import annotations

import math
import multiprocessing as mp
from collections import deque
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ccab.sim import model as mdl
from ccab.sim import records as rec
from ccab.sim.population import HostTable, Prefixes, draw_hosts, draw_prefixes
from ccab.sim.raw import UNSET_U32, nginx_line, ss_line
from ccab.sim.scenario import CCModel, Scenario, Segment
from ccab.sim.stats import HIGH_LOSS_PCT, Summary
from ccab.sim.timeline import (
    IW_PKTS, MIB, Connections, Requests, connection_totals, draw_connections, draw_requests,
    splitmix64, tick_snapshots, unit_from_hash,
)

TCP_TOPIC = "ccab.tcp.v1"
HTTP_TOPIC = "ccab.http.v1"
#: Linux default tcp_wmem[2]: the largest send buffer autotuning reaches
SNDBUF_MAX_BYTES = 4 * MIB
_STREAM_POPULATION, _STREAM_HOSTS, _STREAM_CHUNK = 1, 2, 3


# --------------------------------------------------------------------------------------------
# the plan: how many connections per (window, host)


def diurnal_weight(sc: Scenario, t_s: np.ndarray) -> np.ndarray:
    """Arrival intensity at scenario time ``t_s`` relative to the day average (mean 1)."""
    d = sc.traffic.diurnal
    hour_utc = ((sc.start.timestamp() + t_s) / 3600.0) % 24.0
    local = (hour_utc + d.utc_offset_h) % 24.0
    if d.hourly_weights is not None:
        w = np.asarray(d.hourly_weights, dtype=float)
        return w[np.floor(local).astype(int) % 24] / w.mean()
    a = (1.0 - d.trough_ratio) / (1.0 + d.trough_ratio)
    return 1.0 + a * np.cos(2.0 * np.pi * (local - d.peak_local_hour) / 24.0)


@dataclass(frozen=True)
class Plan:
    window_s: float
    counts: np.ndarray  # (windows, hosts) connections arriving
    serial_offset: np.ndarray  # (windows, hosts) connections on the host before the window

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def make_plan(sc: Scenario, hosts: HostTable, total_connections: int | None = None,
              chunk_target: int = 50_000) -> Plan:
    """Expected arrivals per window and host, rounded to integers by largest remainder
    (deterministic; the total is exact when ``total_connections`` is given)."""
    dur = sc.duration_h * 3600.0
    day_avg = sc.traffic.connections_per_host_per_hour * sc.duration_h * hosts.traffic.sum()
    expected_total = float(total_connections) if total_connections is not None else day_avg
    n_win = max(1, math.ceil(sc.duration_h * 4), math.ceil(expected_total / chunk_target))
    for _ in range(3):  # windows at the diurnal peak must not exceed the chunk target either
        width = dur / n_win
        sub = (np.arange(n_win)[:, None] + (np.arange(16)[None, :] + 0.5) / 16.0) * width
        per_window = diurnal_weight(sc, sub).mean(axis=1) * width / 3600.0  # hours-equivalent
        exp = per_window[:, None] * hosts.traffic[None, :] * sc.traffic.connections_per_host_per_hour
        if total_connections is not None:
            exp = exp * (total_connections / exp.sum())
        biggest = exp.sum(axis=1).max()
        if biggest <= 1.05 * chunk_target:
            break
        n_win = math.ceil(n_win * biggest / chunk_target)
    target = int(round(exp.sum()))
    counts = np.floor(exp).astype(np.int64)
    short = target - int(counts.sum())
    if short > 0:
        frac = (exp - counts).ravel()
        top = np.argsort(-frac, kind="stable")[:short]
        counts.ravel()[top] += 1
    serial = np.cumsum(counts, axis=0) - counts
    return Plan(width, counts, serial)


# --------------------------------------------------------------------------------------------
# the world: everything fixed for a run


@dataclass(frozen=True)
class World:
    sc: Scenario
    prefixes: Prefixes
    hosts: HostTable
    models: tuple[CCModel, ...]
    cc_versions: tuple[int | None, ...]
    plan: Plan
    segments: tuple[Segment, ...]  # index 0 = all clients
    segment_of_prefix: np.ndarray  # (segments, prefixes) bool
    raw: bool

    @property
    def horizon_s(self) -> float:
        return self.sc.duration_h * 3600.0


def segment_mask(sc: Scenario, prefixes: Prefixes, seg: Segment) -> np.ndarray:
    """Prefixes inside ``seg`` (prefix-level attributes; ranges are [low, high))."""
    m = np.ones(len(prefixes.label), dtype=bool)
    if seg.classes:
        names = [c.name for c in sc.clients.classes]
        m &= np.isin(prefixes.class_idx, [names.index(c) for c in seg.classes])
    for key, values in (("buffer_bdp", prefixes.buffer_bdp), ("bandwidth_mbps", prefixes.bandwidth_mbps),
                        ("rtt_ms", prefixes.rtt_ms)):
        rng = getattr(seg, key)
        if rng is not None:
            m &= (values >= rng[0]) & (values < rng[1])
    return m


def build_world(sc: Scenario, *, total_connections: int | None = None, chunk_target: int = 50_000,
                raw: bool = False) -> World:
    """Draw prefixes and hosts and plan the chunks (deterministic for ``sc.seed``)."""
    prefixes = draw_prefixes(sc, np.random.default_rng(np.random.SeedSequence([sc.seed, _STREAM_POPULATION])))
    hosts = draw_hosts(sc, np.random.default_rng(np.random.SeedSequence([sc.seed, _STREAM_HOSTS])))
    plan = make_plan(sc, hosts, total_connections, chunk_target)
    segs: list[Segment] = [Segment()]
    for e in sc.expect:
        if e.where not in segs:
            segs.append(e.where)
    for a in sc.arms:
        for eff in a.effects:
            if eff.where not in segs:
                segs.append(eff.where)
    masks = np.array([segment_mask(sc, prefixes, s) for s in segs])
    return World(sc, prefixes, hosts, tuple(sc.arm_model(a) for a in sc.arms),
                 tuple(sc.arm_cc_version(a) for a in sc.arms), plan, tuple(segs), masks, raw)


# --------------------------------------------------------------------------------------------
# one chunk


@dataclass
class ChunkResult:
    index: int
    n_connections: int
    tcp_lines: list[bytes]  # slices of newline-separated lines (no trailing newline)
    tcp_host: np.ndarray  # host index per tcp line
    http_lines: list[bytes]
    http_host: np.ndarray
    ss: list[tuple[int, int, str]]  # (host, tick ts_ms, lines) when raw
    nginx: list[tuple[int, str]]  # (host, lines) when raw
    summary: Summary


def multipliers(world: World, conns: Connections) -> mdl.Multipliers:
    """Host random effects times the planted effects of each connection's arm."""
    h = world.hosts
    vals = {m: np.exp(h.effect_log[m][conns.host]) for m in ("goodput", "rtt", "retrans", "inflight", "rwnd_limited")}
    for a, arm in enumerate(world.sc.arms):
        for eff in arm.effects:
            seg = world.segments.index(eff.where)
            m = (conns.arm == a) & world.segment_of_prefix[seg][conns.prefix]
            hours = conns.t0_s / 3600.0
            m &= hours >= eff.from_hour
            if eff.until_hour is not None:
                m &= hours < eff.until_hour
            vals[eff.metric] = np.where(m, vals[eff.metric] * eff.factor, vals[eff.metric])
    return mdl.Multipliers(**vals)


def _round8(x: np.ndarray) -> np.ndarray:
    """Rates the kernel keeps in bytes/s, printed in bits/s: multiples of 8."""
    return (np.round(np.asarray(x) / 8.0) * 8).astype(np.int64)


def _bbr_gains(cc_version: np.ndarray, phase: np.ndarray, cycle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    startup = 739 / 256  # 2.88672 (v1, v2)
    probe = np.where(cycle == 0, 1.25, np.where(cycle == 1, 0.75, 1.0))
    pacing = np.where(phase == 0, startup, np.where(phase == 3, 1.0, probe))
    cwnd = np.where(phase == 0, startup, np.where(phase == 3, 1.0, 2.0))
    return pacing, cwnd


def run_chunk(world: World, i: int) -> ChunkResult:
    """Generate chunk ``i``: connections, model outcomes, requests, snapshots, lines, summary."""
    sc = world.sc
    # one stream per stage: a planted effect changes values, never which random numbers a stage
    # draws for the *other* connections (the control arm stays identical with and without it)
    streams = np.random.SeedSequence([sc.seed, _STREAM_CHUNK, i]).spawn(6)
    r_conn, r_model, r_req, r_tot, r_tick, r_rec = (np.random.default_rng(s) for s in streams)
    w = world.plan.window_s
    conns = draw_connections(sc, world.prefixes, world.hosts, world.plan.counts[i],
                             world.plan.serial_offset[i], (i * w, (i + 1) * w), r_conn)
    n = len(conns.t0_s)
    knobs = mdl.Knobs.gather(list(world.models), conns.arm)
    out = mdl.connection_outcomes(conns.paths, knobs, multipliers(world, conns), SNDBUF_MAX_BYTES, r_model)
    reqs, close = draw_requests(sc, conns, out, r_req)
    totals = connection_totals(conns, reqs, out, r_tot)
    selected = unit_from_hash(conns.sock_hash) < sc.sampling.tcp_sample_rate
    snaps = tick_snapshots(conns, reqs, out, totals, close, selected, sc.sampling.interval_s,
                           world.horizon_s, r_tick)
    summary = _summarise(world, conns, reqs, out, totals)
    tcp_lines, tcp_host, ss = _tcp_records(world, conns, out, snaps, r_rec)
    http_lines, http_host, nginx = _http_records(world, conns, reqs, out, r_rec)
    summary.records["tcp_sample/1"] += len(tcp_host)
    summary.records["http_request/1"] += len(http_host)
    return ChunkResult(i, n, tcp_lines, tcp_host, http_lines, http_host, ss, nginx, summary)


def _peer_addresses(world: World, conns: Connections, idx: np.ndarray) -> list[str]:
    h = conns.sock_hash[idx]
    p = conns.prefix[idx]
    heads = world.prefixes.addr_head[p].tolist()
    v6 = world.prefixes.ipv6[p].tolist()
    a = (1 + (h >> np.uint64(20)) % np.uint64(254)).tolist()
    y = (1 + (h >> np.uint64(24)) % np.uint64(0xFFFE)).tolist()
    z = (1 + (h >> np.uint64(40)) % np.uint64(0xFFFE)).tolist()
    return [f"{hd}{yy:x}::{zz:x}" if six else f"{hd}{aa}" for hd, six, aa, yy, zz in zip(heads, v6, a, y, z)]


def _tcp_records(world: World, conns: Connections, out: mdl.Outcomes, s, rng: np.random.Generator):
    sc = world.sc
    c = s.conn
    m = len(c)
    arm = conns.arm[c]
    ccv = np.array([v or 0 for v in world.cc_versions])[arm]
    is_bbr = np.array([a.cc in ("bbr", "bbr2") for a in sc.arms])[arm]
    pg, cg = _bbr_gains(ccv, s.bbr_phase, s.bbr_cycle)
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


def _http_records(world: World, conns: Connections, reqs: Requests, out: mdl.Outcomes,
                  rng: np.random.Generator):
    sc = world.sc
    r = len(reqs.conn)
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


def _summarise(world: World, conns: Connections, reqs: Requests, out: mdl.Outcomes, totals) -> Summary:
    """Whole-connection truths of this chunk, per arm and segment (all connections, unsampled)."""
    n_arms = len(world.sc.arms)
    s = Summary(n_arms, len(world.segments))
    n = len(conns.t0_s)
    s.connections += np.bincount(conns.arm, minlength=n_arms)
    for hh, cnt in enumerate(np.bincount(conns.host, minlength=len(world.hosts.names)).tolist()):
        if cnt:
            s.host_connections[hh] = cnt
    bulk_req = reqs.body_bytes >= MIB
    bulk = np.bincount(reqs.conn, weights=bulk_req, minlength=n) > 0
    retrans_pct = 100.0 * totals.bytes_retrans / totals.bytes_sent
    busy_ms = totals.busy_s * 1e3
    good = bulk_req & (reqs.log_s < world.horizon_s) & (reqs.request_time_ms > 0)
    gp = reqs.body_bytes * 8.0 / np.maximum(reqs.request_time_ms, 1) / 1e3  # Mbit/s
    seg_conn = world.segment_of_prefix[:, conns.prefix]  # (segments, n)
    for a in range(n_arms):
        in_arm = (conns.arm == a) & bulk
        req_arm = good & (conns.arm[reqs.conn] == a)
        for g in range(len(world.segments)):
            m = in_arm & seg_conn[g]
            if m.any():
                s.add(a, g, "retrans_pct", retrans_pct[m])
                s.add(a, g, "inflight_bytes", out.inflight_bytes[m])
                s.add(a, g, "inflight_bytes_busy", out.inflight_bytes[m], weights=totals.busy_s[m])
                s.add(a, g, "rtt_ms", out.srtt_s[m] * 1e3)
                s.add(a, g, "min_rtt_ms", out.min_rtt_s[m] * 1e3)
                s.add(a, g, "rwnd_limited_pct", 100.0 * out.rwnd_limited_frac[m])
                s.count(a, g, "bulk_connections", float(m.sum()))
                s.count(a, g, "high_loss", float((retrans_pct[m] >= HIGH_LOSS_PCT).sum()))
                s.count(a, g, "rwnd_limited", float((out.rwnd_limited_frac[m] > 0).sum()))
                s.count(a, g, "rwnd_limited_ms", float((out.rwnd_limited_frac[m] * busy_ms[m]).sum()))
                s.count(a, g, "busy_ms", float(busy_ms[m].sum()))
            rm = req_arm & seg_conn[g][reqs.conn]
            if rm.any():
                s.add(a, g, "goodput_mbps", gp[rm])
                s.count(a, g, "bulk_requests", float(rm.sum()))
    return s


# --------------------------------------------------------------------------------------------
# running chunks, in order, in one or more processes

_WORKER_WORLD: World | None = None


def _init_worker(world: World) -> None:
    global _WORKER_WORLD
    _WORKER_WORLD = world


def _work(i: int) -> ChunkResult:
    assert _WORKER_WORLD is not None
    return run_chunk(_WORKER_WORLD, i)


def iter_chunks(world: World, workers: int = 1) -> Iterator[ChunkResult]:
    """Chunk results in chunk order; with ``workers > 1`` chunks are generated in parallel
    processes (the output does not depend on ``workers``)."""
    n = world.plan.counts.shape[0]
    if workers <= 1 or n == 1:
        for i in range(n):
            yield run_chunk(world, i)
        return
    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    ahead = 2 * workers  # bounded: a slow sink holds back generation instead of buffering chunks
    with ctx.Pool(workers, initializer=_init_worker, initargs=(world,)) as pool:
        pending: deque = deque()
        for i in range(n):
            pending.append(pool.apply_async(_work, (i,)))
            if len(pending) >= ahead:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def records(world: World, chunk: ChunkResult) -> Iterator[tuple[str, bytes, bytes]]:
    """``(topic, key, line)`` for every record of a chunk (key = host name)."""
    keys = [name.encode() for name in world.hosts.names]
    for topic, blobs, hosts in ((TCP_TOPIC, chunk.tcp_lines, chunk.tcp_host),
                                (HTTP_TOPIC, chunk.http_lines, chunk.http_host)):
        it = iter(hosts.tolist())
        for blob in blobs:
            for hh, line in zip(it, blob.split(b"\n")):
                yield topic, keys[hh], line
