"""Client networks: prefix metadata (CIDR -> ASN, AS name, country, access type) behind an
IP-trie dictionary, looked up on ``peer_prefix`` (docs/cohorts/networks.md).

* :func:`parse` reads a file in one of :data:`FORMATS` (ccab CSV, MaxMind GeoLite2-ASN-style CSV,
  IPtoASN-style TSV ranges) into canonical :class:`Network` rows; bad rows are counted, not fatal.
* :func:`load` swaps the networks in without downtime: fill ``prefix_networks_next``, ``EXCHANGE
  TABLES`` (atomic), ``SYSTEM RELOAD DICTIONARY`` (the new trie is built beside the old one).
* :func:`rank_asns` picks the top-N ASNs by connections: they get segments of their own, every
  other known ASN is ``asn:other``; :func:`rank_asns_fleet` the same over every shard of a
  sharded warehouse, written to each (``ccab networks load|rank`` also load every shard).
* :data:`ACCESS_SQL` & co. are the SQL expressions every query uses to look a prefix up: one
  definition, so the rollup, the views and the dashboards agree. A prefix no network contains is
  ``unknown`` (counted in :func:`status`), never dropped.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ccab.base.warehouse import Warehouse

ACCESS_TYPES: tuple[str, ...] = ("mobile", "fixed", "satellite", "hosting", "unknown")
FORMATS: tuple[str, ...] = ("auto", "ccab", "maxmind-asn", "iptoasn")
DICT = "prefix_networks_dict"
TABLE = "prefix_networks"

#: the dictionary key of a peer_prefix column: the prefix's first address as IPv6 (IPv4 mapped).
#: Unparsable text becomes '::' (matched by no network unless one loads ::/0).
def key_sql(col: str = "peer_prefix") -> str:
    return f"toIPv6OrDefault(splitByChar('/', {col})[1])"


def access_sql(col: str = "peer_prefix") -> str:
    """SQL: the prefix's access type ('unknown' when no network contains it)."""
    return f"dictGetOrDefault('{DICT}', 'access', {key_sql(col)}, 'unknown')"


def country_sql(col: str = "peer_prefix") -> str:
    """SQL: the prefix's country code, '' when unknown."""
    return f"dictGetOrDefault('{DICT}', 'country', {key_sql(col)}, '')"


def asn_sql(col: str = "peer_prefix") -> str:
    """SQL: the prefix's ASN, 0 when unknown."""
    return f"dictGetOrDefault('{DICT}', 'asn', {key_sql(col)}, toUInt32(0))"


def segments_sql(col: str = "peer_prefix") -> str:
    """SQL: the tuple (access segment, country segment, ASN segment) of a prefix."""
    return (f"tuple(concat('access:', {access_sql(col)}), "
            f"concat('country:', if({country_sql(col)} = '', 'unknown', {country_sql(col)})), "
            f"multiIf({asn_sql(col)} = 0, 'asn:unknown', "
            f"{asn_sql(col)} IN (SELECT asn FROM network_asn_rank), concat('asn:', toString({asn_sql(col)})), "
            f"'asn:other'))")


class NetworksError(ValueError):
    """A networks file or command is unusable; the message says what to do."""


@dataclass(frozen=True)
class Network:
    network: str  # canonical CIDR
    asn: int
    as_name: str
    country: str
    access: str


#: a file whose bad rows (unparsable, missing columns, /0) are more than this share of its rows is
#: refused unless --force: a broken export must not replace the networks
MAX_BAD_SHARE = 0.01
#: a load that would leave the dictionary with fewer than (1 - this) of the networks it holds is
#: refused unless --force: a truncated file must not empty the segments
MAX_SHRINK = 0.10


