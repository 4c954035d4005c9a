"""The wire records of ``contracts/CONTRACTS.md``, written down once.

Everything that needs to know a record's fields derives them from ``SCHEMAS``:

- ``validate(record)`` — the Python check (tests, the controller, debugging tools);
- ``landing_ddl()`` — the ClickHouse landing tables whose constraints are what the loader
  enforces on the hot path (ClickHouse parses and checks the JSON; Python never builds a
  per-row object there). ``sql/migrations/0002_landing.sql`` is this function's output,
  committed; a test keeps the two equal.
- ``canonical_json(record)`` — the bytes an ``assignment/1`` signature covers.

A field is *required* when the contract's type has no ``/null``: it must be present and
non-null. Optional fields may be absent or null. Unknown extra fields are allowed (the contract
says new optional fields may be added) and ignored by the loader.

Every record is also held to rules a JSON reader would otherwise bend (``CONTRACTS.md``,
"Rules"): integers within their field's width (``INT_RANGES``: nothing wraps), finite floats,
no duplicate member names (:func:`strict_loads`), and a ``peer_prefix`` that is a network
(``a.b.c.0/24`` or a /48), never a host address. ``constraints(schema)`` is the one list of
row rules, both as landing-table constraints and as the loader's per-row classification.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import numpy as np

Kind = Literal["int", "uint", "float", "string", "bool", "string_array"]


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    required: bool = True
    bits: int = 64  # integers: the width of the raw column that stores it (uint32 -> UInt32)
    # What the value means bounds it beyond its type: ``(lo, hi, lo_open)`` (a float in
    # ``(0, 1]`` is ``(0, 1, True)``), ``"time"`` for the plausible time window (TS_MS_MIN ..
    # the warehouse clock + TS_MAX_AHEAD_MS), None for no bound beyond the type.
    bounds: tuple[float, float, bool] | Literal["time"] | None = None

    @cached_property
    def int_range(self) -> tuple[int, int]:
        """The values an integer field may take: what its raw column holds exactly."""
        if self.kind == "uint":
            return 0, (1 << self.bits) - 1
        return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1

    @property
    def clickhouse_type(self) -> str:
        return {
            "int": "Int64",
            "uint": "UInt64",
            "float": "Float64",
            "string": "String",
            "bool": "Bool",
            "string_array": "Array(String)",
        }[self.kind]


@dataclass(frozen=True)
class Schema:
    name: str  # e.g. "tcp_sample/1"
    topic: str  # Kafka topic
    table: str  # ClickHouse raw table
    fields: tuple[Field, ...]
    # The record's natural key: two records with the same key are the same record (loaded twice:
    # a renamed or cut copy of a file, a file and Kafka); the raw table stores it once.
    key: tuple[str, ...] = ()
    #: later versions stored in the same table with these fields (their other members are not
    #: stored): assignment/2 adds ``policy`` to assignment/1
    also: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every schema name the table takes."""
        return (self.name,) + self.also

    @property
    def landing_table(self) -> str:
        return f"{self.table}_landing"

    @property
    def check_table(self) -> str:
        """Same structure and constraints as the landing table, no views: inserting into it
        validates a batch and writes nothing."""
        return f"{self.table}_check"

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


_INTERVAL_RE = re.compile(r"([\[(])(-?[0-9.e]+),(-?[0-9.e]+)\]")


def _f(spec: str) -> tuple[Field, ...]:
    """Parse compact lines ``name kind`` / ``name kind?`` (``?`` = may be null or absent). An
    integer kind may name its width (``uint32``: stored as UInt32; default 64). A third word
    bounds the value: an interval ``[lo,hi]`` / ``(lo,hi]`` or ``time`` (the plausible window)."""
    out = []
    for line in spec.strip().splitlines():
        name, kind, *rest = line.split()
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        m = re.fullmatch(r"(u?int)(8|16|32|64)", kind)
        bits = int(m.group(2)) if m else 64
        bounds: Any = None
        if rest == ["time"]:
            bounds = "time"
        elif rest:
            iv = _INTERVAL_RE.fullmatch(rest[0])
            if iv is None:
                raise ValueError(f"bad bound {rest[0]!r} for {name}")
            bounds = (float(iv.group(2)), float(iv.group(3)), iv.group(1) == "(")
        out.append(Field(name, m.group(1) if m else kind, required=not optional, bits=bits,  # type: ignore[arg-type]
                         bounds=bounds))
    return tuple(out)


