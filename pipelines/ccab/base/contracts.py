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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["int", "uint", "float", "string", "bool", "string_array"]


@dataclass(frozen=True)
class Field:
    name: str
    kind: Kind
    required: bool = True

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


def _f(spec: str) -> tuple[Field, ...]:
    """Parse compact lines ``name kind`` / ``name kind?`` (``?`` = may be null or absent)."""
    out = []
    for line in spec.strip().splitlines():
        name, kind = line.split()
        optional = kind.endswith("?")
        out.append(Field(name, kind.rstrip("?"), required=not optional))  # type: ignore[arg-type]
    return tuple(out)


TCP_SAMPLE = Schema(
    name="tcp_sample/1",
    topic="ccab.tcp.v1",
    table="tcp_samples",
    fields=_f(
        """
        schema string
        ts_ms int
        pop string
        host string
        kernel string
        arm string
        rollout_id string
        cc string
        cc_version int?
        sock_id string
        peer_prefix string
        local_port uint
        state string
        rtt_us uint
        rttvar_us uint
        min_rtt_us uint
        rto_ms uint?
        mss uint
        cwnd uint
        ssthresh uint?
        unacked uint
        sacked uint
        lost uint
        retrans_out uint
        total_retrans uint
        reordering uint?
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
        lastsnd_ms uint?
        lastrcv_ms uint?
        lastack_ms uint?
        bbr_bw_bps uint?
        bbr_min_rtt_us uint?
        bbr_pacing_gain float?
        bbr_cwnd_gain float?
        total_rto uint?
        total_rto_recoveries uint?
        total_rto_time_ms uint?
        sample_rate float
        """
    ),
)

TCP_CONN = Schema(
    name="tcp_conn/1",
    topic="ccab.tcp_conn.v1",
    table="tcp_conns",
    fields=_f(
        """
        schema string
        ts_ms int
        pop string
        host string
        kernel string
        arm string
        rollout_id string
        cc string
        cc_version int?
        cc_source string
        sock_id string
        peer_prefix string
        local_port uint
        duration_ms uint?
        seen_duration_ms uint?
        rtt_us uint?
        rttvar_us uint?
        min_rtt_us uint?
        rto_ms uint?
        mss uint?
        cwnd uint?
        ssthresh uint?
        unacked uint?
        sacked uint?
        lost uint?
        retrans_out uint?
        total_retrans uint?
        reordering uint?
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
        dsack_dups uint?
        reord_seen uint?
        rcv_ooopack uint?
        total_rto uint?
        total_rto_recoveries uint?
        total_rto_time_ms uint?
        sample_rate float
        """
    ),
)

HTTP_REQUEST = Schema(
    name="http_request/1",
    topic="ccab.http.v1",
    table="http_requests",
    fields=_f(
        """
        schema string
        ts_ms int
        pop string
        host string
        kernel string
        arm string
        rollout_id string
        cc string
        peer_prefix string?
        conn_serial uint
        conn_requests uint
        method string
        status uint
        bytes_sent uint
        body_bytes_sent uint
        request_time_ms float
        tcpinfo_rtt_us uint?
        tcpinfo_rttvar_us uint?
        tcpinfo_snd_cwnd uint?
        tcpinfo_rcv_space uint?
        sample_rate float
        ts_source string?
        """
    ),
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
)

AGENT_STATUS = Schema(
    name="agent_status/1",
    topic="ccab.agent_status.v1",
    table="agent_status",
    fields=_f(
        """
        schema string
        ts_ms int
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
)

SCHEMAS: dict[str, Schema] = {s.name: s for s in (TCP_SAMPLE, TCP_CONN, HTTP_REQUEST, ASSIGNMENT, AGENT_STATUS)}
SCHEMA_BY_TOPIC: dict[str, Schema] = {s.topic: s for s in SCHEMAS.values()}

# The Kafka topic of each record (how they are created: ccab.kafka.topics.TOPICS).
TOPIC_TCP = TCP_SAMPLE.topic
TOPIC_TCP_CONN = TCP_CONN.topic
TOPIC_HTTP = HTTP_REQUEST.topic
TOPIC_ASSIGNMENTS = ASSIGNMENT.topic
TOPIC_AGENT_STATUS = AGENT_STATUS.topic

AGENT_STATES = ("applied", "refused", "error", "heartbeat")

# Audit columns the loader adds to every row: where the record came from.
AUDIT_FIELDS = (
    Field("_topic", "string"),
    Field("_partition", "uint"),
    Field("_offset", "uint"),
)


# --------------------------------------------------------------------------- Python validation


def _kind_ok(kind: Kind, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "uint"):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return kind == "int" or value >= 0
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
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
        schema = SCHEMAS.get(name) if isinstance(name, str) else None
        if schema is None:
            return [f"unknown schema {name!r}"]
    elif name != schema.name:
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
    if schema is AGENT_STATUS and record.get("state") not in AGENT_STATES and "state" in record:
        errors.append(f"field state: must be one of {', '.join(AGENT_STATES)}")
    return errors


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


def _landing_constraints(schema: Schema) -> list[str]:
    """Constraint names are the reason the loader records: ``schema_mismatch``,
    ``required__<field>``, ``invalid__<field>``."""
    out = [f"    CONSTRAINT schema_mismatch CHECK schema = '{schema.name}'"]
    for f in schema.fields:
        if f.required and f.name != "schema" and f.kind != "string_array":
            out.append(f"    CONSTRAINT required__{f.name} CHECK isNotNull({f.name})")
    if schema is AGENT_STATUS:
        states = ", ".join(f"'{s}'" for s in AGENT_STATES)
        out.append(f"    CONSTRAINT invalid__state CHECK state IN ({states})")
    for f in AUDIT_FIELDS:
        out.append(f"    CONSTRAINT required__{f.name} CHECK isNotNull({f.name})")
    return out


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
            f"SELECT\n    {_mv_select(s)}\nFROM {s.landing_table};\n"
        )
    return "\n".join(parts)


def reason_from_constraint(constraint: str) -> str:
    """Turn a landing-table constraint name into the reason a person reads in dead_letters."""
    if constraint == "schema_mismatch":
        return "schema mismatch"
    kind, _, field = constraint.partition("__")
    if kind == "required":
        return f"missing required field {field}"
    if kind == "invalid":
        return f"invalid value for field {field}"
    return f"constraint {constraint} violated"
