"""Orchestration: scenario -> world -> chunks of connections -> records and summaries.

A run is split into time windows (chunks) of about ``chunk_target`` connections. Chunk ``i``
draws from its own random stream (``SeedSequence([seed, 3, i])``), so the output is the same
byte for byte whatever the number of worker processes; chunks are emitted in order. Memory is
bounded by one chunk per worker. The generator never writes anything: it yields
:class:`ChunkResult` objects, and :func:`records` turns them into ``(topic, key, line)``.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import deque
from dataclasses import dataclass
from typing import Iterator

import numpy as np
from ccab.base.contracts import TOPIC_HTTP, TOPIC_TCP, TOPIC_TCP_CONN
from ccab_workshop.sim import model as mdl
from ccab_workshop.sim.emit import http_records, tcp_conn_records, tcp_records
from ccab_workshop.sim.stats import HIGH_LOSS_PCT, Summary
from ccab_workshop.sim.timeline import (MIB, Connections, Requests, close_states, connection_totals, draw_connections,
                               draw_requests, tick_snapshots, unit_from_hash)
from ccab_workshop.sim.world import STREAM_CHUNK, World

TCP_TOPIC = TOPIC_TCP
CONN_TOPIC = TOPIC_TCP_CONN
HTTP_TOPIC = TOPIC_HTTP
#: Linux default tcp_wmem[2]: the largest send buffer autotuning reaches
SNDBUF_MAX_BYTES = 4 * MIB


# --------------------------------------------------------------------------------------------
# one chunk


@dataclass
class ChunkResult:
    index: int
    n_connections: int
    tcp_lines: list[bytes]  # slices of newline-separated lines (no trailing newline)
    tcp_host: np.ndarray  # host index per tcp line
    conn_lines: list[bytes]  # tcp_conn/1: one per sampled connection that closed within the horizon
    conn_host: np.ndarray
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
    k = world.sc.shared_bottleneck.spillover_goodput
    if k:
        s = treated_share(world)
        vals["goodput"] = vals["goodput"] * np.where(conns.arm == 0, np.exp(-k * s), np.exp(k * (1 - s)))
    return mdl.Multipliers(**vals)


def treated_share(world: World) -> float:
    """Share of the PoP's hosts not on the first (control) arm (0 in a pre-period: no arm)."""
    names = [world.sc.arms[a].name for a in world.hosts.arm_idx.tolist()]
    return float(np.mean([n != world.sc.arms[0].name for n in names])) if names else 0.0


def run_chunk(world: World, i: int) -> ChunkResult:
    """Generate chunk ``i``: connections, model outcomes, requests, snapshots, lines, summary."""
    sc = world.sc
    # one stream per stage: a planted effect changes values, never which random numbers a stage
    # draws for the *other* connections (the control arm stays identical with and without it)
    # spawn(7)[:6] are the streams of spawn(6): adding the close stream changed no other record
    streams = np.random.SeedSequence([sc.seed, STREAM_CHUNK, i] + ([sc.chunk_stream] if sc.chunk_stream else [])).spawn(7)
    r_conn, r_model, r_req, r_tot, r_tick, r_rec, r_close = (np.random.default_rng(s) for s in streams)
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
    closes = close_states(conns, reqs, out, totals, close, selected, world.horizon_s, r_close)
    summary = _summarise(world, conns, reqs, out, totals)
    tcp_lines, tcp_host, ss = tcp_records(world, conns, out, snaps, r_rec)
    conn_lines, conn_host = tcp_conn_records(world, conns, closes, close)
    http_lines, http_host, nginx = http_records(world, conns, reqs, out, r_rec)
    summary.records["tcp_sample/1"] += len(tcp_host)
    summary.records["http_request/1"] += len(http_host)
    summary.records["tcp_conn/1"] += len(conn_host)
    return ChunkResult(i, n, tcp_lines, tcp_host, conn_lines, conn_host, http_lines, http_host, ss, nginx, summary)


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


def pool_context() -> mp.context.BaseContext:
    """Where generator workers come from: a fork server (else spawn), never a ``fork()`` of the caller.

    The caller is often a process with threads (an open chdb warehouse, Airflow, a pytest-xdist
    worker); a child forked from it can inherit a lock some other thread held and hang for ever,
    and the pool's shutdown then waits on it (CI lost 15 minutes to exactly that). A fork server is
    a fresh single-threaded process, so its children start clean; the world reaches them pickled.
    """
    methods = mp.get_all_start_methods()
    return mp.get_context("forkserver" if "forkserver" in methods else "spawn")


def iter_chunks(world: World, workers: int = 1) -> Iterator[ChunkResult]:
    """Chunk results in chunk order; with ``workers > 1`` chunks are generated in parallel
    processes (the output does not depend on ``workers``)."""
    n = world.plan.counts.shape[0]
    if workers <= 1 or n == 1:
        for i in range(n):
            yield run_chunk(world, i)
        return
    ctx = pool_context()
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
                                (CONN_TOPIC, chunk.conn_lines, chunk.conn_host),
                                (HTTP_TOPIC, chunk.http_lines, chunk.http_host)):
        it = iter(hosts.tolist())
        for blob in blobs:
            # the slice's lines first: zip stops on them without pulling (and losing) the next
            # slice's first host
            for line, hh in zip(blob.split(b"\n"), it):
                yield topic, keys[hh], line
