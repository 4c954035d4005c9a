-- Client networks: who the clients are (docs/cohorts/networks.md). A user-supplied table of
-- networks (CIDR -> ASN, AS name, country, access type) behind an IP-trie dictionary, looked up on
-- `peer_prefix` (the client's /24 or /48: the raw IP never leaves the edge). Loaded by
-- `ccab networks load` (pipelines/ccab/cohorts/networks.py).
--
-- Refresh without downtime: a load fills `prefix_networks_next`, swaps it in with
-- `EXCHANGE TABLES prefix_networks AND prefix_networks_next` (atomic) and reloads the dictionary;
-- a dictionary reload builds the new trie beside the old one and switches when it is complete, so
-- a query running meanwhile sees either the old or the new table, never a half-loaded one.
-- Lookup semantics (IP_TRIE): the longest network containing the prefix's first address wins; a
-- prefix that no network contains has access 'unknown', country '' and ASN 0 (never dropped).
CREATE TABLE IF NOT EXISTS prefix_networks
(
    network   String,                          -- CIDR, IPv4 ('203.0.113.0/24') or IPv6 ('2001:db8::/32')
    asn       UInt32,                          -- 0 = not known
    as_name   String,
    country   LowCardinality(String),          -- ISO 3166 alpha-2, '' = not known
    access    LowCardinality(String)           -- mobile|fixed|satellite|hosting|unknown
)
ENGINE = MergeTree
ORDER BY network;

CREATE TABLE IF NOT EXISTS prefix_networks_next AS prefix_networks;

CREATE DICTIONARY IF NOT EXISTS prefix_networks_dict
(
    network   String,
    asn       UInt32 DEFAULT 0,
    as_name   String DEFAULT '',
    country   String DEFAULT '',
    access    String DEFAULT 'unknown'
)
PRIMARY KEY network
SOURCE(CLICKHOUSE(TABLE 'prefix_networks'))
LAYOUT(IP_TRIE)
LIFETIME(0);

-- ASNs that get a segment of their own ('asn:<n>'); every other known ASN is 'asn:other'.
-- Written by `ccab networks rank` (top N by connections over recent days), swapped in whole.
CREATE TABLE IF NOT EXISTS network_asn_rank
(
    asn          UInt32,
    rank         UInt32,
    connections  UInt64
)
ENGINE = MergeTree
ORDER BY rank;

CREATE TABLE IF NOT EXISTS network_asn_rank_next AS network_asn_rank;

-- One row per load: what was read, kept and skipped (`ccab networks status`).
CREATE TABLE IF NOT EXISTS network_loads
(
    loaded_at   DateTime('UTC'),
    source      String,
    format      LowCardinality(String),
    networks    UInt64,
    ipv4        UInt64,
    ipv6        UInt64,
    skipped     UInt64
)
ENGINE = MergeTree
ORDER BY loaded_at;
