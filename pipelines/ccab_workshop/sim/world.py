"""The fixed part of a run: client prefixes, hosts, the chunk plan and the client segments.

Built once per run (deterministic for the scenario's seed) and shared read-only by every chunk,
in one or several worker processes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from ccab_workshop.sim.population import HostTable, Prefixes, draw_hosts, draw_prefixes
from ccab_workshop.sim.scenario import CCModel, Scenario, Segment, pre_period_of

STREAM_POPULATION, STREAM_HOSTS, STREAM_CHUNK = 1, 2, 3  # SeedSequence([seed, stream, ...])


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
    prefixes = draw_prefixes(sc, np.random.default_rng(np.random.SeedSequence([sc.seed, STREAM_POPULATION])))
    hosts = draw_hosts(sc, np.random.default_rng(np.random.SeedSequence([sc.seed, STREAM_HOSTS])))
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


def build_pre_world(sc: Scenario, hours: float, *, total_connections: int | None = None,
                    chunk_target: int = 50_000) -> World:
    """The world of ``sc``'s pre-period (:func:`ccab_workshop.sim.scenario.pre_period_of`): the same hosts,
    their connections numbered *before* the run's (nginx ``$connection`` ends where the run's
    starts) and their socket ids from another boot salt, so no record of the pre-period shares a
    ``sock_id`` or ``conn_serial`` with one of the run."""
    w = build_world(pre_period_of(sc, hours), total_connections=total_connections, chunk_target=chunk_target)
    before = w.plan.counts.sum(axis=0).astype(np.int64)
    hosts = replace(w.hosts, salt=w.hosts.salt ^ np.uint64(0x9E5EED0F7E0E5EED),
                    serial_base=np.maximum(0, w.hosts.serial_base - before))
    return replace(w, hosts=hosts)
