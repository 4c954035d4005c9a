"""Prefix metadata: the IP-trie dictionary against an independent CIDR matcher, the file formats,
unknown prefixes, and a reload while queries run (real chdb)."""

from __future__ import annotations

import ipaddress
import random
import threading

import pytest
from ccab.cohorts import networks as nw


def _random_networks(rng: random.Random, n4: int, n6: int) -> list[nw.Network]:
    """Nested, overlapping networks: /8../24 IPv4 and /20../48 IPv6, many inside each other."""
    out: dict[str, nw.Network] = {}
    asn = 1
    for _ in range(n4):
        plen = rng.choice([8, 12, 16, 18, 20, 22, 23, 24])
        base = rng.choice([10, 100, 172, 198]) << 24 | rng.getrandbits(16) << 8
        net = ipaddress.ip_network((base, plen), strict=False)
        out[str(net)] = nw.Network(str(net), asn, f"AS-{asn}", rng.choice(["JP", "US", ""]),
                                   rng.choice(nw.ACCESS_TYPES))
        asn += 1
    for _ in range(n6):
        plen = rng.choice([20, 24, 29, 32, 36, 40, 44, 48])
        base = (0x2001_0db8 << 96) | (rng.getrandbits(16) << 80)
        net = ipaddress.ip_network((base, plen), strict=False)
        out[str(net)] = nw.Network(str(net), asn, f"AS-{asn}", "DE", "fixed")
        asn += 1
    return list(out.values())


class _Reference:
    """Independent matcher: per (family, length) the set of network numbers; a prefix's first
    address is matched from the longest length down (no trie, no ClickHouse)."""

    def __init__(self, nets: list[nw.Network]):
        self.by_len: dict[tuple[int, int], dict[int, int]] = {}
        for n in nets:
            net = ipaddress.ip_network(n.network)
            bits = net.max_prefixlen
            key = int(net.network_address) >> (bits - net.prefixlen) if net.prefixlen else 0
            self.by_len.setdefault((net.version, net.prefixlen), {})[key] = n.asn

    def asn(self, prefix: str) -> int:
        addr = ipaddress.ip_network(prefix, strict=False).network_address
        bits = addr.max_prefixlen
        for plen in range(bits, -1, -1):
            table = self.by_len.get((addr.version, plen))
            if table is not None:
                hit = table.get(int(addr) >> (bits - plen) if plen else 0)
                if hit is not None:
                    return hit
        return 0