@dataclass
class Parsed:
    networks: list[Network] = field(default_factory=list)
    skipped: int = 0  # rows not loaded: bad ones and iptoasn's "not routed"
    skipped_examples: list[str] = field(default_factory=list)
    format: str = ""
    rows: int = 0  # data rows read (not the header, blank or comment lines)
    bad: int = 0  # rows skipped because they are wrong (not iptoasn's "not routed" rows)
    duplicates: int = 0  # networks listed again (the later row wins)
    duplicate_examples: list[str] = field(default_factory=list)
    host_bits: int = 0  # networks written with host bits set (10.5.5.1/24: loaded as 10.5.5.0/24)
    host_bits_examples: list[str] = field(default_factory=list)
    _seen: dict[str, int] = field(default_factory=dict, repr=False)

    def skip(self, line_no: int, why: str, *, bad: bool = True) -> None:
        self.skipped += 1
        self.bad += bad
        if len(self.skipped_examples) < 5:
            self.skipped_examples.append(f"line {line_no}: {why}")

    def add(self, line_no: int, net: Network, written: str | None = None) -> None:
        """Keep ``net`` from line ``line_no``; ``written`` is the CIDR as the file wrote it."""
        if written is not None and written.strip() != net.network and _has_host_bits(written):
            self.host_bits += 1
            if len(self.host_bits_examples) < 5:
                self.host_bits_examples.append(f"line {line_no}: {written.strip()} read as {net.network}")
        first = self._seen.get(net.network)
        if first is not None:
            self.duplicates += 1
            if len(self.duplicate_examples) < 5:
                self.duplicate_examples.append(f"{net.network} on lines {first} and {line_no}")
        else:
            self._seen[net.network] = line_no
        self.networks.append(net)

    @property
    def bad_share(self) -> float:
        return self.bad / self.rows if self.rows else 0.0

    def refusal(self) -> str | None:
        """Why this file must not be loaded without --force, or None."""
        if self.bad and self.bad_share > MAX_BAD_SHARE:
            return (f"{self.bad:,} of {self.rows:,} rows are bad ({self.bad_share:.1%}, more than "
                    f"{MAX_BAD_SHARE:.0%}: {'; '.join(self.skipped_examples)}); fix the file or check --format, "
                    f"or load the good rows anyway with --force")
        return None


def _asn(text: str) -> int:
    t = (text or "").strip().upper()
    if t.startswith("AS"):
        t = t[2:]
    if not t:
        return 0
    v = int(t)
    if not 0 <= v < 2**32:
        raise ValueError(f"ASN {text!r} out of range")
    return v


def _country(text: str) -> str:
    t = (text or "").strip().upper()
    if t in ("", "NONE", "ZZ", "-", "--"):
        return ""
    if len(t) != 2 or not t.isalpha():
        raise ValueError(f"country {text!r} is not an ISO 3166 alpha-2 code")
    return t


def _access(text: str) -> str:
    t = (text or "").strip().lower() or "unknown"
    if t not in ACCESS_TYPES:
        raise ValueError(f"access type {text!r} is not one of {'|'.join(ACCESS_TYPES)}")
    return t


def _cidr(text: str) -> str:
    net = ipaddress.ip_network(text.strip(), strict=False)
    if net.prefixlen == 0:
        raise ValueError(f"{text.strip()} is every address: a /0 would make every unknown client one network")
    return str(net)


def _has_host_bits(text: str) -> bool:
    try:
        ipaddress.ip_network(text.strip(), strict=True)
    except ValueError:
        return True
    return False


def detect_format(first_line: str) -> str:
    """The format of a file from its first line."""
    head = first_line.strip().lower()
    if head.startswith("network,") and "autonomous_system_number" in head:
        return "maxmind-asn"
    if head.startswith("network,") or head.startswith("cidr,"):
        return "ccab"
    if "\t" in first_line:
        return "iptoasn"
    raise NetworksError("cannot tell the file's format from its first line; pass --format "
                        f"({'|'.join(FORMATS[1:])})")