TCP_SAMPLE = Schema(
    name="tcp_sample/1",
    topic="ccab.tcp.v1",
    table="tcp_samples",
    fields=_f(
        """
        schema string
        ts_ms int time
        pop string
        host string
        kernel string
        arm string
        rollout_id string
        cc string
        cc_version uint8?
        cc_impl string?
        sock_id string
        peer_prefix string
        local_port uint16
        state string
        rtt_us uint32
        rttvar_us uint32
        min_rtt_us uint32
        rto_ms uint32?
        mss uint32
        cwnd uint32
        ssthresh uint32?
        unacked uint32
        sacked uint32
        lost uint32
        retrans_out uint32
        total_retrans uint32
        reordering uint32?
        bytes_sent uint
        bytes_acked uint
        bytes_retrans uint
        bytes_received uint?
        segs_out uint
        segs_in uint
        data_segs_out uint
        data_segs_in uint?
        delivery_rate_bps uint
        pacing_rate_bps uint
        delivered uint
        app_limited bool
        busy_ms uint
        rwnd_limited_ms uint
        sndbuf_limited_ms uint
        notsent_bytes uint
        send_q_bytes uint
        recv_q_bytes uint
        snd_wnd uint
        rcv_space uint
        lastsnd_ms uint32?
        lastrcv_ms uint32?
        lastack_ms uint32?
        bbr_bw_bps uint?
        bbr_min_rtt_us uint32?
        bbr_pacing_gain float? [0,100]
        bbr_cwnd_gain float? [0,100]
        total_rto uint32?
        total_rto_recoveries uint32?
        total_rto_time_ms uint?
        sample_rate float (0,1]
        policy_generation uint?
        """
    ),
    key=("host", "sock_id", "ts_ms"),
)

TCP_CONN = Schema(
    name="tcp_conn/1",
    topic="ccab.tcp_conn.v1",
    table="tcp_conns",
    fields=_f(
        """
        schema string
        ts_ms int time
        pop string
        host string
        kernel string
        arm string
        rollout_id string
        cc string
        cc_version uint8?
        cc_source string
        cc_impl string?
        sock_id string
        peer_prefix string
        local_port uint16
        duration_ms uint?
        seen_duration_ms uint?
        rtt_us uint32?
        rttvar_us uint32?
        min_rtt_us uint32?
        rto_ms uint32?
        mss uint32?
        cwnd uint32?
        ssthresh uint32?
        unacked uint32?
        sacked uint32?
        lost uint32?
        retrans_out uint32?
        total_retrans uint32?
        reordering uint32?
        bytes_sent uint?
        bytes_acked uint?
        bytes_retrans uint?
        bytes_received uint?
        segs_out uint?
        segs_in uint?
        data_segs_out uint?
        data_segs_in uint?
        delivery_rate_bps uint?
        pacing_rate_bps uint?
        delivered uint?
        delivered_ce uint?
        app_limited bool?
        busy_ms uint?
        rwnd_limited_ms uint?
        sndbuf_limited_ms uint?
        notsent_bytes uint?
        snd_wnd uint?
        rcv_space uint?
        dsack_dups uint32?
        reord_seen uint32?
        rcv_ooopack uint32?
        total_rto uint32?
        total_rto_recoveries uint32?
        total_rto_time_ms uint?
        sample_rate float (0,1]
        policy_generation uint?
        """
    ),
    key=("host", "sock_id", "ts_ms"),
)

