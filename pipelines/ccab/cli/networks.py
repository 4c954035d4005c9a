"""``ccab networks load|rank|status|lookup``: who the clients are (prefix metadata)."""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ccab.base.errors import UserError

EPILOG = """\
file formats (--format auto tells them apart by the first line):
  ccab         CSV header network,asn,as_name,country,access   (access: mobile|fixed|satellite|hosting|unknown)
  maxmind-asn  GeoLite2-ASN-Blocks CSV network,autonomous_system_number,autonomous_system_organization
  iptoasn      IPtoASN TSV range_start range_end as_number country_code as_description

A load replaces every network at once without downtime (queries running meanwhile see the old or
the new table, never a mix). Prefixes that no network contains are 'unknown', never dropped.
A network listed twice keeps its later row, one with host bits set (10.5.5.1/24) is loaded as its
network (10.5.5.0/24): both are reported. /0 rows are refused (every unknown client would become
one network). Without --force a load is refused when over 1% of the rows are bad (unparsable,
missing columns, /0), or when the file has over 10% fewer networks than the dictionary holds.
On a sharded warehouse (CCAB_CLICKHOUSE_SHARDS) load and rank write every shard: the same networks
and the same fleet-wide ASN ranking on each, so the shards' asn:* segments agree.

examples:
  ccab sim canary-tyo1 --out .ccab/sim/canary && ccab networks load .ccab/sim/canary/networks.csv
  ccab networks load ip2asn-v4.tsv --format iptoasn --default-access fixed
  ccab networks rank --top 20          # the ASNs with a segment of their own (the rest: asn:other)
  ccab networks lookup 100.64.3.0/24 2001:db8:1a2b::/48
  ccab networks status
"""


MAX_BAD_SHARE_PCT = "1%%"  # networks.MAX_BAD_SHARE (argparse help: %% is %); cli imports ccab lazily
MAX_SHRINK_PCT = "10%%"  # networks.MAX_SHRINK


def _load(args) -> int:
    from ccab.cohorts import networks

    try:
        parsed = networks.read_file(args.file, args.format, args.default_access)
    except networks.NetworksError as exc:
        raise UserError(str(exc)) from exc
    if not parsed.networks:
        raise UserError(f"no usable networks in {args.file} ({parsed.skipped} rows skipped: "
                        f"{'; '.join(parsed.skipped_examples) or 'empty file'}); check --format")
    refusal = parsed.refusal()
    if refusal and not args.force:
        raise UserError(f"not loaded: {args.file}: {refusal}")
    unique = len({n.network for n in parsed.networks})
    with _every_shard() as shards:
        before = networks.held(shards[0])
        shrink = networks.shrink_refusal(before, unique)
        if shrink and not args.force:
            raise UserError(f"not loaded: {args.file}: {shrink}")
        # each shard's rollups look prefixes up in its own dictionary: every shard gets the networks
        held = [networks.load(wh, parsed.networks, str(args.file), parsed.format, parsed.skipped) for wh in shards]
        ranked = networks.rank_asns_fleet(shards, args.top) if args.top else []
    where = f" into each of {len(shards)} shards" if len(shards) > 1 else ""
    print(f"loaded {held[0]:,} networks from {args.file} ({parsed.format}){where} (before: {before:,}); "
          f"{parsed.skipped} rows skipped" + (f" ({'; '.join(parsed.skipped_examples)})" if parsed.skipped else ""))
    if parsed.duplicates:
        print(f"warning: {parsed.duplicates:,} network(s) listed more than once, the later row kept "
              f"({'; '.join(parsed.duplicate_examples)})")
    if parsed.host_bits:
        print(f"warning: {parsed.host_bits:,} network(s) with host bits set, loaded as their network "
              f"({'; '.join(parsed.host_bits_examples)})")
    if args.force and (refusal or shrink):
        print(f"warning: loaded with --force: {'; '.join(r for r in (refusal, shrink) if r)}")
    if args.top:
        print(f"ranked {len(ranked)} ASN(s) by connections: {', '.join(str(a) for a, _ in ranked) or 'none (no data)'}")
    return 0


def _rank(args) -> int:
    from ccab.cohorts import networks

    try:
        with _every_shard() as shards:
            rows = networks.rank_asns_fleet(shards, args.top, args.days)
    except networks.NetworksError as exc:
        raise UserError(str(exc)) from exc
    for i, (asn, conns) in enumerate(rows, start=1):
        print(f"{i:3d}  AS{asn:<12d} {conns:>12,} connections")
    if not rows:
        print("no connection matched a known ASN: load networks first (ccab networks load FILE)")
    return 0


@contextmanager
def _every_shard() -> Iterator[list]:
    """The warehouse, or each shard of it (CCAB_CLICKHOUSE_SHARDS), with the schema in place."""
    from ccab.base.schema import migrate
    from ccab.base.warehouse import close_all, connect_shards

    shards = connect_shards()
    try:
        for wh in shards:
            migrate(wh, log=lambda _m: None)
        yield shards
    finally:
        close_all(shards)