def parse(text: str, fmt: str = "auto", default_access: str = "unknown") -> Parsed:
    """Networks from the text of a file.

    Formats
    -------
    ccab : CSV with a header ``network,asn,as_name,country,access`` (only ``network`` required).
    maxmind-asn : MaxMind GeoLite2-ASN-Blocks CSV ``network,autonomous_system_number,
        autonomous_system_organization`` (no country or access: ``default_access``).
    iptoasn : IPtoASN TSV ``range_start range_end as_number country_code as_description``; each
        range becomes the fewest CIDRs that cover it exactly; ASN 0 rows ("Not routed") skipped.
    """
    if fmt not in FORMATS:
        raise NetworksError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    default_access = _access(default_access)
    lines = text.splitlines()
    if not lines:
        return Parsed(format=fmt)
    if fmt == "auto":
        fmt = detect_format(lines[0])
    out = Parsed(format=fmt)
    if fmt == "iptoasn":
        for i, line in enumerate(lines, start=1):
            if not line.strip() or line.startswith("#"):
                continue
            out.rows += 1
            parts = line.rstrip("\n").split("\t")
            try:
                if len(parts) < 5:
                    raise ValueError(f"{len(parts)} fields, want 5")
                asn = _asn(parts[2])
                if asn == 0:
                    out.skip(i, "not routed (ASN 0)", bad=False)
                    continue
                lo, hi = ipaddress.ip_address(parts[0].strip()), ipaddress.ip_address(parts[1].strip())
                if lo > hi:
                    raise ValueError(f"range start {lo} is after its end {hi}")
                cc = _country(parts[3])
                nets = list(ipaddress.summarize_address_range(lo, hi))
                if any(n.prefixlen == 0 for n in nets):
                    raise ValueError(f"{lo}-{hi} is every address: a /0 would make every unknown client one network")
                for net in nets:
                    out.add(i, Network(str(net), asn, parts[4].strip(), cc, default_access))
            except ValueError as exc:
                out.skip(i, str(exc))
        return out
    reader = csv.DictReader(io.StringIO(text))
    width = len(reader.fieldnames or [])
    for row in reader:
        i = reader.line_num
        out.rows += 1
        try:
            if None in row.values() or None in row:
                n = width - sum(v is None for v in row.values()) + len(row.get(None) or [])
                raise ValueError(f"{n} columns, the header has {width}")
            if fmt == "maxmind-asn":
                net = row["network"]
                out.add(i, Network(_cidr(net), _asn(row.get("autonomous_system_number", "")),
                                   (row.get("autonomous_system_organization") or "").strip(), "", default_access), net)
            else:
                net = row.get("network") or row.get("cidr") or ""
                out.add(i, Network(_cidr(net), _asn(row.get("asn", "")), (row.get("as_name") or "").strip(),
                                   _country(row.get("country", "")), _access(row.get("access") or default_access)),
                        net)
        except (ValueError, TypeError, KeyError) as exc:
            out.skip(i, str(exc))
    return out


def read_file(path: Path, fmt: str = "auto", default_access: str = "unknown") -> Parsed:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise NetworksError(f"cannot read {path}: {exc.strerror}") from exc
    return parse(text, fmt, default_access)