HTTP_REQUEST = Schema(
    name="http_request/1",
    topic="ccab.http.v1",
    table="http_requests",
    fields=_f(
        """
        schema string
        ts_ms int time
        pop string
        host string
        kernel string
        arm string
        rollout_id string
        cc string
        peer_prefix string?
        conn_serial uint
        conn_requests uint32
        method string
        status uint16
        bytes_sent uint
        body_bytes_sent uint
        request_time_ms float [0,86400000]
        tcpinfo_rtt_us uint32?
        tcpinfo_rttvar_us uint32?
        tcpinfo_snd_cwnd uint32?
        tcpinfo_rcv_space uint32?
        sample_rate float (0,1]
        ts_source string?
        """
    ),
    key=("host", "conn_serial", "conn_requests", "ts_ms"),
)

ASSIGNMENT = Schema(
    name="assignment/1",
    topic="ccab.assignments.v1",
    table="assignments",
    fields=_f(
        """
        schema string
        rollout_id string
        generation uint
        pop string
        host string
        arm string
        cc string
        qdisc string?
        issued_at_ms int
        signature string
        """
    ),
    key=("rollout_id", "host", "generation"),
    also=("assignment/2", "assignment/3"),  # + policy (CONTRACTS.md); the table keeps the host-level fields
)

AGENT_STATUS = Schema(
    name="agent_status/1",
    topic="ccab.agent_status.v1",
    table="agent_status",
    fields=_f(
        """
        schema string
        ts_ms int time
        pop string
        host string
        kernel string
        rollout_id string
        arm string
        generation uint
        state string
        cc_effective string
        cc_available string_array
        qdisc_effective string?
        reason string
        """
    ),
    key=("host", "ts_ms", "generation", "state"),
)

SCHEMAS: dict[str, Schema] = {s.name: s for s in (TCP_SAMPLE, TCP_CONN, HTTP_REQUEST, ASSIGNMENT, AGENT_STATUS)}
SCHEMA_BY_TOPIC: dict[str, Schema] = {s.topic: s for s in SCHEMAS.values()}
#: every schema name a table takes (``Schema.also`` included) -> its schema
SCHEMA_BY_NAME: dict[str, Schema] = {n: s for s in SCHEMAS.values() for n in s.names}

# The Kafka topic of each record (how they are created: ccab.kafka.topics.TOPICS).
TOPIC_TCP = TCP_SAMPLE.topic
TOPIC_TCP_CONN = TCP_CONN.topic
TOPIC_HTTP = HTTP_REQUEST.topic
TOPIC_ASSIGNMENTS = ASSIGNMENT.topic
TOPIC_AGENT_STATUS = AGENT_STATUS.topic

AGENT_STATES = ("applied", "refused", "error", "heartbeat")

#: assignment/2 (CONTRACTS.md): assignment/1's fields plus ``policy`` (null, or {segment, cc,
#: prefixes}): a per-connection socket policy for a client segment, enforced by the agent's BPF program
ASSIGNMENT_SEGMENT_SCHEMA = "assignment/2"
#: assignment/3 (CONTRACTS.md): assignment/2 whose policy names a signed prefix set ({segment, cc,
#: prefix_set: {name, version, sha256}}) instead of listing prefixes that would not fit the record
ASSIGNMENT_SET_SCHEMA = "assignment/3"
#: the agents' limit on a whole assignment record (the Kafka value), bytes
ASSIGNMENT_MAX_BYTES = 16 * 1024
#: prefix_set/1 (CONTRACTS.md): one signed chunk of a versioned prefix set, on this compacted topic
#: keyed name/version/chunk (not loaded into the warehouse: the assignments name it by digest)
PREFIX_SET_SCHEMA = "prefix_set/1"
TOPIC_PREFIX_SETS = "ccab.prefix_sets.v1"

# Audit columns the loader adds to every row: where the record came from.
AUDIT_FIELDS = (
    Field("_topic", "string"),
    Field("_partition", "uint"),
    Field("_offset", "uint"),
)