def _status(args) -> int:
    from ccab.cohorts import networks

    with _every_shard() as shards:
        st = networks.status(shards[0], args.hours)  # same networks everywhere; prefix classes pool the fleet
    if args.json:
        print(json.dumps(st, indent=1, default=str))
        return 0
    d = st["dictionary"]
    if d:
        print(f"dictionary: {d['status']}, {int(d['networks']):,} networks, updated {d['updated']}"
              + (f", error: {d['error']}" if d["error"] else ""))
    else:
        print("dictionary: missing (run ccab db migrate)")
    last = st["last_load"]
    if last:
        print(f"last load:  {last['loaded_at']} UTC from {last['source']} ({last['format']}): "
              f"{int(last['networks']):,} networks ({int(last['ipv4']):,} IPv4, {int(last['ipv6']):,} IPv6), "
              f"{int(last['skipped']):,} rows skipped")
    else:
        print("last load:  none (ccab networks load FILE)")
    seen = st["recent_prefixes_by_access"]
    if seen:
        total = sum(v["prefixes"] for v in seen.values()) or 1
        print(f"client prefixes in the rollups' newest {args.hours} h, by access type:")
        for access, v in sorted(seen.items(), key=lambda kv: -kv[1]["prefixes"]):
            print(f"  {access:<10} {v['prefixes']:>9,} prefixes ({v['prefixes'] / total:6.1%})  {v['samples']:>12,} samples")
    else:
        print(f"client prefixes: none in the rollups' newest {args.hours} h")
    ranked = st["ranked_asns"]
    print(f"ranked ASNs (own segments): {', '.join(f'AS{a}' for a in ranked) if ranked else 'none (ccab networks rank)'}")
    return 0


def _lookup(args) -> int:
    import ipaddress

    from ccab.cohorts import networks

    for p in args.prefixes:
        try:
            ipaddress.ip_network(p.strip(), strict=False)
        except ValueError:
            raise UserError(f"{p!r} is not an IP address or prefix (e.g. 100.64.3.0/24, 2001:db8:1a2b::/48)") from None

    with _every_shard() as shards:
        wh = shards[0]  # every shard holds the same networks
        for prefix, access, country, asn, name in networks.lookup(wh, args.prefixes):
            print(f"{prefix:<24} {access:<10} {country or '-':<3} AS{asn:<11d} {name}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("networks", help="client prefix metadata: ASN, country, access type",
                       description="Load and inspect the prefix metadata that segments clients by network "
                                   "(access type, country, ASN) in the rollups, the judge and the views.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="networks_command", metavar="ACTION")
    q = s.add_parser("load", help="replace the networks with a file's (no downtime)",
                     description="Replace the networks with those of FILE (atomic swap, dictionary reload).",
                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("file", type=Path, help="CSV/TSV file of networks")
    q.add_argument("--format", default="auto", choices=("auto", "ccab", "maxmind-asn", "iptoasn"),
                   help="file layout (default: detect from the first line)")
    q.add_argument("--default-access", default="unknown",
                   choices=("mobile", "fixed", "satellite", "hosting", "unknown"),
                   help="access type of rows that do not say (MaxMind/IPtoASN files never do)")
    q.add_argument("--top", type=int, default=20, metavar="N",
                   help="then rank the top N ASNs by connections (0: keep the current ranking; default 20)")
    q.add_argument("--force", action="store_true",
                   help=f"load even when more than {MAX_BAD_SHARE_PCT} of the rows are bad, or when the file has "
                        f"over {MAX_SHRINK_PCT} fewer networks than the dictionary holds")
    q.set_defaults(func=_load)
    q = s.add_parser("rank", help="pick the top-N ASNs by connections (their own segments)",
                     description="Rank ASNs by connections in the raw rows' newest days; the top N get "
                                 "segments 'asn:<n>' in later rollups, the others 'asn:other'.")
    q.add_argument("--top", type=int, default=20, metavar="N", help="how many ASNs (default 20)")
    q.add_argument("--days", type=int, default=7, help="look-back in days of raw rows (default 7)")
    q.set_defaults(func=_rank)
    q = s.add_parser("status", help="dictionary state, last load, unknown prefixes",
                     description="The dictionary's state, the last load, and recent client prefixes by "
                                 "access type ('unknown': no network contains them).")
    q.add_argument("--hours", type=int, default=24, help="recent prefixes: the rollups' newest N hours (default 24)")
    q.add_argument("--json", action="store_true", help="print the status as JSON (for scripts)")
    q.set_defaults(func=_status)
    q = s.add_parser("lookup", help="look prefixes up", description="Print each prefix's access type, "
                     "country, ASN and AS name as the rollups see them.")
    q.add_argument("prefixes", nargs="+", help="peer prefixes, e.g. 100.64.3.0/24 2001:db8:1a2b::/48")
    q.set_defaults(func=_lookup)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