def write_csv(networks: Iterable[Network], path: Path) -> None:
    """A ccab-format CSV (what the simulator writes for its prefixes)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["network", "asn", "as_name", "country", "access"])
        for n in networks:
            w.writerow([n.network, n.asn, n.as_name, n.country, n.access])


def held(wh: Warehouse) -> int:
    """How many networks are loaded now."""
    return int(wh.query(f"SELECT count() FROM {TABLE}").scalar() or 0)


def shrink_refusal(before: int, after: int) -> str | None:
    """Why replacing ``before`` networks by ``after`` must not happen without --force, or None."""
    if before and after < before * (1 - MAX_SHRINK):
        return (f"the file has {after:,} networks and would replace {before:,} (-{1 - after / before:.1%}, more "
                f"than {MAX_SHRINK:.0%} fewer): a truncated or wrong file? Load it anyway with --force")
    return None


def load(wh: Warehouse, networks: list[Network], source: str, fmt: str, skipped: int = 0) -> int:
    """Replace the networks without downtime; returns how many the dictionary now holds.

    Duplicated CIDRs keep their last row (a file's later line wins; :class:`Parsed` counts them)."""
    unique = {n.network: n for n in networks}
    wh.command("TRUNCATE TABLE prefix_networks_next")
    if unique:
        data = b"\n".join(json.dumps(n.__dict__).encode() for n in unique.values())
        wh.insert_raw("prefix_networks_next", data)
    wh.command("EXCHANGE TABLES prefix_networks AND prefix_networks_next")
    wh.command(f"SYSTEM RELOAD DICTIONARY {DICT}")
    wh.command("TRUNCATE TABLE prefix_networks_next")
    v6 = sum(1 for k in unique if ":" in k)
    wh.command("INSERT INTO network_loads (loaded_at, source, format, networks, ipv4, ipv6, skipped) "
               "SELECT now(), {s:String}, {f:String}, {n:UInt64}, {v4:UInt64}, {v6:UInt64}, {sk:UInt64}",
               params={"s": source, "f": fmt, "n": len(unique), "v4": len(unique) - v6, "v6": v6, "sk": skipped})
    return int(wh.query(f"SELECT element_count FROM system.dictionaries WHERE database = currentDatabase() "
                        f"AND name = '{DICT}'").scalar() or 0)


def rank_asns(wh: Warehouse, top: int = 20, days: int = 7) -> list[tuple[int, int]]:
    """Top ``top`` ASNs by connections over the raw rows' newest ``days`` days -> ``network_asn_rank``.

    Connections are counted once each (close records and polled sockets, by host x sock_id),
    pooled over the arms: the ranking must not depend on the treatment."""
    return rank_asns_fleet([wh], top, days)


def rank_asns_fleet(shards: Sequence[Warehouse], top: int = 20, days: int = 7) -> list[tuple[int, int]]:
    """:func:`rank_asns` over every shard of a sharded warehouse: the connections of each shard
    (a host's rows are all on one shard, so none is counted twice) summed per ASN over the fleet's
    newest ``days`` days, and the same ranking written to every shard — the ``asn:*`` segments of
    each shard's rollups must name the same ASNs, or their union is not the fleet's rollup."""
    if top < 1:
        raise NetworksError(f"--top must be >= 1, got {top}")
    newest = max((_newest_ts(wh) for wh in shards), default=None)
    totals: dict[int, int] = {}
    if newest is not None:
        for wh in shards:
            for asn, conns in _asn_connections(wh, newest, days):
                totals[asn] = totals.get(asn, 0) + conns
    rows = sorted(totals.items(), key=lambda ac: (-ac[1], ac[0]))[:top]
    for wh in shards:
        _write_rank(wh, rows)
    return rows


def _newest_ts(wh: Warehouse) -> int | None:
    """The newest raw tcp row's time (unix seconds), or None without rows."""
    n, newest = wh.query("SELECT count(), toUnixTimestamp(max(ts)) FROM "
                         "(SELECT ts FROM tcp_samples UNION ALL SELECT ts FROM tcp_conns)").rows[0]
    return int(newest) if int(n) else None


def _asn_connections(wh: Warehouse, newest_unix_s: int, days: int) -> list[tuple[int, int]]:
    """(ASN, connections) of this warehouse's raw rows in the ``days`` days up to ``newest_unix_s``."""
    sql = f"""
        WITH conns AS (
            SELECT host, sock_id, any(peer_prefix) AS peer_prefix FROM (
                SELECT host, sock_id, peer_prefix FROM tcp_samples
                WHERE ts >= toDateTime({{newest:UInt32}}, 'UTC') - INTERVAL {int(days)} DAY
                UNION ALL
                SELECT host, sock_id, peer_prefix FROM tcp_conns
                WHERE ts >= toDateTime({{newest:UInt32}}, 'UTC') - INTERVAL {int(days)} DAY)
            GROUP BY host, sock_id)
        SELECT {asn_sql()} AS a, count() AS c FROM conns WHERE a != 0 GROUP BY a"""
    return [(int(a), int(c)) for a, c in wh.query(sql, params={"newest": newest_unix_s}).rows]


def _write_rank(wh: Warehouse, rows: list[tuple[int, int]]) -> None:
    wh.command("TRUNCATE TABLE network_asn_rank_next")
    if rows:
        data = b"\n".join(json.dumps({"asn": a, "rank": i, "connections": c}).encode()
                          for i, (a, c) in enumerate(rows, start=1))
        wh.insert_raw("network_asn_rank_next", data)
    wh.command("EXCHANGE TABLES network_asn_rank AND network_asn_rank_next")
    wh.command("TRUNCATE TABLE network_asn_rank_next")


def lookup(wh: Warehouse, prefixes: list[str]) -> list[tuple[str, str, str, int, str]]:
    """(prefix, access, country, asn, as_name) of each prefix, through the dictionary."""
    res = wh.query(f"""SELECT p, {access_sql('p')}, {country_sql('p')}, {asn_sql('p')},
                              dictGetOrDefault('{DICT}', 'as_name', {key_sql('p')}, '')
                       FROM (SELECT arrayJoin({{ps:Array(String)}}) AS p)""", params={"ps": list(prefixes)})
    return [(r[0], r[1], r[2], int(r[3]), r[4]) for r in res.rows]


def status(wh: Warehouse, hours: int = 24) -> dict:
    """The dictionary's state, the last load, and how many recent client prefixes are unknown."""
    wh.query(f"SELECT dictHas('{DICT}', toIPv6('::'))")  # a new session loads dictionaries lazily
    d = wh.query(f"SELECT status, element_count, toString(last_successful_update_time), last_exception "
                 f"FROM system.dictionaries WHERE database = currentDatabase() AND name = '{DICT}'").rows
    last = wh.query("SELECT toString(loaded_at), source, format, networks, ipv4, ipv6, skipped FROM network_loads "
                    "ORDER BY loaded_at DESC LIMIT 1").rows
    seen = wh.query(f"""SELECT {access_sql()} AS access, uniqExact(peer_prefix), sum(samples)
                        FROM cohort_prefix_hourly
                        WHERE hour >= (SELECT max(hour) FROM cohort_prefix_hourly) - INTERVAL {int(hours)} HOUR
                        GROUP BY access ORDER BY access""").rows
    out = {
        "dictionary": dict(zip(["status", "networks", "updated", "error"], d[0])) if d else None,
        "last_load": dict(zip(["loaded_at", "source", "format", "networks", "ipv4", "ipv6", "skipped"], last[0]))
        if last else None,
        "recent_prefixes_by_access": {a: {"prefixes": int(p), "samples": int(s)} for a, p, s in seen},
    }
    top = wh.query("SELECT asn, rank, connections FROM network_asn_rank ORDER BY rank").rows
    out["ranked_asns"] = [int(r[0]) for r in top]
    return out


def _segment_condition(segment: str) -> tuple[str, dict]:
    """SQL condition on prefix_networks rows for one ``access:``/``country:``/``asn:`` segment."""
    family, _, value = segment.partition(":")
    if family == "access" and value in ACCESS_TYPES and value != "unknown":
        return "access = {v:String}", {"v": value}
    if family == "country" and len(value) == 2 and value.isalpha() and value.isupper():
        return "country = {v:String}", {"v": value}
    if family == "asn" and value.isdigit() and int(value) > 0:
        return "asn = {v:UInt32}", {"v": int(value)}
    raise NetworksError(f"segment {segment!r} names no networks: want access:<{'|'.join(ACCESS_TYPES[:-1])}>, "
                        f"country:<ISO code, e.g. JP> or asn:<number>")


def segment_prefixes(wh: Warehouse, segments: Sequence[str]) -> list[str]:
    """The networks (CIDRs, sorted) of the union of ``segments``: what a segment rollout's socket
    policy matches (rollout/sockpolicy: the longest matching prefix decides).

    Refused (:class:`NetworksError`): a segment with no network, and a network of another segment
    nested inside one of the segment's networks — the dictionary gives that hole its own segment,
    but a policy whose prefixes all carry the treatment would treat it."""
    conds, params = [], {}
    for i, seg in enumerate(segments):
        cond, p = _segment_condition(seg)
        conds.append(cond.replace("{v:", f"{{v{i}:"))
        params[f"v{i}"] = p["v"]
        n = wh.query(f"SELECT count() FROM {TABLE} WHERE {cond}", params=p).scalar()
        if not n:
            raise NetworksError(f"segment {seg!r}: no network in {TABLE} (load them with `ccab networks load`)")
    rows = wh.query(f"SELECT network, ({' OR '.join(conds)}) AS inside FROM {TABLE}", params=params).rows
    chosen = [ipaddress.ip_network(r[0]) for r in rows if r[1]]
    others = [ipaddress.ip_network(r[0]) for r in rows if not r[1]]
    # a hole: another segment's network strictly inside a chosen one (each network's shorter
    # supernets looked up in a set: linear in the networks, not chosen x others)
    def key(n, bits: int) -> tuple[int, int, int]:
        return n.version, int(n.network_address) >> (n.max_prefixlen - bits), bits
    inside = {key(c, c.prefixlen): c for c in chosen}
    for o in others:
        for bits in range(o.prefixlen - 1, -1, -1):
            c = inside.get(key(o, bits))
            if c is not None:
                raise NetworksError(f"network {o} (not in {', '.join(segments)}) lies inside {c} (in it): "
                                    f"a socket policy of {c} would treat it too")
    return sorted((str(c) for c in chosen), key=lambda s: (":" in s, ipaddress.ip_network(s)))