def _queries(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        if rng.random() < 0.6:
            a = rng.choice([10, 100, 172, 198, 203]) << 24 | rng.getrandbits(16) << 8
            out.append(f"{ipaddress.IPv4Address(a)}/24")
        else:
            a = (0x2001_0db8 << 96) | (rng.getrandbits(16) << 80) | (rng.getrandbits(16) << 64)
            out.append(f"{ipaddress.IPv6Address(a & ~((1 << 80) - 1))}/48")
    return out


def test_lookup_matches_independent_cidr_matcher(warehouse):
    rng = random.Random(20)
    nets = _random_networks(rng, 2500, 1500)
    assert nw.load(warehouse, nets, "test", "ccab") == len(nets)
    # queries: random prefixes, plus the first address of every network (exact and nested hits)
    queries = _queries(rng, 3000)
    for n in nets:
        net = ipaddress.ip_network(n.network)
        queries.append(f"{net.network_address}/{24 if net.version == 4 else 48}")
    got = {p: asn for p, _, _, asn, _ in nw.lookup(warehouse, queries)}
    ref = _Reference(nets)
    want = {p: ref.asn(p) for p in queries}
    assert len(got) == len(set(queries))
    mismatches = [(p, got[p], want[p]) for p in want if got[p] != want[p]]
    assert not mismatches, mismatches[:10]
    hits = sum(1 for v in want.values() if v)
    assert hits > 3000 and len(want) - hits > 200  # both found and unknown prefixes were exercised
    # nested networks were exercised: some query's best match is not its shortest containing network
    assert any(ipaddress.ip_network(n.network).prefixlen >= 20 for n in nets)


def test_unknown_prefixes_are_unknown_not_dropped(warehouse):
    nw.load(warehouse, [nw.Network("10.0.0.0/8", 64500, "X", "JP", "mobile"),
                        nw.Network("10.1.0.0/16", 64501, "Y", "", "fixed")], "t", "ccab")
    rows = nw.lookup(warehouse, ["10.2.3.0/24", "10.1.9.0/24", "11.0.0.0/24", "2001:db8::/48", "garbage", ""])
    assert [(r[1], r[2], r[3]) for r in rows] == [
        ("mobile", "JP", 64500), ("fixed", "", 64501), ("unknown", "", 0), ("unknown", "", 0),
        ("unknown", "", 0), ("unknown", "", 0)]


def test_formats():
    p = nw.parse("network,asn,as_name,country,access\n10.0.0.0/8,64500,A,jp,Mobile\n10.0.0.1/33,1,B,US,fixed\n"
                 "10.2.0.0/16,AS64501,C,,\n")
    assert p.format == "ccab" and p.skipped == 1
    assert p.networks == [nw.Network("10.0.0.0/8", 64500, "A", "JP", "mobile"),
                          nw.Network("10.2.0.0/16", 64501, "C", "", "unknown")]
    m = nw.parse("network,autonomous_system_number,autonomous_system_organization\n"
                 "1.0.0.0/24,13335,CLOUDFLARENET\n2001:200::/32,2500,WIDE\n", default_access="fixed")
    assert m.format == "maxmind-asn"
    assert m.networks[1] == nw.Network("2001:200::/32", 2500, "WIDE", "", "fixed")
    t = nw.parse("1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET\n1.0.1.0\t1.0.2.255\t0\tNone\tNot routed\n"
                 "1.0.4.0\t1.0.7.255\t38803\tAU\tGTELECOM\n1.0.16.0\t1.0.16.130\t2519\tJP\tVECTANT\n")
    assert t.format == "iptoasn" and t.skipped == 1
    assert [n.network for n in t.networks] == ["1.0.0.0/24", "1.0.4.0/22", "1.0.16.0/25", "1.0.16.128/31",
                                               "1.0.16.130/32"]
    with pytest.raises(nw.NetworksError):
        nw.parse("what is this\n")


def test_reload_while_queries_run(warehouse):
    """Queries in another thread during repeated reloads see one whole version, never a mix or
    an empty dictionary."""
    rng = random.Random(7)
    base = _random_networks(rng, 400, 200)
    versions = [[nw.Network(n.network, n.asn + 1_000_000 * v, n.as_name, n.country, n.access) for n in base]
                for v in (1, 2)]
    nw.load(warehouse, versions[0], "v1", "ccab")
    probes = [ipaddress.ip_network(n.network) for n in base]
    probes = [f"{p.network_address}/{p.prefixlen}" for p in probes]
    # literal probes: the reader thread passes no query parameters (the session's are shared)
    literal = "[" + ", ".join(f"'{p}'" for p in probes) + "]"
    sql = (f"SELECT groupUniqArray(intDiv({nw.asn_sql('p')}, 1000000)) AS v, countIf({nw.asn_sql('p')} = 0) "
           f"FROM (SELECT arrayJoin({literal}) AS p)")
    seen, errors = [], []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                v, zeros = warehouse.query(sql).rows[0]
                seen.append((tuple(sorted(v)), int(zeros)))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    try:
        i = 0
        while (i < 10 or len(seen) < 5) and not errors and i < 500:  # reload until queries overlapped
            nw.load(warehouse, versions[(i + 1) % 2], f"v{(i + 1) % 2 + 1}", "ccab")
            i += 1
    finally:
        stop.set()
        t.join(timeout=120)
    assert not errors, errors
    assert len(seen) >= 5
    assert all(zeros == 0 and v in ((1,), (2,)) for v, zeros in seen), seen


def test_segment_prefixes(warehouse):
    """A segment's networks from the real table: access, country and ASN segments and their union;
    a segment without networks, an unknown family, and another segment's network nested inside the
    segment's are refused (a policy of the outer prefix would treat it)."""
    nets = [nw.Network("10.201.0.0/16", 64501, "Mobile", "JP", "mobile"),
            nw.Network("2001:db8:201::/48", 64501, "Mobile", "JP", "mobile"),
            nw.Network("10.202.0.0/16", 64502, "Fixed", "JP", "fixed"),
            nw.Network("10.203.0.0/16", 64503, "Other mobile", "US", "mobile")]
    nw.load(warehouse, nets, "test", "ccab")
    assert nw.segment_prefixes(warehouse, ["access:mobile"]) == ["10.201.0.0/16", "10.203.0.0/16",
                                                                 "2001:db8:201::/48"]
    assert nw.segment_prefixes(warehouse, ["asn:64502"]) == ["10.202.0.0/16"]
    assert nw.segment_prefixes(warehouse, ["country:US", "asn:64502"]) == ["10.202.0.0/16", "10.203.0.0/16"]
    with pytest.raises(nw.NetworksError, match="no network"):
        nw.segment_prefixes(warehouse, ["access:satellite"])
    with pytest.raises(nw.NetworksError, match="names no networks"):
        nw.segment_prefixes(warehouse, ["access:unknown"])
    nw.load(warehouse, nets + [nw.Network("10.201.7.0/24", 64502, "Fixed", "JP", "fixed")], "test", "ccab")
    with pytest.raises(nw.NetworksError, match="10.201.7.0/24 .* lies inside 10.201.0.0/16"):
        nw.segment_prefixes(warehouse, ["access:mobile"])
