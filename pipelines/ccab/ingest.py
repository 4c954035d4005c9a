"""Validate and insert one batch of raw JSON records: the core shared by the Kafka loader and
``ccab load``.

How a batch goes in (no per-row Python objects on the hot path):

1. Cheap byte checks per record: size limit, "looks like a JSON object". The record's source
   position (``_topic``, ``_partition``, ``_offset``) is spliced into the object's text.
2. The whole batch is inserted as JSONEachRow into the schema's ``*_landing`` table (Null engine,
   Nullable columns, constraints generated from :mod:`ccab.contracts`); a materialized view moves
   the rows into the raw table. ClickHouse parses and type-checks; the batch is one block, so the
   insert is all-or-nothing, and it carries an ``insert_deduplication_token`` naming the source
   positions and content, so an identical retry is dropped.
3. Only if ClickHouse rejects the batch: the batch is replayed into the ``*_check`` table (same
   constraints, no views, writes nothing) with serial parsing, which reports the exact failing
   row; that row becomes a dead letter with ClickHouse's reason, and checking resumes after it.
   Then the good rows are inserted as in step 2 (new token).
4. Dead letters are written *before* the good rows, so a crash in between re-delivers the batch
   and the dead letters collapse on their source position (``dead_letters`` is a
   ReplacingMergeTree keyed by it).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

import orjson

from ccab.contracts import Schema, reason_from_constraint, validate
from ccab.warehouse import Warehouse, WarehouseError

DEFAULT_MAX_RECORD_BYTES = 1 << 20  # 1 MiB: a tcp_sample is ~1.2 KB; anything this big is broken
# Keep a batch one ClickHouse block (atomic insert): below min_insert_block_size_{rows,bytes}.
MAX_BATCH_ROWS = 200_000
MAX_BATCH_BYTES = 128 << 20

INSERT_SETTINGS = {
    "input_format_skip_unknown_fields": 1,  # new optional fields may appear (CONTRACTS.md)
    "input_format_null_as_default": 0,
    "input_format_json_read_numbers_as_strings": 0,  # a number is not a string
    "input_format_json_read_bools_as_numbers": 0,  # true is not an int
    "input_format_json_read_bools_as_strings": 0,
    "async_insert": 0,  # tokens need synchronous inserts
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
    "min_insert_block_size_rows": 1 << 20,
    "min_insert_block_size_bytes": 256 << 20,
    "max_insert_block_size": 1 << 20,
}
# Error codes that mean "the data is bad", as opposed to "the warehouse is unwell".
_DATA_ERROR_CODES = {6, 26, 27, 32, 38, 41, 53, 69, 70, 72, 117, 130, 131, 169, 321, 349, 386, 394, 469, 691}
_ROW_RE = re.compile(r"at row (\d+)")
_CONSTRAINT_RE = re.compile(r"Constraint `(\w+)`")
_CONSTRAINT_VALUES_RE = re.compile(r"Column values: (.*?)\. \(VIOLATED")
_KEY_RE = re.compile(r"while reading the value of key (\w+)")


@dataclass
class Record:
    """One raw record and where it came from."""

    payload: bytes
    topic: str
    partition: int
    offset: int


@dataclass
class BatchResult:
    inserted: int = 0
    dead: Counter = field(default_factory=Counter)  # reason -> count

    @property
    def dead_total(self) -> int:
        return sum(self.dead.values())

    def add(self, other: "BatchResult") -> None:
        self.inserted += other.inserted
        self.dead.update(other.dead)


def _json_str(s: str) -> bytes:
    return orjson.dumps(s)


def _splice(rec: Record, body: bytes) -> bytes:
    """``{...}`` -> ``{"_topic":..,"_partition":..,"_offset":..,...}`` (body is stripped)."""
    prefix = b'{"_topic":%s,"_partition":%d,"_offset":%d' % (_json_str(rec.topic), rec.partition, rec.offset)
    rest = body[1:].lstrip()
    return prefix + (rest if rest.startswith(b"}") else b"," + rest)


def precheck(rec: Record, max_record_bytes: int) -> tuple[bytes | None, str | None]:
    """Cheap per-record checks. Returns (line for the landing insert, None) or (None, reason)."""
    body = rec.payload
    if len(body) > max_record_bytes:
        return None, f"oversize: {len(body)} bytes > limit {max_record_bytes}"
    body = body.strip()
    if not body.startswith(b"{"):
        return None, "bad JSON: not a JSON object" if body else "bad JSON: empty record"
    if not body.endswith(b"}"):
        return None, "bad JSON: truncated (no closing brace)"
    if b"\n" in body or b"\r" in body:
        # Whitespace between tokens is insignificant; a raw newline inside a string is invalid
        # JSON anyway and stays invalid after this.
        body = body.replace(b"\r", b" ").replace(b"\n", b" ")
    return _splice(rec, body), None


def _reason_from_error(err: WarehouseError) -> str:
    text = str(err)
    c = _CONSTRAINT_RE.search(text)
    if c:
        reason = reason_from_constraint(c.group(1))
        v = _CONSTRAINT_VALUES_RE.search(text)
        if c.group(1) == "schema_mismatch" and v:
            reason = f"unknown schema for this topic ({v.group(1).strip()})"
        return reason
    first = text.split("\n", 1)[0]
    first = re.sub(r"^(Code: \d+\. DB::Exception: )+", "", first)
    first = re.sub(r" before: '.*", "", first)  # do not copy payload fragments into the reason
    first = first.split(": (at row")[0].rstrip(": ")
    key = _KEY_RE.search(text)
    if key:
        return f"wrong type for field {key.group(1)}: {first.split(':')[0]}"
    return f"bad JSON: {first[:200]}"


def _token(records: list[Record], data: bytes) -> str:
    spans: dict[tuple[str, int], list[int]] = {}
    for r in records:
        s = spans.setdefault((r.topic, r.partition), [r.offset, r.offset])
        s[0] = min(s[0], r.offset)
        s[1] = max(s[1], r.offset)
    where = ",".join(f"{t}/{p}:{a}-{b}" for (t, p), (a, b) in sorted(spans.items()))
    return f"{where}#{hashlib.blake2b(data, digest_size=12).hexdigest()}"


class BatchWriter:
    """Inserts batches of one schema into the warehouse; see the module docstring."""

    def __init__(self, wh: Warehouse, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES):
        self.wh = wh
        self.max_record_bytes = max_record_bytes

    def write(self, schema: Schema, records: list[Record]) -> BatchResult:
        result = BatchResult()
        lines: list[bytes] = []
        kept: list[Record] = []
        dead: list[tuple[Record, str]] = []
        for rec in records:
            line, reason = precheck(rec, self.max_record_bytes)
            if reason:
                dead.append((rec, reason))
            else:
                lines.append(line)  # type: ignore[arg-type]
                kept.append(rec)
        self._dead(schema, dead, result)  # dead letters always land before the good rows
        if not lines:
            return result
        try:
            self._insert(schema.landing_table, kept, b"\n".join(lines))
        except WarehouseError as err:
            if err.code not in _DATA_ERROR_CODES:
                raise
            bad = self._find_bad_rows(schema, kept, lines)
            self._dead(schema, [(kept[i], why) for i, why in bad.items()], result)
            kept = [r for i, r in enumerate(kept) if i not in bad]
            lines = [ln for i, ln in enumerate(lines) if i not in bad]
            if lines:
                self._insert(schema.landing_table, kept, b"\n".join(lines))
        result.inserted = len(lines)
        return result

    def _dead(self, schema: Schema, dead: list[tuple[Record, str]], result: BatchResult) -> None:
        if dead:
            self.write_dead_letters(schema.name, dead)
            result.dead.update(why for _, why in dead)

    def _insert(self, table: str, records: list[Record], data: bytes) -> None:
        settings = dict(INSERT_SETTINGS, insert_deduplication_token=_token(records, data))
        self.wh.insert_raw(table, data, "JSONEachRow", settings)

    def _find_bad_rows(self, schema: Schema, records: list[Record], lines: list[bytes]) -> dict[int, str]:
        """Index -> reason of every row ClickHouse would reject. Rare path (the batch failed):
        decode and check each record with :func:`ccab.contracts.validate`, then confirm the rest
        against the ``*_check`` table (writes nothing); should ClickHouse still object, take the
        exact failing row from its error (serial parsing) and repeat, a bounded number of times."""
        bad: dict[int, str] = {}
        for i, rec in enumerate(records):
            try:
                value = orjson.loads(rec.payload)
            except orjson.JSONDecodeError as exc:
                bad[i] = f"bad JSON: {str(exc).split(':')[0]}"
                continue
            errors = validate(value, schema)
            if errors:
                bad[i] = "; ".join(errors)
        settings = dict(INSERT_SETTINGS, input_format_parallel_parsing=0, insert_deduplicate=0)
        for _ in range(len(lines) + 1):
            idx = [i for i in range(len(lines)) if i not in bad]
            if not idx:
                break
            try:
                self.wh.insert_raw(schema.check_table, b"\n".join(lines[i] for i in idx), "JSONEachRow", settings)
                break
            except WarehouseError as err:
                if err.code not in _DATA_ERROR_CODES:
                    raise
                m = _ROW_RE.search(str(err))
                row = int(m.group(1)) - 1 if m else 0
                bad[idx[min(max(row, 0), len(idx) - 1)]] = _reason_from_error(err)
        return bad

    def write_dead_letters(self, schema_name: str, dead: list[tuple[Record, str]]) -> None:
        rows = []
        for rec, reason in dead:
            rows.append(orjson.dumps({
                "_topic": rec.topic,
                "_partition": rec.partition,
                "_offset": rec.offset,
                "schema": schema_name,
                "reason": reason,
                "raw": rec.payload.decode("utf-8", errors="replace"),
                "raw_bytes": len(rec.payload),
            }))
        self.wh.insert_raw("dead_letters", b"\n".join(rows), "JSONEachRow",
                           {"async_insert": 0, "insert_deduplicate": 0})
