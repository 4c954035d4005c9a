"""Connections, their requests and what a sampler sees at each tick — pure numpy.

Times are float seconds relative to the scenario start. A connection is established at ``t0``;
the TLS handshake takes 1.5 RTT; then requests follow one another (server time, transfer,
think time); the connection closes ``linger`` seconds after its last response. Counters at a
sampling tick are cumulative and monotone over a connection's ticks; the last tick of a
connection that lingers past a tick boundary shows its whole history.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ccab_workshop.sim.dists import draw, jitter
from ccab_workshop.sim.model import Outcomes, Paths, mobile_paths, transfer_time_s
from ccab_workshop.sim.population import HostTable, Prefixes
from ccab_workshop.sim.scenario import Scenario

MIB = 1 << 20
KIB = 1 << 10
TLS_SERVER_BYTES = 4200  # server flight of a TLS 1.3 handshake with a certificate chain
TLS_CLIENT_BYTES = 580
IW_PKTS = 10
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays (wrapping arithmetic): a fast, good hash."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def unit_from_hash(h: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) from the top 53 bits of a uint64 hash."""
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def segment_cumsum_exclusive(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative sum of ``values`` *before* each element, restarting where ``first`` is True."""
    c = np.cumsum(values) - values
    starts = np.flatnonzero(first)
    seg = np.cumsum(first) - 1
    return c - c[starts][seg]


@dataclass(frozen=True)
class Connections:
    """One entry per connection of a chunk, sorted by start time."""

    t0_s: np.ndarray
    host: np.ndarray
    arm: np.ndarray
    serial: np.ndarray  # nginx $connection
    sock_hash: np.ndarray  # uint64; sock_id is its hex
    prefix: np.ndarray
    client_class: np.ndarray
    paths: Paths
    client_wscale: np.ndarray
    peer_port: np.ndarray


def draw_connections(sc: Scenario, prefixes: Prefixes, hosts: HostTable, counts: np.ndarray,
                     serial_offset: np.ndarray, window_s: tuple[float, float],
                     rng: np.random.Generator) -> Connections:
    """Connections arriving in ``window_s``: ``counts[h]`` on host ``h``.

    Start times are uniform in the window (windows are short; the diurnal curve sets the counts),
    clients are drawn by the host's class mix then by prefix popularity, and each connection's
    path scatters around its prefix's medians.
    """
    n = int(counts.sum())
    host = np.repeat(np.arange(len(counts)), counts)
    t0 = window_s[0] + (window_s[1] - window_s[0]) * rng.random(n)
    order = np.argsort(t0, kind="stable")
    t0, host = t0[order], host[order]
    # per-host serial in start order
    by_host = np.argsort(host, kind="stable")
    first = np.ones(n, dtype=bool)
    first[1:] = host[by_host][1:] != host[by_host][:-1]
    rank = np.empty(n, dtype=np.int64)
    rank[by_host] = segment_cumsum_exclusive(np.ones(n, dtype=np.int64), first) if n else rank[by_host]
    serial = hosts.serial_base[host] + serial_offset[host] + rank
    with np.errstate(over="ignore"):
        sock_hash = splitmix64(hosts.salt[host] ^ (serial.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))

    u = rng.random(n)
    cls = (u[:, None] >= hosts.class_cum[host]).sum(axis=1)
    cls = np.minimum(cls, hosts.class_cum.shape[1] - 1)
    v = rng.random(n)
    prefix = np.zeros(n, dtype=np.int64)
    for k, members in enumerate(prefixes.class_members):
        m = cls == k
        if m.any() and len(members):
            prefix[m] = members[np.minimum(np.searchsorted(prefixes.class_cum[k], v[m]), len(members) - 1)]
    cls = prefixes.class_idx[prefix]  # (a class with no prefix falls back above)

    wp = sc.clients.within_prefix_sigma
    cl = sc.clients
    bw_mbps = np.clip(jitter(prefixes.bandwidth_mbps[prefix], wp.bandwidth, rng), 0.25, 2000.0)
    rtt0_ms = np.clip(jitter(prefixes.rtt_ms[prefix], wp.rtt, rng), 0.5, 1000.0)
    buf = np.clip(jitter(prefixes.buffer_bdp[prefix], wp.buffer, rng), 0.02, 50.0)
    lossy = rng.random(n) >= prefixes.loss_zero_share[prefix]
    rloss = np.where(lossy, np.clip(jitter(prefixes.loss_pct[prefix], 0.7, rng), 0.0, 15.0) / 100.0, 0.0)
    closs = draw(cl.congestion_loss_pct, n, rng) / 100.0
    small = rng.random(n) < cl.small_rwnd_share
    rwnd = np.where(small, draw(cl.small_rwnd_kib, n, rng), draw(cl.rwnd_kib, n, rng)) * KIB
    v6 = prefixes.ipv6[prefix]
    m = rng.random(n)
    mss = np.where(v6, np.where(m < 0.9, 1428, 1368), np.where(m < 0.88, 1448, np.where(m < 0.96, 1388, 1360)))
    paths = Paths(bandwidth_bps=bw_mbps * 1e6, rtt0_s=rtt0_ms / 1e3, buffer_bdp=buf, random_loss=rloss,
                  congestion_loss=closs, rwnd_bytes=rwnd, mss_bytes=mss.astype(np.float64),
                  mobile=prefixes.mobile[prefix])
    wscale = rng.choice(np.array([6, 7, 8, 9, 10]), size=n, p=[0.05, 0.35, 0.2, 0.1, 0.3])
    port = (1024 + (sock_hash >> np.uint64(8)) % np.uint64(64511)).astype(np.int64)
    paths, _ = mobile_paths(paths, rng)
    return Connections(t0, host, hosts.arm_idx[host], serial, sock_hash, prefix, cls, paths, wscale, port)


@dataclass(frozen=True)
class Requests:
    """One entry per request, grouped by connection (``conn``), in order on the connection."""

    conn: np.ndarray
    index: np.ndarray  # 0-based position on the connection ($connection_requests - 1)
    first: np.ndarray  # bool, first request of its connection
    method_head: np.ndarray  # bool
    status: np.ndarray
    body_bytes: np.ndarray  # int
    header_bytes: np.ndarray  # int
    request_bytes: np.ndarray  # int, bytes the client sent for it
    start_s: np.ndarray  # request read by nginx
    data_start_s: np.ndarray  # first response byte sent (after server time)
    transfer_s: np.ndarray  # data start -> last byte acknowledged (busy time)
    ramp_s: np.ndarray  # slow-start part of transfer_s
    end_s: np.ndarray  # last byte acknowledged
    log_s: np.ndarray  # nginx log time ($msec): last byte written to the socket
    request_time_ms: np.ndarray  # int ms ($request_time)


def draw_requests(sc: Scenario, conns: Connections, out: Outcomes,
                  rng: np.random.Generator) -> tuple[Requests, np.ndarray]:
    """Requests of each connection and their schedule; also returns each connection's close time."""
    tr = sc.traffic
    n = len(conns.t0_s)
    bulk_conn = rng.random(n) < tr.bulk_connection_share
    mean_k = np.where(bulk_conn, tr.requests_per_bulk_connection, tr.requests_per_small_connection)
    k = np.minimum(rng.geometric(1.0 / mean_k), 100)
    conn = np.repeat(np.arange(n), k)
    r = len(conn)
    offsets = np.cumsum(k) - k
    index = np.arange(r) - offsets[conn]
    first = index == 0
    is_bulk = bulk_conn[conn] & (first | (rng.random(r) < tr.bulk_request_share))
    body = np.where(is_bulk, draw(tr.bulk_response_mib, r, rng) * MIB,
                    draw(tr.small_response_kib, r, rng) * KIB)
    body = np.maximum(np.where(is_bulk, np.maximum(body, MIB), body), 0).astype(np.int64)
    u = rng.random(r)
    head = ~is_bulk & (u < tr.head_share)
    not_found = ~is_bulk & ~head & (u < tr.head_share + tr.not_found_share)
    not_mod = ~is_bulk & ~head & ~not_found & (u < tr.head_share + tr.not_found_share + tr.not_modified_share)
    ranged = is_bulk & (rng.random(r) < tr.range_share)
    status = np.full(r, 200, dtype=np.int64)
    status[not_found] = 404
    status[not_mod] = 304
    status[ranged] = 206
    body[not_found] = rng.integers(150, 600, size=int(not_found.sum()))
    body[head | not_mod] = 0
    header = rng.integers(240, 420, size=r) + np.where(ranged, 60, 0)
    req_bytes = rng.integers(280, 900, size=r)

    c = conn
    mss = conns.paths.mss_bytes[c]
    srtt = out.srtt_s[c]
    goodput = out.goodput_bps[c]
    window = np.minimum(out.inflight_bytes[c], goodput / 8.0 * out.min_rtt_s[c])  # slow start exits at the BDP
    rto = np.maximum(0.2, srtt + 4 * out.rttvar_s[c])
    gap = np.where(first, 0.0, np.minimum(rng.exponential(tr.think_time_s, r), 0.95 * tr.keepalive_timeout_s))
    w0 = np.where(first, IW_PKTS * mss, np.maximum(IW_PKTS * mss, window * 2.0 ** (-gap / rto)))
    size = (body + header).astype(np.float64)
    transfer, ramp = transfer_time_s(size, goodput, srtt, out.min_rtt_s[c], w0, window)
    server = draw(tr.server_time_ms, r, rng) / 1e3
    # per request: gap, then server time, then transfer; the first starts after the handshake
    step = gap + server + transfer
    before = segment_cumsum_exclusive(step, first)
    start = conns.t0_s[c] + 1.5 * out.srtt_s[c] + before + gap
    data_start = start + server
    end = data_start + transfer
    lowat = tr.notsent_lowat_kib * KIB
    written = np.maximum(0.0, transfer - srtt - np.minimum(size, lowat) * 8.0 / goodput)
    request_time_ms = np.round((server + written) * 1e3).astype(np.int64)
    log = start + request_time_ms / 1e3
    last = np.flatnonzero(np.r_[first[1:], True])
    linger = np.minimum(rng.exponential(tr.linger_s, n), tr.keepalive_timeout_s)
    close = end[last] + linger
    reqs = Requests(conn, index, first, head, status, body, header.astype(np.int64),
                    req_bytes.astype(np.int64), start, data_start, transfer, ramp, end, log,
                    request_time_ms)
    return reqs, close


def poisson_from_uniform(u: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Poisson(``lam``) quantile at ``u`` (exact inversion below a mean of 40, a continuity-corrected
    normal quantile above)."""
    out = np.zeros(len(u), dtype=np.int64)
    small = lam < 40.0
    if small.any():
        us, ls = u[small], lam[small]
        pmf = np.exp(-ls)
        cdf = pmf.copy()
        k = np.zeros(len(us), dtype=np.int64)
        for i in range(1, 120):
            more = us > cdf
            if not more.any():
                break
            k += more
            pmf = pmf * ls / i
            cdf = cdf + pmf
        out[small] = k
    big = ~small
    if big.any():
        z = np.sqrt(2.0) * _erfinv(2.0 * np.clip(u[big], 1e-12, 1 - 1e-12) - 1.0)
        out[big] = np.maximum(np.floor(lam[big] + np.sqrt(lam[big]) * z + 0.5), 0).astype(np.int64)
    return out


def _erfinv(y: np.ndarray) -> np.ndarray:
    """Inverse error function (Giles 2010 single-precision approximation, |error| < 4e-7 on the
    range used here), so the normal quantile needs no scipy."""
    w = -np.log((1.0 - y) * (1.0 + y))
    w1 = w - 2.5
    p1 = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p1 = c + p1 * w1
    w2 = np.sqrt(np.maximum(w, 5.0)) - 3.0
    p2 = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p2 = c + p2 * w2
    return np.where(w < 5.0, p1, p2) * y


@dataclass(frozen=True)
class Totals:
    """Whole-connection counters (what the last possible sample would show)."""

    unique_bytes: np.ndarray  # TLS + all responses
    retrans_pkts: np.ndarray
    bytes_retrans: np.ndarray
    bytes_sent: np.ndarray
    busy_s: np.ndarray
    body_bytes: np.ndarray  # sum of response bodies


def connection_totals(conns: Connections, reqs: Requests, out: Outcomes, rng: np.random.Generator) -> Totals:
    """Retransmitted packets of a whole connection: Poisson with mean r/(1-r) x unique packets.

    Drawn by inversion from one uniform per connection, so a planted effect that changes one
    connection's mean leaves every other connection's draw alone."""
    n = len(conns.t0_s)
    resp = np.bincount(reqs.conn, weights=(reqs.body_bytes + reqs.header_bytes), minlength=n)
    unique = TLS_SERVER_BYTES + resp
    mss = conns.paths.mss_bytes
    r = out.retrans_frac
    lam = r / (1.0 - r) * unique / mss
    pkts = poisson_from_uniform(rng.random(n), lam)
    bytes_retrans = pkts * mss.astype(np.int64)
    busy = np.bincount(reqs.conn, weights=reqs.transfer_s, minlength=n) + out.srtt_s
    body = np.bincount(reqs.conn, weights=reqs.body_bytes, minlength=n).astype(np.int64)
    return Totals(unique.astype(np.int64), pkts, bytes_retrans, unique.astype(np.int64) + bytes_retrans, busy, body)


@dataclass(frozen=True)
class Snapshots:
    """One entry per (sampled connection, tick): the fields of a ``tcp_sample/1``."""

    conn: np.ndarray
    tick_s: np.ndarray
    active: np.ndarray  # bool: sending data at the tick
    rtt_us: np.ndarray
    rttvar_us: np.ndarray
    min_rtt_us: np.ndarray
    rto_ms: np.ndarray
    mss: np.ndarray
    cwnd: np.ndarray
    ssthresh: np.ndarray  # -1 = infinite (null)
    unacked: np.ndarray
    sacked: np.ndarray
    lost: np.ndarray
    retrans_out: np.ndarray
    total_retrans: np.ndarray
    reordering: np.ndarray
    bytes_sent: np.ndarray
    bytes_acked: np.ndarray
    bytes_retrans: np.ndarray
    bytes_received: np.ndarray
    segs_out: np.ndarray
    segs_in: np.ndarray
    data_segs_out: np.ndarray
    data_segs_in: np.ndarray
    delivery_rate_bps: np.ndarray
    pacing_rate_bps: np.ndarray
    delivered: np.ndarray
    app_limited: np.ndarray
    busy_ms: np.ndarray
    rwnd_limited_ms: np.ndarray
    sndbuf_limited_ms: np.ndarray
    notsent_bytes: np.ndarray
    send_q_bytes: np.ndarray
    snd_wnd: np.ndarray
    lastsnd_ms: np.ndarray
    lastrcv_ms: np.ndarray
    lastack_ms: np.ndarray
    bbr_bw_bps: np.ndarray
    bbr_min_rtt_us: np.ndarray
    bbr_phase: np.ndarray  # 0 startup, 1 drain, 2 probe_bw (gain cycle index in bbr_cycle), 3 probe_rtt
    bbr_cycle: np.ndarray
    timer_ms: np.ndarray  # retransmit timer remaining, 0 = no timer


def tick_snapshots(conns: Connections, reqs: Requests, out: Outcomes, totals: Totals,
                   close_s: np.ndarray, selected: np.ndarray, interval_s: float, horizon_s: float,
                   rng: np.random.Generator) -> Snapshots:
    """Snapshots of the ``selected`` connections at every tick ``k * interval_s`` they are open.

    Counters grow linearly through a transfer; retransmitted packets accrue in proportion to
    unique bytes sent, so every snapshot's retransmit share matches the connection's
    (:func:`state_at`).
    """
    sel = np.flatnonzero(selected)
    t0 = conns.t0_s[sel]
    t1 = np.minimum(close_s[sel], horizon_s - 1e-9)
    kmin = np.ceil(t0 / interval_s).astype(np.int64)
    kmax = np.floor(t1 / interval_s).astype(np.int64)
    nt = np.maximum(kmax - kmin + 1, 0)
    c = np.repeat(sel, nt)
    first_tick = np.repeat(kmin, nt)
    offs = np.cumsum(nt) - nt
    kk = first_tick + (np.arange(len(c)) - np.repeat(offs, nt))
    return state_at(conns, reqs, out, totals, close_s, c, kk * interval_s, rng)


def close_states(conns: Connections, reqs: Requests, out: Outcomes, totals: Totals, close_s: np.ndarray,
                 selected: np.ndarray, horizon_s: float, rng: np.random.Generator) -> Snapshots:
    """The final state of every ``selected`` connection that closes within the horizon, at its close
    time: what the kernel's destroy event carries (``tcp_conn/1``). Every connection counts once,
    the short ones no tick ever saw included."""
    c = np.flatnonzero(selected & (close_s < horizon_s))
    return state_at(conns, reqs, out, totals, close_s, c, close_s[c], rng)


def state_at(conns: Connections, reqs: Requests, out: Outcomes, totals: Totals, close_s: np.ndarray,
             c: np.ndarray, tau: np.ndarray, rng: np.random.Generator) -> Snapshots:
    """The socket state of connection ``c[k]`` at time ``tau[k]`` (one entry per pair)."""
    m = len(c)

    # which request is current: the last one that started at or before the tick
    span = float(np.max(close_s - conns.t0_s)) + 2.0 if len(close_s) else 1.0
    req_key = reqs.conn * span + (reqs.start_s - conns.t0_s[reqs.conn])
    tick_key = c * span + (tau - conns.t0_s[c])
    j = np.searchsorted(req_key, tick_key, side="right") - 1
    has_req = (j >= 0) & (reqs.conn[np.maximum(j, 0)] == c)
    j = np.maximum(j, 0)

    size = (reqs.body_bytes + reqs.header_bytes)[j]
    cum_bytes = segment_cumsum_exclusive((reqs.body_bytes + reqs.header_bytes).astype(np.float64), reqs.first)[j]
    cum_busy = segment_cumsum_exclusive(reqs.transfer_s, reqs.first)[j]
    cum_recv = segment_cumsum_exclusive(reqs.request_bytes.astype(np.float64), reqs.first)[j]
    ds, te, tr = reqs.data_start_s[j], reqs.end_s[j], reqs.transfer_s[j]
    active = has_req & (tau >= ds) & (tau < te)
    done = has_req & (tau >= te)
    waiting = has_req & (tau < ds)
    frac = np.where(active, np.clip((tau - ds) / np.maximum(tr, 1e-9), 0.0, 1.0), np.where(done, 1.0, 0.0))

    srtt = out.srtt_s[c]
    mss = conns.paths.mss_bytes[c].astype(np.int64)
    acked_req = np.floor(frac * size)
    acked = TLS_SERVER_BYTES + np.where(has_req, cum_bytes + acked_req, 0.0)
    remaining = np.where(active, size - acked_req, 0.0)

    # window in use while active: slow start, then the steady window with some scatter
    since = np.where(active, tau - ds, 0.0)
    ramp = reqs.ramp_s[j]
    cwnd_c = out.cwnd_pkts[c]
    ss_cwnd = np.minimum(cwnd_c, np.ceil(IW_PKTS * 2.0 ** np.minimum(since / out.min_rtt_s[c], 40.0)))
    in_ramp = active & (since < ramp)
    cwnd = np.where(in_ramp, np.maximum(ss_cwnd, IW_PKTS), cwnd_c).astype(np.int64)
    steady_pkts = out.inflight_bytes[c] / mss * rng.uniform(0.8, 1.0, m)
    pipe = np.where(active, np.minimum(np.minimum(cwnd, np.ceil(steady_pkts)), np.ceil(remaining / mss)), 0)
    pipe = np.where(in_ramp, np.minimum(cwnd, np.ceil(remaining / mss)), pipe).astype(np.int64)
    pipe = np.maximum(pipe, np.where(active, 1, 0))
    r = out.retrans_frac[c]
    lossy = active & (rng.random(m) < np.minimum(1.0, 20.0 * r))
    lost = np.where(lossy, np.floor(pipe * np.minimum(r * rng.uniform(0.5, 3.0, m), 0.9)), 0).astype(np.int64)
    sacked = np.where(lossy, lost + np.floor(pipe * r * rng.uniform(0.0, 2.0, m)), 0).astype(np.int64)
    retrans_out = np.floor(lost * rng.random(m)).astype(np.int64)
    unacked = pipe + sacked + lost - retrans_out
    unacked = np.minimum(unacked, np.ceil(remaining / mss).astype(np.int64) + retrans_out)
    unacked = np.maximum(unacked, pipe)
    inflight_bytes = np.minimum(unacked * mss, np.maximum(remaining, 0)).astype(np.int64)
    unacked = np.where(active, np.maximum(unacked, 1), 0)
    inflight_bytes = np.where(active, np.maximum(inflight_bytes, 1), 0)
    # bytes_acked cannot pass what was sent: the in-flight part is not yet acked
    acked = np.floor(acked).astype(np.int64)
    unique_sent = acked + inflight_bytes
    left = np.maximum(remaining - inflight_bytes, 0)
    notsent = np.where(active, np.minimum(left, np.floor(out.inflight_bytes[c] * rng.uniform(0.1, 1.2, m))), 0).astype(np.int64)

    total_unique = totals.unique_bytes[c].astype(np.float64)
    total_retrans = np.floor(totals.retrans_pkts[c] * np.minimum(unique_sent / total_unique, 1.0)).astype(np.int64)
    total_retrans = np.maximum(total_retrans, retrans_out)
    bytes_retrans = total_retrans * mss
    bytes_sent = unique_sent + bytes_retrans
    n_started = np.where(has_req, reqs.index[j] + 1, 0)
    bytes_received = TLS_CLIENT_BYTES + np.where(has_req, cum_recv + reqs.request_bytes[j], 0).astype(np.int64)
    data_segs_out = np.ceil(unique_sent / mss).astype(np.int64) + total_retrans
    data_segs_in = 2 + n_started
    segs_out = data_segs_out + data_segs_in + 1
    delivered = np.ceil(acked / mss).astype(np.int64) + sacked
    segs_in = data_segs_in + 1 + (delivered + 1) // 2

    busy_s = srtt + np.where(has_req, cum_busy + np.where(active, since, np.where(done, tr, 0.0)), 0.0)
    busy_ms = np.floor(busy_s * 1e3).astype(np.int64)
    rwnd_ms = np.floor(out.rwnd_limited_frac[c] * busy_ms).astype(np.int64)
    snd_ms = np.floor(out.sndbuf_limited_frac[c] * busy_ms).astype(np.int64)

    # RTT as measured at the tick: scatter while active, last value when idle
    tick_jit = np.where(active, np.exp(0.1 * rng.standard_normal(m)), 1.0)
    rtt_s = np.maximum(srtt * tick_jit, out.min_rtt_s[c])
    rttvar_s = out.rttvar_s[c] * np.where(active, np.exp(0.2 * rng.standard_normal(m)), 1.0)
    rtt_us = np.maximum(np.round(rtt_s * 1e6), 1).astype(np.int64)
    rttvar_us = np.maximum(np.round(rttvar_s * 1e6), 1).astype(np.int64)
    min_rtt_us = np.minimum(np.round(out.min_rtt_s[c] * 1e6).astype(np.int64), rtt_us)
    rto_ms = (np.ceil((rtt_us / 1e3 + np.maximum(4 * rttvar_us / 1e3, 200.0)) / 4.0) * 4).astype(np.int64)
    ssthresh = np.where(total_retrans > 0, np.maximum(np.floor(out.cwnd_pkts[c] * 0.7), 2), -1).astype(np.int64)
    reordering = np.where(rng.random(m) < 0.04, rng.integers(4, 40, m), 3)

    rate = out.rate_bps[c]
    delivery = np.where(active, rate * np.exp(0.15 * rng.standard_normal(m)) * np.where(in_ramp, 0.5, 1.0),
                        rate * rng.uniform(0.2, 1.0, m))
    delivery = np.where(has_req, delivery, rate * 0.05)
    app_limited = np.where(active, rng.random(m) < 0.05, rng.random(m) < 0.7)
    pacing = 1.2 * cwnd * mss * 8.0 / rtt_s  # Linux sets pacing for non-BBR senders (fq)
    phase = np.where(in_ramp, 0, np.where(rng.random(m) < 0.02, 3, 2))
    cycle = rng.integers(0, 8, m)
    bbr_bw = rate * rng.uniform(0.95, 1.1, m)
    bbr_min_rtt_us = np.maximum(np.round(out.min_rtt_s[c] * 1e6 * rng.uniform(1.0, 1.06, m)), min_rtt_us).astype(np.int64)

    last_data = np.where(done, tau - te + 0.5 * srtt, np.where(waiting | ~has_req, tau - conns.t0_s[c], 0.0))
    lastsnd = np.where(active, np.floor(rng.random(m) * np.minimum(srtt, 0.05) * 1e3), last_data * 1e3)
    lastack = np.where(active, np.floor(rng.random(m) * np.minimum(srtt, 0.05) * 1e3), np.maximum(last_data - 0.5 * srtt, 0) * 1e3)
    lastrcv = np.where(has_req, tau - reqs.start_s[j], tau - conns.t0_s[c]) * 1e3
    rwnd = conns.paths.rwnd_bytes[c]
    ws = 2.0 ** conns.client_wscale[c]
    snd_wnd = np.maximum(np.floor(rwnd * rng.uniform(0.6, 1.0, m) / ws) * ws, unacked * mss)
    timer = np.where(active, np.floor(rto_ms * rng.uniform(0.2, 1.0, m)) + 1, 0).astype(np.int64)
    return Snapshots(
        conn=c, tick_s=tau, active=active,
        rtt_us=rtt_us, rttvar_us=rttvar_us, min_rtt_us=min_rtt_us, rto_ms=rto_ms, mss=mss,
        cwnd=cwnd, ssthresh=ssthresh, unacked=unacked, sacked=sacked, lost=lost,
        retrans_out=retrans_out, total_retrans=total_retrans, reordering=reordering,
        bytes_sent=bytes_sent, bytes_acked=acked, bytes_retrans=bytes_retrans,
        bytes_received=bytes_received, segs_out=segs_out, segs_in=segs_in,
        data_segs_out=data_segs_out, data_segs_in=data_segs_in,
        delivery_rate_bps=np.round(delivery).astype(np.int64), pacing_rate_bps=np.round(pacing).astype(np.int64),
        delivered=delivered, app_limited=app_limited, busy_ms=busy_ms, rwnd_limited_ms=rwnd_ms,
        sndbuf_limited_ms=snd_ms, notsent_bytes=notsent, send_q_bytes=inflight_bytes + notsent,
        snd_wnd=snd_wnd.astype(np.int64),
        lastsnd_ms=np.floor(lastsnd).astype(np.int64), lastrcv_ms=np.floor(lastrcv).astype(np.int64),
        lastack_ms=np.floor(lastack).astype(np.int64),
        bbr_bw_bps=np.round(bbr_bw).astype(np.int64), bbr_min_rtt_us=bbr_min_rtt_us,
        bbr_phase=phase, bbr_cycle=cycle, timer_ms=timer,
    )