# The width of each integer kind as read (landing Int64/UInt64): a value outside is refused,
# never wrapped (ClickHouse's JSON reader wraps silently: 2^64+1 -> 1, so the loader reads digit
# runs this long in Python). A field stored narrower (``uint32``) has a landing constraint too.
INT_RANGES: dict[str, tuple[int, int]] = {"int": (-(1 << 63), (1 << 63) - 1), "uint": (0, (1 << 64) - 1)}
# The shortest digit run that may leave an integer range: 2^63 has 19 digits.
WIDE_INT_DIGITS = 19

# The plausible time window of a record's ``ts_ms`` (CONTRACTS.md, "Rules"): from 2000-01-01
# (before any collector of ours; a clock at 0 or a seconds/ms mix-up lands before it) to one day
# past the warehouse clock at load time (skewed clocks and time zones fit; the year 2200 or a
# microsecond timestamp do not). Outside it a record is a dead letter: ClickHouse's DateTime
# ends in 2106, so a later time would be clamped by every hourly rollup and overflow
# conversions elsewhere. Change the window here and regenerate (``ccab db gen-landing``).
TS_MS_MIN = 946_684_800_000  # 2000-01-01T00:00:00Z
TS_MAX_AHEAD_MS = 86_400_000  # 1 day
# How deep a record's JSON may nest (objects and arrays): contract records are flat (depth 1;
# agent_status's array: 2); extra fields may nest a little. Deeper is a dead letter before any
# JSON reader recurses into it (ClickHouse stops at 1000 with TOO_DEEP_RECURSION for the whole
# batch; Python's reader at its recursion limit).
MAX_JSON_DEPTH = 64

# peer_prefix as the collector writes it (collectors/anon): an IPv4 /24 "a.b.c.0/24" in
# dotted decimal without leading zeros, or an IPv6 /48 in RFC 5952 form (lower-case hex, the
# zero tail compressed: "2001:db8:85a3::/48", "2001:db8::/48", "::/48"). One regex, both
# engines (Python ``re`` and ClickHouse's RE2 read it alike).
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEXTET = "(0|[1-9a-f][0-9a-f]{0,3})"
_HEXTET_NZ = "([1-9a-f][0-9a-f]{0,3})"
PEER_PREFIX_RE = (f"^({_OCTET}\\.{_OCTET}\\.{_OCTET}\\.0/24"
                  f"|({_HEXTET}:{_HEXTET}:{_HEXTET_NZ}|{_HEXTET}:{_HEXTET_NZ}|{_HEXTET_NZ})?::/48)$")
_PEER_PREFIX = re.compile(PEER_PREFIX_RE)
_sql_regex = PEER_PREFIX_RE.replace("\\", "\\\\")  # inside a SQL string literal


def peer_prefix_ok(value: str) -> bool:
    return _PEER_PREFIX.fullmatch(value) is not None


def rollout_id_problem(rollout_id: Any) -> str | None:
    """Why ``rollout_id`` cannot name a rollout's directory (``$CCAB_DATA_DIR/rollouts/<id>/``,
    ``reports/<id>/``), or None. A rollout id is a single path component: 1–128 bytes of
    printable characters, no ``/`` or ``\\``, no whitespace, and not ``.`` or ``..``."""
    if not isinstance(rollout_id, str):
        return f"must be a string, got {type(rollout_id).__name__}"
    if not rollout_id:
        return "must be non-empty"
    if rollout_id in (".", ".."):
        return f"must not be {rollout_id!r} (it names a directory, not a rollout)"
    if len(rollout_id.encode("utf-8", "surrogatepass")) > 128:
        return "must be at most 128 bytes"
    bad = [c for c in rollout_id if c in "/\\" or c.isspace() or not c.isprintable()]
    if bad:
        return f"must be one path component without '/', '\\', spaces or control characters, got {rollout_id!r:.80}"
    return None


class DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateKey(f"duplicate key {k!r}")
            seen.add(k)
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_JSON_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKETS = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))


def json_depth(data: bytes) -> int:
    """How deep the objects and arrays of the JSON text ``data`` nest (outside strings), without
    parsing it: a bare object is 1. For text that is not JSON the count is still bounded by the
    brackets it holds."""
    if data.count(b"{") + data.count(b"[") <= 1:
        return data.count(b"{") + data.count(b"[")
    steps = np.frombuffer(_JSON_STRING_RE.sub(b"", data).translate(_BRACKETS), dtype=np.int8)
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def depth_problem(data: bytes) -> str | None:
    """The reason a record nests too deep for any reader (``MAX_JSON_DEPTH``), or None."""
    if data.count(b"{") + data.count(b"[") <= MAX_JSON_DEPTH:
        return None
    depth = json_depth(data)
    return f"bad JSON: nested {depth} levels deep (limit {MAX_JSON_DEPTH})" if depth > MAX_JSON_DEPTH else None


def strict_loads(data: bytes | str) -> Any:
    """Decode one JSON value strictly: UTF-8, nested at most ``MAX_JSON_DEPTH`` levels, no
    duplicate member names at any depth (readers disagree on which one wins), no NaN/Infinity,
    integers exact. Raises ``ValueError`` (``DuplicateKey`` for a repeated name) with a short
    reason."""
    raw = data if isinstance(data, (bytes, bytearray)) else data.encode("utf-8", "surrogatepass")
    deep = depth_problem(bytes(raw))
    if deep:
        raise ValueError(deep.removeprefix("bad JSON: "))
    if isinstance(data, (bytes, bytearray)):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except RecursionError:  # below MAX_JSON_DEPTH only if the limit was raised past the reader's
        raise ValueError("nested too deep for the JSON reader") from None


# --------------------------------------------------------------------------- Python validation


def _kind_ok(kind: Kind, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "uint"):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        lo, hi = INT_RANGES[kind]  # the field's own width is checked by validate()
        return lo <= value <= hi
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "string":
        return isinstance(value, str)
    if kind == "string_array":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    raise AssertionError(kind)


def validate(record: Any, schema: Schema | None = None) -> list[str]:
    """Return the reasons ``record`` breaks its contract (empty list = valid).

    Parameters
    ----------
    record : the decoded JSON value of one message.
    schema : the schema the record must have; by default the one its ``schema`` field names.
    """
    if not isinstance(record, dict):
        return [f"not a JSON object (got {type(record).__name__})"]
    name = record.get("schema")
    if schema is None:
        schema = SCHEMA_BY_NAME.get(name) if isinstance(name, str) else None
        if schema is None:
            return [f"unknown schema {name!r}"]
    elif name not in schema.names:
        return [f"schema {name!r} is not {schema.name!r}"]
    errors = []
    for f in schema.fields:
        value = record.get(f.name)
        if value is None:
            if f.required:
                errors.append(f"missing required field {f.name}")
            continue
        if not _kind_ok(f.kind, value):
            errors.append(f"field {f.name}: expected {f.kind}, got {type(value).__name__} {value!r:.40}")
        elif f.kind in INT_RANGES and not f.int_range[0] <= value <= f.int_range[1]:
            errors.append(f"field {f.name}: integer out of range {f.int_range[0]}..{f.int_range[1]}")
        elif f.bounds is not None and not _within(f, value):
            errors.append(bound_reason(f))
    if schema is AGENT_STATUS and record.get("state") not in AGENT_STATES and "state" in record:
        errors.append(f"field state: must be one of {', '.join(AGENT_STATES)}")
    prefix = record.get("peer_prefix")
    if isinstance(prefix, str) and schema in (TCP_SAMPLE, HTTP_REQUEST) and not peer_prefix_ok(prefix):
        errors.append(f"field peer_prefix: not a /24 or /48 network, got {prefix!r:.60}")
    return errors


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def _within(f: Field, value: float) -> bool:
    if f.bounds == "time":
        return TS_MS_MIN <= value <= time.time() * 1000 + TS_MAX_AHEAD_MS
    lo, hi, lo_open = f.bounds  # type: ignore[misc]
    return (lo < value if lo_open else lo <= value) and value <= hi


