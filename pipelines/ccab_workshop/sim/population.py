"""The fixed parts of a simulated PoP: client prefixes and hosts.

Both are drawn once per scenario and seed (pure functions of the scenario and an rng) and are
recorded in ``truth.json``. Prefix-level attributes (class, median bandwidth, RTT, buffer, loss)
are *pre-treatment*: they do not depend on the arm, so an analysis may bucket on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ccab_workshop.sim.dists import draw
from ccab_workshop.sim.scenario import Scenario, host_names_of

METRICS = ("goodput", "rtt", "retrans", "inflight", "rwnd_limited")

# Address spaces for simulated clients: RFC 6598 shared space, RFC 2544 benchmarking and the
# RFC 5737 documentation /24s for IPv4; the RFC 3849 documentation /32 for IPv6 /48s.
_V4_BLOCKS = [(100, 64, 64 * 256), (198, 18, 2 * 256)]  # (first octet, second octet, n /24s)
_V4_DOC = [(192, 0, 2), (198, 51, 100), (203, 0, 113)]


def _v4_space() -> list[tuple[int, int, int]]:
    out = []
    for a, b0, n in _V4_BLOCKS:
        for k in range(n):
            out.append((a, b0 + k // 256, k % 256))
    return out + _V4_DOC


@dataclass(frozen=True)
class Prefixes:
    """Client prefixes; every array has one entry per prefix."""

    label: np.ndarray  # object: "100.64.3.0/24" or "2001:db8:1a2b::/48"
    addr_head: np.ndarray  # object: "100.64.3." or "2001:db8:1a2b:" (address = head + host part)
    ipv6: np.ndarray  # bool
    class_idx: np.ndarray  # int
    bandwidth_mbps: np.ndarray
    rtt_ms: np.ndarray
    buffer_bdp: np.ndarray
    loss_zero_share: np.ndarray
    loss_pct: np.ndarray  # median random loss % when the connection has some
    popularity: np.ndarray  # weight within its class
    class_members: tuple[np.ndarray, ...]  # prefix indices per class
    class_cum: tuple[np.ndarray, ...]  # cumulative popularity per class (ends at 1)
    access: np.ndarray | None = None  # object: the class's access type
    country: np.ndarray | None = None  # object: ISO country code
    asn: np.ndarray | None = None  # int: the synthetic network's ASN
    as_name: np.ndarray | None = None  # object

    @property
    def mobile(self) -> np.ndarray:
        if self.access is None:
            return np.zeros(len(self.label), dtype=bool)
        return self.access == "mobile"


def draw_prefixes(sc: Scenario, rng: np.random.Generator) -> Prefixes:
    """Draw the client prefixes of ``sc.clients``.

    Each prefix gets a class (by class share), an address family, and its own medians of
    bandwidth, RTT, buffer and random loss drawn from the class distributions; popularity within
    a class is Zipf-like (a few big ISPs, a long tail).
    """
    cl = sc.clients
    n = cl.prefixes
    shares = np.array([c.share for c in cl.classes], dtype=float)
    shares = shares / shares.sum()
    class_idx = rng.choice(len(cl.classes), size=n, p=shares)
    # every class with a positive share gets at least one prefix
    for k in np.flatnonzero(shares > 0):
        if not np.any(class_idx == k):
            class_idx[rng.integers(n)] = k
    ipv6 = np.zeros(n, dtype=bool)
    bw = np.empty(n)
    rtt = np.empty(n)
    buf = np.empty(n)
    lz = np.empty(n)
    lp = np.empty(n)
    for k, c in enumerate(cl.classes):
        m = class_idx == k
        cnt = int(m.sum())
        ipv6[m] = rng.random(cnt) < c.ipv6_share
        bw[m] = draw(c.bandwidth_mbps, cnt, rng)
        rtt[m] = draw(c.rtt_ms, cnt, rng)
        buf[m] = draw(c.buffer_bdp, cnt, rng)
        lz[m] = c.random_loss.zero_share
        lp[m] = draw(c.random_loss.pct, cnt, rng)
    space = _v4_space()
    n4 = int((~ipv6).sum())
    if n4 > len(space):  # more IPv4 prefixes than the simulated space: the rest become IPv6
        flip = np.flatnonzero(~ipv6)[len(space):]
        ipv6[flip] = True
        n4 = len(space)
    pick4 = rng.choice(len(space), size=n4, replace=False)
    pick6 = rng.choice(np.arange(1, 0xFFFF), size=int(ipv6.sum()), replace=False)
    label = np.empty(n, dtype=object)
    head = np.empty(n, dtype=object)
    i4 = np.flatnonzero(~ipv6)
    i6 = np.flatnonzero(ipv6)
    for i, s in zip(i4, pick4):
        a, b, c = space[s]
        label[i] = f"{a}.{b}.{c}.0/24"
        head[i] = f"{a}.{b}.{c}."
    for i, g in zip(i6, pick6):
        label[i] = f"2001:db8:{g:x}::/48"
        head[i] = f"2001:db8:{g:x}:"
    popularity = np.empty(n)
    members, cums = [], []
    for k in range(len(cl.classes)):
        idx = np.flatnonzero(class_idx == k)
        ranks = rng.permutation(len(idx)) + 1.0
        w = ranks ** (-cl.popularity_zipf)
        popularity[idx] = w / w.sum() if len(idx) else w
        members.append(idx)
        cums.append(np.cumsum(popularity[idx]) if len(idx) else np.zeros(0))
    access, country, asn, as_name = _networks(sc, class_idx)
    return Prefixes(label, head, ipv6, class_idx, bw, rtt, buf, lz, lp, popularity,
                    tuple(members), tuple(cums), access, country, asn, as_name)


#: networks (ASNs) per class and country in the synthetic prefix metadata
ASNS_PER_GROUP = 3
#: share of prefixes the synthetic metadata leaves out (they look up as 'unknown')
UNLISTED_SHARE = 0.03
_RNG_NETWORKS = 0x4E455453  # "NETS": its own stream, so prefixes and hosts draw as before


def _asn_number(k: int) -> int:
    """Documentation ASNs (RFC 5398): 64496-64511, then 65536-65551, then private 4200000000+."""
    if k < 16:
        return 64496 + k
    if k < 32:
        return 65536 + k - 16
    return 4_200_000_000 + k


def _networks(sc: Scenario, class_idx: np.ndarray):
    """Access type, country and a synthetic ASN per prefix: each (class, country) has
    ``ASNS_PER_GROUP`` networks of Zipf-like sizes (one big carrier, smaller ones)."""
    rng = np.random.default_rng(np.random.SeedSequence([sc.seed, _RNG_NETWORKS]))
    n = len(class_idx)
    access = np.empty(n, dtype=object)
    country = np.empty(n, dtype=object)
    asn = np.zeros(n, dtype=np.int64)
    as_name = np.empty(n, dtype=object)
    k = 0
    for ci, c in enumerate(sc.clients.classes):
        idx = np.flatnonzero(class_idx == ci)
        access[idx] = c.access_type
        cc = np.array(c.countries, dtype=object)[rng.integers(len(c.countries), size=len(idx))]
        country[idx] = cc
        for code in c.countries:
            members = idx[cc == code]
            w = 1.0 / np.arange(1, ASNS_PER_GROUP + 1)
            pick = rng.choice(ASNS_PER_GROUP, size=len(members), p=w / w.sum())
            for j in range(ASNS_PER_GROUP):
                asn[members[pick == j]] = _asn_number(k + j)
                as_name[members[pick == j]] = f"SIM-{c.access_type.upper()}-{code}-{j + 1} ({c.name})"
            k += ASNS_PER_GROUP
    return access, country, asn, as_name


def prefix_metadata_rows(sc: Scenario, prefixes: Prefixes) -> list[tuple[str, int, str, str, str]]:
    """The synthetic prefix metadata of a scenario: (network, asn, as_name, country, access).

    One row per client prefix except a seeded ``UNLISTED_SHARE`` (unknown to the lookup), plus a
    covering 198.18.0.0/15 'hosting' aggregate that the per-prefix rows inside it override
    (longest prefix wins) and that catches the unlisted prefixes inside it."""
    rng = np.random.default_rng(np.random.SeedSequence([sc.seed, _RNG_NETWORKS, 1]))
    listed = rng.random(len(prefixes.label)) >= UNLISTED_SHARE
    rows = [("198.18.0.0/15", _asn_number(200), "SIM-HOSTING-AGGREGATE", "JP", "hosting")]
    for i in np.flatnonzero(listed):
        rows.append((str(prefixes.label[i]), int(prefixes.asn[i]), str(prefixes.as_name[i]),
                     str(prefixes.country[i]), str(prefixes.access[i])))
    return rows


@dataclass(frozen=True)
class HostTable:
    """Hosts; every array has one entry per host (index = host number - 1)."""

    names: list[str]
    arm_idx: np.ndarray  # int
    traffic: np.ndarray  # relative traffic weight (mean about 1)
    effect_log: dict[str, np.ndarray]  # metric -> log multiplier per host
    class_cum: np.ndarray  # (hosts, classes) cumulative class probabilities
    local_v4: list[str]
    local_v6: list[str]
    salt: np.ndarray  # uint64, per-host boot-id salt for sock ids
    serial_base: np.ndarray  # int, nginx $connection at the scenario start
    ino_base: np.ndarray  # int
    cookie_base: np.ndarray  # int, ss sk: (socket cookie)
    rcv_wscale: np.ndarray  # int


def draw_hosts(sc: Scenario, rng: np.random.Generator) -> HostTable:
    """Assign hosts to arms (shuffled with the seed, or in blocks) and draw their random
    effects, traffic weights and client mixes (``hosts.overrides`` pin any of these)."""
    names = host_names_of(sc)
    h = len(names)
    blocks = np.concatenate([np.full(a.hosts, i) for i, a in enumerate(sc.arms)])
    arm_idx = blocks[rng.permutation(h)] if sc.hosts.assignment == "shuffled" else blocks
    if sc.hosts.arm_of:  # what a rollout applied (the draw above still runs: same random stream)
        arm_idx = arm_idx.copy()
        by_arm = {a.name: i for i, a in enumerate(sc.arms)}
        for i, name in enumerate(names):
            if name in sc.hosts.arm_of:
                arm_idx[i] = by_arm[sc.hosts.arm_of[name]]
    traffic = np.exp(sc.hosts.traffic_sd * rng.standard_normal(h))
    sd = sc.hosts.effect_sd
    effect_log = {m: getattr(sd, m) * rng.standard_normal(h) for m in METRICS}
    classes = sc.clients.classes
    base = np.array([c.share for c in classes], dtype=float)
    weights = np.tile(base, (h, 1))
    by_name = {n: i for i, n in enumerate(names)}
    for o in sc.hosts.overrides:
        i = by_name[o.host]
        traffic[i] *= o.traffic_factor
        for k, c in enumerate(classes):
            weights[i, k] *= o.class_weight.get(c.name, 1.0)
        for m, v in o.effect.items():
            effect_log[m][i] = v
    weights = weights / weights.sum(axis=1, keepdims=True)
    class_cum = np.cumsum(weights, axis=1)
    class_cum[:, -1] = 1.0
    return HostTable(
        names=names,
        arm_idx=arm_idx.astype(np.int64),
        traffic=traffic,
        effect_log=effect_log,
        class_cum=class_cum,
        local_v4=[f"192.0.2.{10 + i}" for i in range(h)],
        local_v6=[f"2001:db8:0:f::{10 + i:x}" for i in range(h)],
        salt=rng.integers(1, 2**63, size=h, dtype=np.int64).astype(np.uint64),
        serial_base=rng.integers(10_000, 5_000_000, size=h),
        ino_base=rng.integers(1_000_000, 90_000_000, size=h),
        cookie_base=rng.integers(0x1000, 0x100000, size=h),
        rcv_wscale=rng.choice([7, 8, 9, 10], size=h),
    )