def bound_reason(f: Field) -> str:
    """The dead letter's reason for a value of ``f`` outside what it means."""
    if f.bounds == "time":
        return (f"field {f.name}: outside the plausible time window "
                f"(2000-01-01 .. the warehouse clock + {TS_MAX_AHEAD_MS // 3_600_000} h)")
    lo, hi, lo_open = f.bounds  # type: ignore[misc]
    return f"field {f.name}: out of range {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}]"


def _bound_sql(f: Field) -> str:
    if f.bounds == "time":
        return f"{f.name} BETWEEN {TS_MS_MIN} AND toUnixTimestamp(now()) * 1000 + {TS_MAX_AHEAD_MS}"
    lo, hi, lo_open = f.bounds  # type: ignore[misc]
    return f"{f.name} {'>' if lo_open else '>='} {_num(lo)} AND {f.name} <= {_num(hi)}"


def canonical_json(record: dict) -> bytes:
    """The bytes an ``assignment/1`` signature covers: the record without ``signature``,
    keys sorted, no spaces, UTF-8 (non-ASCII kept as is)."""
    body = {k: v for k, v in record.items() if k != "signature"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


# --------------------------------------------------------------------------- ClickHouse landing


def _landing_columns(schema: Schema) -> list[str]:
    cols = [f"    {f.name} Nullable({f.clickhouse_type})" if f.kind != "string_array"
            else f"    {f.name} {f.clickhouse_type}" for f in schema.fields]
    cols += [f"    {f.name} Nullable({f.clickhouse_type})" for f in AUDIT_FIELDS]
    return cols


def constraints(schema: Schema) -> list[tuple[str, str]]:
    """The row rules of a landing table as ``(name, ClickHouse boolean expression)``, in the
    order they are reported. Names are the reason the loader records: ``schema_mismatch``,
    ``required__<field>``, ``invalid__<field>``."""
    out = [("schema_mismatch", f"schema = '{schema.name}'" if not schema.also else
            "schema IN (" + ", ".join(f"'{n}'" for n in schema.names) + ")")]
    for f in schema.fields:
        if f.required and f.name != "schema" and f.kind != "string_array":
            out.append((f"required__{f.name}", f"isNotNull({f.name})"))
    for f in schema.fields:
        if f.kind in INT_RANGES and f.int_range != INT_RANGES[f.kind]:  # wider ones: the loader's digit check
            lo, hi = f.int_range
            out.append((f"range__{f.name}", f"isNull({f.name}) OR {f.name} BETWEEN {lo} AND {hi}"))
        if f.kind == "float":
            bound = f" AND {_bound_sql(f)}" if f.bounds is not None else ""
            out.append((f"invalid__{f.name}", f"isNull({f.name}) OR (isFinite({f.name}){bound})"))
        elif f.bounds is not None:
            out.append((f"bounds__{f.name}", f"isNull({f.name}) OR {_bound_sql(f)}"))
    if any(f.name == "peer_prefix" for f in schema.fields):
        out.append(("invalid__peer_prefix", f"isNull(peer_prefix) OR match(peer_prefix, '{_sql_regex}')"))
    if schema is AGENT_STATUS:
        states = ", ".join(f"'{s}'" for s in AGENT_STATES)
        out.append(("invalid__state", f"state IN ({states})"))
    for f in AUDIT_FIELDS:
        out.append((f"required__{f.name}", f"isNotNull({f.name})"))
    return out


def input_structure(schema: Schema) -> str:
    """The landing table's columns as a ``file()``/``format()`` structure string."""
    return ", ".join(c.strip() for c in _landing_columns(schema))


def _landing_constraints(schema: Schema) -> list[str]:
    return [f"    CONSTRAINT {name} CHECK {expr}" for name, expr in constraints(schema)]


def _mv_select(schema: Schema) -> str:
    exprs = []
    for f in (*schema.fields, *AUDIT_FIELDS):
        if f.name == "schema":
            continue
        if f.required and f.kind != "string_array":
            exprs.append(f"assumeNotNull({f.name}) AS {f.name}")
        else:
            exprs.append(f.name)
    return ",\n    ".join(exprs)


def _mv_dedupe(schema: Schema) -> str:
    """The view's filter that stores a record once per natural key (``Schema.key``): rows whose
    key the raw table already holds are dropped, and the block keeps one row per key. Inside
    the view, ``FROM <landing table>`` in a subquery reads the inserted block, so the lookup is
    bounded to the block's hosts and key range (and, through ``ts``, its partitions and hours)."""
    if not schema.key:
        return ""
    land, key = schema.landing_table, ", ".join(schema.key)
    kinds = {f.name: f.kind for f in schema.fields}
    where = []
    if "pop" in kinds and "pop" not in schema.key:
        where.append(f"pop IN (SELECT pop FROM {land})")
    for c in schema.key:
        if kinds[c] == "string":
            if c in ("host", "rollout_id"):  # few distinct values: a small set that prunes well
                where.append(f"{c} IN (SELECT {c} FROM {land})")
            continue
        lo, hi = f"(SELECT min({c}) FROM {land})", f"(SELECT max({c}) FROM {land})"
        if c == "ts_ms":
            where.append(f"ts BETWEEN fromUnixTimestamp64Milli({lo}) AND fromUnixTimestamp64Milli({hi})")
        where.append(f"{c} BETWEEN {lo} AND {hi}")
    return (f"\nWHERE ({key}) NOT IN (\n    SELECT {key} FROM {schema.table}\n    WHERE "
            + "\n      AND ".join(where) + f")\nLIMIT 1 BY {key}")


def landing_ddl() -> str:
    """DDL of the landing tables (Null engine + constraints), the no-write check tables, and the
    materialized views that move landed rows into the raw tables."""
    parts = [
        "-- GENERATED by `ccab db gen-landing` from pipelines/ccab/base/contracts.py. Do not edit by hand:\n"
        "-- change the contract there and regenerate. The loader inserts JSONEachRow into the\n"
        "-- *_landing tables; constraint violations name the rejected field (see contracts.py).\n"
    ]
    for s in SCHEMAS.values():
        body = ",\n".join(_landing_columns(s) + _landing_constraints(s))
        for table in (s.landing_table, s.check_table):
            parts.append(f"CREATE TABLE IF NOT EXISTS {table}\n(\n{body}\n)\nENGINE = Null;\n")
        parts.append(
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {s.landing_table}_mv TO {s.table} AS\n"
            f"SELECT\n    {_mv_select(s)}\nFROM {s.landing_table}{_mv_dedupe(s)};\n"
        )
    return "\n".join(parts)


_FLOAT_BOUNDED = {f.name: f for s in SCHEMAS.values() for f in s.fields if f.kind == "float" and f.bounds}


def reason_from_constraint(constraint: str) -> str:
    """Turn a landing-table constraint name into the reason a person reads in dead_letters."""
    if constraint == "schema_mismatch":
        return "schema mismatch"
    kind, _, field = constraint.partition("__")
    if kind == "required":
        return f"missing required field {field}"
    if kind == "invalid" and field in _FLOAT_BOUNDED:
        return f"invalid value for field {field}: not finite or {bound_reason(_FLOAT_BOUNDED[field]).split(': ', 1)[1]}"
    if kind == "invalid":
        return f"invalid value for field {field}"
    if kind == "range":
        return f"field {field}: integer out of range"
    if kind == "bounds":
        return bound_reason(next(f for s in SCHEMAS.values() for f in s.fields if f.name == field))
    return f"constraint {constraint} violated"
