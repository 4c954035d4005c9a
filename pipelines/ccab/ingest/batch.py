"""Validate and insert one batch of raw JSON records: the core shared by the Kafka loader and
``ccab load``.

How a batch goes in (no per-row Python objects on the hot path):

0. The plain path, for the usual clean batch (:meth:`BatchWriter._write_plain`): the payloads
   joined once (the only per-record Python), the checks of step 1 made over the whole batch
   by byte counts and one ``translate`` (every record starts with the canonical prefix and ends
   with ``}``, no newline inside, nothing suspect), and one ``INSERT ... SELECT`` from the bytes
   in which ClickHouse attaches each row's source position: the batch's runs of consecutive
   offsets (:func:`offset_runs`, numpy) go in as array parameters and row ``n``
   (``rowNumberInAllBlocks()``, one stream after the order-keeping parallel parser) finds its
   run; a line holding two objects makes a row too many and the insert throws instead of
   shifting positions. Same landing table, settings, one block and dedup token as step 2. A
   batch it refuses (a bad row; nothing was inserted) goes to step 3 directly; one that is not
   plain (or cut in more than ``MAX_PLAIN_RUNS`` runs) takes steps 1-3. The rows reach a
   server as the body of ``INSERT ... SELECT ... FROM input('structure') FORMAT JSONEachRow``
   (ClickHouse's HTTP form), **streamed**: joined and checked ``PLAIN_CHUNK_RECORDS`` records at
   a time (:meth:`BatchWriter._plain_chunks`), each chunk sent as soon as it passed, while the
   engine parses the chunks before it (the warehouse service writes the body into a named pipe
   its ``file()`` reads). A chunk that fails the checks cuts the request off: the insert fails
   with nothing inserted and the batch takes steps 1-3, as a batch failing the checks always
   did. One insert per batch: the same rows as consecutive inserts cost the engine 1.6-2.4x as
   much (4-8 parts of a 60,000-record batch, bench/README).
1. Cheap byte checks per record: size limit, and "starts with ``{"schema":"<the expected
   schema>",`` and ends with ``}``" (what every producer of ours writes). One regex and one
   UTF-8 check over the whole batch look for what ClickHouse's JSON reader would bend rather
   than refuse: digit runs long enough to leave an integer's width (it wraps them: 2^64+1 is
   read as 1), raw control characters, invalid UTF-8, ``[``, backslashes and spaces; and a few
   byte counts (:class:`Shape`) for a value of the wrong JSON type (``"5"`` read as 5, ``1`` as
   true) or a nested object (duplicate keys inside it, nesting ClickHouse cannot survive). The records that fail any of these take
   the *careful* path (:func:`careful`): decoded strictly in Python (no duplicate keys, exact
   integers checked against their field's width, the top-level ``schema`` as the one
   definition of the record's schema; a number beyond an integer field's width in a record
   without nested objects or backslashes is found by a regex, :func:`_wide_int_reason`, where
   that cannot change its fate). Which path a record takes depends on its bytes alone,
   never on its neighbours. The record's source position (``_topic``, ``_partition``,
   ``_offset``) is spliced into the object's text.
2. The whole batch is inserted as JSONEachRow into the schema's ``*_landing`` table (Null engine,
   Nullable columns, constraints generated from :mod:`ccab.base.contracts`); a materialized view moves
   the rows into the raw table. ClickHouse parses and type-checks; the batch is one block, so the
   insert is all-or-nothing, and it carries an ``insert_deduplication_token`` naming the source
   positions and content, so an identical retry is dropped.
3. Only if ClickHouse rejects the batch (or the previous batch of the schema had bad rows, so
   the direct insert would most likely fail again): ClickHouse parses the batch *once* into a
   session-private Memory table (``ccab_stage_<schema>``, temporary), skipping the rows it
   cannot parse. Each line gets an end marker before its last brace, so a line whose object ends
   early (junk or a second object after it, which a direct insert refuses) stages a row without
   the marker and is bad like them. One query names the staged rows that break a landing rule
   (:func:`ccab.base.contracts.constraints`); the positions that are missing from the table are
   the unparsable rows (the reason from Python's strict reading for the first few, or from
   ClickHouse for a few; the rest a generic one). The good rows go from the Memory table into the
   landing table with ``INSERT ... SELECT``: one block, the dedup token a direct insert of them
   would carry, no second parse. Rare cases take the careful classification instead (one query
   over the batch, then the rows it could not tell bisected against the ``*_check`` table
   (same constraints, writes nothing): O(bad · log n) checks, never one per row): a record that
   names the end marker, or a position that stages twice.
4. A batch ClickHouse refuses in a way none of the above expects (an error code not known as
   "bad data", e.g. Code 306 TOO_DEEP_RECURSION) is isolated while the warehouse answers
   (:meth:`BatchWriter.write_isolating`): bisected against the ``*_check`` table, any refusal of
   a single record making that record a dead letter; only an unanswering warehouse is raised to
   the caller, who retries the same batch (and the Kafka loader splits a batch that still fails
   while the warehouse answers: :meth:`ccab.ingest.loader.Loader._write_bounded`).
5. Dead letters are written *before* the good rows, so a crash in between re-delivers the batch
   and the dead letters collapse on their source position (``dead_letters`` is a
   ReplacingMergeTree keyed by it).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import orjson
from ccab.base.contracts import (AUDIT_FIELDS, INT_RANGES, SCHEMAS, WIDE_INT_DIGITS, DuplicateKey, Schema,
                                  constraints, depth_problem, input_structure, reason_from_constraint, strict_loads,
                                  validate)
from ccab.base.warehouse import Warehouse, WarehouseError

log = logging.getLogger("ccab.ingest.batch")

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
    "input_format_json_read_objects_as_strings": 0,  # an object is not a string
    "input_format_json_read_arrays_as_strings": 0,
    "async_insert": 0,  # tokens need synchronous inserts
    "insert_deduplicate": 1,
    "deduplicate_blocks_in_dependent_materialized_views": 1,
    "min_insert_block_size_rows": 1 << 20,
    "min_insert_block_size_bytes": 256 << 20,
    "max_insert_block_size": 1 << 20,
}
# Error codes that mean "the data is bad", as opposed to "the warehouse is unwell".
_DATA_ERROR_CODES = {6, 25, 26, 27, 32, 38, 41, 53, 69, 70, 72, 117, 130, 131, 169, 321, 349, 386, 394, 467, 469, 691}
_THROW_IF = 395  # FUNCTION_THROW_IF_VALUE_IS_NON_ZERO: the plain path's row count check
_ROW_RE = re.compile(r"at row (\d+)")
_CONSTRAINT_RE = re.compile(r"Constraint `(\w+)`")
_CONSTRAINT_VALUES_RE = re.compile(r"Column values: (.*?)\. \(VIOLATED")
_KEY_RE = re.compile(r"while reading the value of key (\w+)")
# What ClickHouse's JSON reader bends instead of refusing: integers long enough to wrap, raw
# control characters (JSON allows none inside strings; tab/CR between tokens are rare enough).
# Found with bytes.translate + bytes.find (C speed, ~1 GB/s): a regex is 10x slower here.
# Also suspect (the careful path reads them): "[" (nesting; a contract array is rare), a
# backslash (a key may be spelled with escapes, which the byte counts of Shape cannot see) and a
# space (our producers write none between tokens; "a": "5" would hide a quoted number from
# them). "{" is a class of its own: one per record, counted.
_CLASSES = bytes(0x30 if 0x30 <= b <= 0x39 else 0x01 if (b < 0x20 and b != 0x0A) or b in b"[\\ " else
                 0x02 if b == 0x7B else 0x2E for b in range(256))
_WIDE_RUN = b"0" * WIDE_INT_DIGITS


def _suspect_positions(data: bytes) -> list[int]:
    """Byte offsets in ``data`` where a suspect run starts (empty: nothing suspect)."""
    t = data.translate(_CLASSES)
    out: list[int] = []
    for needle in (_WIDE_RUN, b"\x01"):
        at = t.find(needle)
        while at >= 0:
            out.append(at)
            at = t.find(needle, at + len(needle))
    return out
@dataclass(frozen=True)
class Shape:
    """What a flat record of one schema looks like in byte counts, for what ClickHouse's JSON
    reader would bend rather than refuse (it reads ``"5"`` into an integer, ``1`` into a Bool)
    or cannot survive (``[[[...]]]`` a thousand deep fails the whole batch). A record has the
    shape when: one ``{`` (nothing nested, no brace inside a string), ``[`` only as the value
    of a string-array field, ``":"`` (a quoted value) only after the name of a string field,
    only ``true``/``false``/``null`` after the name of a Bool field, and no ``\\u`` escape (a
    key may be spelled with one). Every count is additive over records and each record's is
    at least its expected share, so a run of records has the shape iff each of them has: the
    batch is checked with a few ``bytes.count`` passes (C speed), and a failing batch bisected
    to the records that need the careful path."""

    string_keys: tuple[bytes, ...]
    bool_keys: tuple[bytes, ...]
    array_keys: tuple[bytes, ...]
    required_strings: int  # how many string fields every record holds
    optional_string_keys: tuple[bytes, ...]
    required_bool_keys: tuple[bytes, ...]
    optional_bool_keys: tuple[bytes, ...]

    @classmethod
    def of(cls, schema: Schema) -> "Shape":
        def keys(kind: str, required: bool | None = None) -> tuple[bytes, ...]:
            return tuple(b'"%s":' % f.name.encode() for f in schema.fields
                         if f.kind == kind and (required is None or f.required == required))
        return cls(keys("string"), keys("bool"), keys("string_array"), len(keys("string", True)),
                   keys("string", False), keys("bool", True), keys("bool", False))

    def plain_ok(self, data: bytes, n: int, classes: bytes) -> bool:
        """The hot path's cheaper form of :meth:`ok` for a batch that has no suspect byte
        (``classes``: ``data`` translated by ``_CLASSES``), valid only if ClickHouse then takes
        the whole batch: that proves every record holds each required string field once, as a
        string, under its plain name (so ``"f":"`` once), and each required Bool once; with
        that, the sums below are equal iff each record's are. A batch ClickHouse refuses is
        classified by :meth:`ok`/:meth:`misfits`, exactly."""
        c = data.count
        if classes.count(b"\x02") != n:
            return False
        if c(b'":"') != self.required_strings * n + sum(c(k + b'"') for k in self.optional_string_keys):
            return False
        if any(c(k + b"t") + c(k + b"f") != n for k in self.required_bool_keys):
            return False
        return all(c(k) == c(k + b"t") + c(k + b"f") + c(k + b"n") for k in self.optional_bool_keys)

    def ok(self, data: bytes, n: int, start: int = 0, end: int | None = None) -> bool:
        """Whether the ``n`` records in ``data[start:end]`` all have the shape."""
        end = len(data) if end is None else end
        c = data.count
        if c(b"{", start, end) != n or c(b"\\u", start, end):
            return False
        if c(b"[", start, end) != sum(c(k + b"[", start, end) for k in self.array_keys):
            return False
        if c(b'":"', start, end) != sum(c(k + b'"', start, end) for k in self.string_keys):
            return False
        return all(c(k, start, end) == c(k + b"t", start, end) + c(k + b"f", start, end) + c(k + b"n", start, end)
                   for k in self.bool_keys)

    def misfits(self, data: bytes, ends: list[int]) -> list[int]:
        """Indexes of the records without the shape; ``ends[i]``: one past record ``i``'s last
        byte in ``data`` (records joined by one separator byte). O(misfits x log n) passes."""
        out: list[int] = []
        stack = [(0, len(ends))]
        while stack:
            a, b = stack.pop()
            start = ends[a - 1] + 1 if a else 0
            if self.ok(data, b - a, start, ends[b - 1]):
                continue
            if b - a == 1:
                out.append(a)
                continue
            mid = (a + b) // 2
            stack += [(mid, b), (a, mid)]
        return sorted(out)


_SHAPES = {name: Shape.of(s) for name, s in SCHEMAS.items()}
# How many unparsable rows of one batch get ClickHouse's own reason (one check insert each)
# when Python's strict reading finds nothing wrong.
MAX_CLICKHOUSE_REASONS = 16
# How many unparsable rows of one batch get a reason from Python's reading at all (the rest are
# dead letters all the same, with a generic reason and their raw payload): bounds the rare path.
MAX_PYTHON_REASONS = 256


@dataclass
class Record:
    """One raw record and where it came from."""

    payload: bytes
    topic: str
    partition: int
    offset: int


@dataclass
class Batch:
    """Records of one source topic, column-wise (no object per record on the hot path).

    ``hash_content``: make the content part of the dedup token. Kafka offsets name immutable
    content, so the Kafka path leaves it off; a replay file can change under the same line numbers.
    """

    topic: str
    payloads: list[bytes]
    partitions: list[int]
    offsets: list[int]
    hash_content: bool = False

    def __len__(self) -> int:
        return len(self.payloads)

    def record(self, i: int) -> Record:
        return Record(self.payloads[i], self.topic, self.partitions[i], self.offsets[i])

    def part(self, a: int, b: int) -> "Batch":
        """Records ``a`` .. ``b - 1`` as a batch of their own."""
        return Batch(self.topic, self.payloads[a:b], self.partitions[a:b], self.offsets[a:b], self.hash_content)

    @classmethod
    def of(cls, records: list[Record], hash_content: bool = False) -> "Batch":
        """From records of one topic (tests, small callers)."""
        topics = {r.topic for r in records}
        if len(topics) > 1:
            raise ValueError(f"a batch holds one topic, got {sorted(topics)}")
        return cls(topics.pop() if topics else "", [r.payload for r in records],
                   [r.partition for r in records], [r.offset for r in records], hash_content)


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


# Each schema's integer fields by name (the careful path's shortcut).
_INT_FIELDS = {s.name: {f.name: f for f in s.fields if f.kind in INT_RANGES} for s in SCHEMAS.values()}
_CANONICAL_SCHEMA_RE = re.compile(rb'\{"schema":"([a-z_]{1,40}/[0-9]{1,4})",')


def _prefix(topic: str, partition: int) -> bytes:
    return b'{"_topic":%s,"_partition":%d,"_offset":' % (orjson.dumps(topic), partition)


def precheck(rec: Record, max_record_bytes: int) -> tuple[bytes | None, str | None]:
    """Cheap checks of one record. Returns (line for the landing insert, None) or (None, reason).
    The line is the record's object with its source position spliced in front:
    ``{"_topic":..,"_partition":..,"_offset":..,<the record's own fields>}``."""
    body = rec.payload
    if len(body) > max_record_bytes:
        return None, f"oversize: {len(body)} bytes > limit {max_record_bytes}"
    if body[:1] != b"{" or body[-1:] != b"}":
        body = body.strip()
        if not body.startswith(b"{"):
            return None, "bad JSON: not a JSON object" if body else "bad JSON: empty record"
        if not body.endswith(b"}"):
            return None, "bad JSON: truncated (no closing brace)"
    if b"\n" in body:
        # JSONEachRow ends a row at a newline. Whitespace between tokens is insignificant, and a
        # raw newline inside a string is invalid JSON anyway and stays invalid after this.
        body = body.replace(b"\n", b" ")
    rest = body[1:]
    if rest.lstrip()[:1] == b"}":  # "{}": no comma after the spliced fields
        return b"%s%d}" % (_prefix(rec.topic, rec.partition), rec.offset), None
    return b"%s%d,%s" % (_prefix(rec.topic, rec.partition), rec.offset, rest), None


def schema_prefix(schema_name: str) -> bytes:
    """How a record of ``schema_name`` written by our producers starts."""
    return b'{"schema":%s,' % orjson.dumps(schema_name)


def record_schema(payload: bytes) -> tuple[str | None, str | None]:
    """The one definition of "this record's schema", for Kafka and files alike: the string
    value of the top-level ``schema`` member as a strict JSON reader decodes it (escapes
    included; a nested ``"schema"`` is not it). Returns (name, None) or (None, why not)."""
    m = _CANONICAL_SCHEMA_RE.match(payload)
    if m:
        return m.group(1).decode(), None
    try:
        value = strict_loads(payload)
    except ValueError as exc:
        return None, _strict_reason(exc)
    if not isinstance(value, dict):
        return None, f"bad JSON: not a JSON object (got {type(value).__name__})"
    name = value.get("schema")
    if not isinstance(name, str):
        return None, "missing required field schema" if name is None else f"unknown schema {name!r:.80}"
    return name, None


def _strict_reason(exc: ValueError) -> str:
    if isinstance(exc, DuplicateKey):
        return f"duplicate key: {str(exc).removeprefix('duplicate key ')[:80]}"
    return f"bad JSON: {str(exc).split(':')[0][:120]}"


def careful(rec: Record, schema: Schema, max_record_bytes: int) -> tuple[bytes | None, str | None]:
    """The careful path of one record (rare: see the module docstring): the cheap checks of
    :func:`precheck`, then a strict decode (nesting depth, UTF-8, no duplicate keys, no NaN),
    the top-level ``schema`` must be ``schema``, and every field as the contract says
    (:func:`ccab.base.contracts.validate`: kind, width, bounds). Returns the landing line or
    the reason."""
    line, reason = precheck(rec, max_record_bytes)
    if reason:
        return None, reason
    wide = _wide_int_reason(rec.payload, schema)
    if wide:
        return None, wide
    try:
        value = strict_loads(rec.payload)
    except ValueError as exc:
        return None, _strict_reason(exc)
    if not isinstance(value, dict):
        return None, "bad JSON: not a JSON object"
    name = value.get("schema")
    if name not in schema.names:
        if name is None:
            return None, "missing required field schema"
        return None, f"unknown schema for this topic ({name!r:.80})"
    errors = validate(value, schema)  # every field's kind, width and bounds, as the contract says
    if errors:
        return None, errors[0]
    return line, None


_WIDE_VALUE_RE = re.compile(rb':(-?[0-9]{%d,})[,}]' % WIDE_INT_DIGITS)  # its member's name: the string before


def _wide_int_reason(payload: bytes, schema: Schema) -> str | None:
    """The careful path's usual verdict without its strict decode: a record with no nested
    object and no backslash (so no string holds a quote, and every ``"name":<digits>`` is a
    top-level member) whose integer field holds a number beyond the field's width is dead
    whatever else the strict reading would find. None: the full careful path decides."""
    if b"\\" in payload or payload.count(b"{") != 1:
        return None
    fields = _INT_FIELDS[schema.name]
    for m in _WIDE_VALUE_RE.finditer(payload):
        end = m.start() - 1  # the closing quote of the member's name, if it is one
        if payload[end:end + 1] != b'"':
            continue
        f = fields.get(payload[payload.rfind(b'"', 0, end) + 1:end].decode("utf-8", "replace"))
        if f is not None:
            lo, hi = f.int_range
            if not lo <= int(m.group(1)) <= hi:
                return f"field {f.name}: integer out of range {lo}..{hi}"
    return None


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
    if err.code not in _DATA_ERROR_CODES:  # refused in a way the loader does not know: say how
        name = re.search(r"\(([A-Z_]{4,})\)", text)
        return (f"refused by ClickHouse (code {err.code}{' ' + name.group(1) if name else ''}): "
                f"{first.split(' (in file')[0][:160]}")
    return f"bad JSON: {first[:200]}"


def _utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _python_reason(payload: bytes, schema: Schema) -> str | None:
    """Why ClickHouse could not parse a row, as Python's strict reading and the contract see
    it (None when they see nothing wrong)."""
    deep = depth_problem(payload)
    if deep:
        return deep
    try:
        value = orjson.loads(payload)  # fast; the strict reading only when it sees nothing wrong
    except orjson.JSONDecodeError:
        value = None
    errors = validate(value, schema) if isinstance(value, dict) else []
    if errors:
        return "; ".join(errors)
    try:
        value = strict_loads(payload)
    except ValueError as exc:
        return _strict_reason(exc)
    errors = validate(value, schema)
    return "; ".join(errors) if errors else None


def _token(topic: str, spans: dict[int, list[int]], data: bytes | None) -> str:
    """Names what a batch holds: source positions (and, for files, the content)."""
    where = ",".join(f"{p}:{a}-{b}" for p, (a, b) in sorted(spans.items()))
    digest = f"#{hashlib.blake2b(data, digest_size=12).hexdigest()}" if data is not None else ""
    return f"{topic}/{where}{digest}"


def _spans(batch: Batch, kept: list[int]) -> dict[int, list[int]]:
    """First and last source position per partition of the rows ``kept`` (a batch's label)."""
    parts, offs = batch.partitions, batch.offsets
    if len(kept) != len(parts):
        parts, offs = [parts[i] for i in kept], [offs[i] for i in kept]
    last = {p: o for p, o in zip(parts, offs)}
    first = {p: o for p, o in zip(reversed(parts), reversed(offs))}
    return {p: [first[p], last[p]] for p in last}


def _verdict(schema: Schema, staged: bool = False) -> str:
    """A row's first violated landing rule, or '' (ClickHouse expression over the landing columns;
    ``staged``: a staged row must also hold the line's end marker)."""
    rules = [(f"isNotNull({_LINE_END_COLUMN})", "line_end")] if staged else []
    rules += [(expr, name) for name, expr in constraints(schema)]
    return "multiIf(" + ", ".join(f"NOT ifNull({expr}, 0), '{name}'" for expr, name in rules) + ", '')"


# The staged path's end-of-line marker (a column of the staging table only) and its reason.
_LINE_END_COLUMN = "_ccab_line_end"
_LINE_END = b'"%s":1' % _LINE_END_COLUMN.encode()
def _may_name_line_end(payload: bytes) -> bool:
    """Whether a record might hold our end marker's name as a top-level key spelled with JSON
    escapes (then only the staging table would see a duplicate key)."""
    if b"\\u" not in payload:
        return False
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return True  # cannot tell cheaply
    return not isinstance(value, dict) or _LINE_END_COLUMN in value


_STAGED_REASONS = {"line_end": "bad JSON: more than one JSON value in the record, or junk after it"}


def _stage_settings(n_rows: int) -> dict:
    """Reading a rejected batch into the staging table: rows ClickHouse cannot parse are skipped
    (all of them may be), read as the classification reads them (no parallel parsing)."""
    settings = dict(INSERT_SETTINGS, input_format_allow_errors_num=n_rows + 1, input_format_allow_errors_ratio=1,
                    input_format_parallel_parsing=0, insert_deduplicate=0)
    settings.pop("deduplicate_blocks_in_dependent_materialized_views")
    return settings


# How many runs of consecutive offsets a batch may have for the plain path (ClickHouse finds each
# row's run by counting run starts: cost rows x runs); a batch cut in more pieces takes the
# per-record path. Kafka hands out each partition in long runs (one fetch each).
MAX_PLAIN_RUNS = 256


@dataclass
class Runs:
    """A batch as runs of consecutive offsets of one partition: the first row of each run, its
    partition and first offset; ``spans``: the first and last offset per partition."""

    starts: list[int]
    parts: list[int]
    firsts: list[int]
    spans: dict[int, list[int]]

    def params(self) -> dict:
        return {"rs": self.starts, "rp": self.parts, "ro": self.firsts}


def offset_runs(partitions: list[int], offsets: list[int]) -> Runs | None:
    """The batch's runs, computed by numpy over the columns (no per-record Python); None
    beyond ``MAX_PLAIN_RUNS`` runs."""
    p = np.asarray(partitions, dtype=np.int64)
    o = np.asarray(offsets, dtype=np.int64)
    cut = np.flatnonzero((p[1:] != p[:-1]) | (o[1:] != o[:-1] + 1)) + 1
    if len(cut) >= MAX_PLAIN_RUNS:
        return None
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), len(p)]
    parts = p[starts].tolist()
    firsts = o[starts].tolist()
    spans: dict[int, list[int]] = {}
    for part, first, a, b in zip(parts, firsts, starts, ends):
        if part in spans:
            spans[part][1] = first + (b - a) - 1
        else:
            spans[part] = [first, first + (b - a) - 1]
    return Runs(starts, parts, firsts, spans)


# Records per chunk of a plain batch's body (~1.2 KB each): the first chunk is checked and sent
# while the engine waits; each next one is checked while the engine parses the previous ones.
PLAIN_CHUNK_RECORDS = 4096


class _NotPlain(Exception):
    """A chunk of a plain batch failed the checks: the batch takes the per-record path."""


def _plain(data: bytes, n: int, head: bytes, limit: int, payloads: list[bytes], shape: Shape) -> bool:
    """Whether all ``n`` records joined in ``data`` may go in as they are: each starts with the
    schema's canonical prefix ``head`` and ends with ``}``, holds no newline, is within ``limit``
    bytes, has the schema's :class:`Shape`, and the batch holds nothing suspect (wide digit
    runs, control characters, invalid UTF-8). Byte counts over the whole batch, at C speed."""
    if not data.startswith(head) or not data.endswith(b"}"):
        return False
    # every newline is a separator, and each is "}" + newline + the next record's prefix
    if data.count(b"\n") != n - 1 or data.count(b"}\n" + head) != n - 1:
        return False
    if len(data) > limit and max(map(len, payloads)) > limit:
        return False
    if not _utf8(data):
        return False
    t = data.translate(_CLASSES)
    return t.find(_WIDE_RUN) < 0 and t.find(b"\x01") < 0 and shape.plain_ok(data, n, t)


def _plain_structure(schema: Schema) -> str:
    """The landing columns without the source position (ClickHouse adds it)."""
    audit = {f.name for f in AUDIT_FIELDS}
    return ", ".join(c for c in input_structure(schema).split(", ") if c.split(" ", 1)[0] not in audit)


def _plain_insert_sql(schema: Schema) -> str:
    """Rows read in order (``max_threads=1``: one stream after the parallel parser, which keeps
    the order), numbered by ``rowNumberInAllBlocks()``; row ``n`` is in run ``k`` (the number
    of run starts <= n), at offset ``first[k] + n - start[k]``."""
    cols = ", ".join(f.name for f in schema.fields)
    return (f"INSERT INTO {schema.landing_table} ({cols}, _topic, _partition, _offset) "
            f"SELECT {cols}, {{topic:String}}, {{rp:Array(UInt32)}}[_k], "
            # a line that held two objects makes more rows than lines: refused, never shifted
            f"{{ro:Array(UInt64)}}[_k] + (_n - {{rs:Array(UInt64)}}[_k]) + throwIf(_n >= {{rows:UInt64}}, 'more rows than records') "
            f"FROM (SELECT *, rowNumberInAllBlocks() AS _n, arrayCount(x -> x <= _n, {{rs:Array(UInt64)}}) AS _k "
            f"FROM {{input}})")


class BatchWriter:
    """Inserts batches of one schema into the warehouse; see the module docstring."""

    def __init__(self, wh: Warehouse, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES):
        self.wh = wh
        self.max_record_bytes = max_record_bytes
        self._staging: set[str] = set()  # schemas whose last batch had bad rows: straight to staging

    def write(self, schema: Schema, batch: Batch) -> BatchResult:
        """Insert ``batch``: every record a row or a dead letter. A batch ClickHouse refuses in
        a way none of the paths below expects (an error code not known as "bad data", e.g.
        TOO_DEEP_RECURSION) is not retried as is while the warehouse answers: it is isolated
        (:meth:`write_isolating`). Raises :class:`WarehouseError` only when the warehouse
        itself does not answer (then the same batch may be retried: same dedup tokens)."""
        try:
            return self._write(schema, batch)
        except WarehouseError as err:
            if not self.healthy():
                raise
            log.warning("%s: batch of %d refused as a whole (%s); isolating the records ClickHouse refuses",
                        schema.name, len(batch), str(err).split("\n", 1)[0][:200])
            return self.write_isolating(schema, batch)

    def healthy(self) -> bool:
        """Whether the warehouse answers a trivial query (a refusal of data, not an outage)."""
        try:
            self.wh.query("SELECT 1")
            return True
        except Exception:  # any failure to answer: the warehouse is unwell
            return False

    def write_isolating(self, schema: Schema, batch: Batch) -> BatchResult:
        """The last resort for a batch refused as a whole: the records that fail the cheap and
        careful checks are dead letters as usual, then the rest is bisected against the
        ``*_check`` table treating *any* refusal of a single record as that record's dead letter
        (the warehouse is asked whether it is well before each such verdict, so an outage is
        raised, never turned into dead letters), and the good rows go in as one block with the
        usual dedup token. O(bad x log n) check inserts."""
        result = BatchResult()
        lines, kept, dead = self._prepare(schema, batch)
        self._dead(schema, dead, result)
        bad = self._bisect(schema, lines, any_refusal=True)
        self._dead(schema, [(batch.record(kept[i]), why) for i, why in bad.items()], result)
        kept = [k for i, k in enumerate(kept) if i not in bad]
        lines = [ln for i, ln in enumerate(lines) if i not in bad]
        if lines:
            self._insert(schema.landing_table, batch, kept, lines)
            result.inserted = len(lines)
        self._staging.add(schema.name)
        return result

    def _write(self, schema: Schema, batch: Batch) -> BatchResult:
        result = BatchResult()
        refused = False  # the plain insert refused the batch: a direct insert would too
        if schema.name not in self._staging and len(batch):
            plain = self._write_plain(schema, batch)
            if plain == "in":
                result.inserted = len(batch)
                return result
            refused = plain == "refused"
        lines, kept, dead = self._prepare(schema, batch)
        self._dead(schema, dead, result)  # dead letters always land before the good rows
        if not lines:
            return result
        if schema.name not in self._staging and not refused:
            try:
                self._insert(schema.landing_table, batch, kept, lines)
                result.inserted = len(lines)
                return result
            except WarehouseError as err:
                if err.code not in _DATA_ERROR_CODES:
                    raise
        # Rejected (or the previous batch of this schema was): parse once into the staging table.
        result.inserted = self._write_staged(schema, batch, kept, lines, result)
        return result

    def _write_plain(self, schema: Schema, batch: Batch) -> str:
        """The clean batch's path: the consumer's bytes joined once (the only per-record
        Python), checked over the whole batch at C speed (every record in the canonical form,
        nothing suspect), and inserted by one ``INSERT ... SELECT`` in which ClickHouse attaches
        each row's source position from the batch's runs of consecutive offsets. Returns "in",
        "refused" (ClickHouse refused a row; nothing was inserted) or "" (the batch needs the
        per-record path: not canonical, suspect bytes, or cut in too many runs)."""
        n = len(batch)
        runs = offset_runs(batch.partitions, batch.offsets)
        if runs is None:
            return ""
        chunks: Iterable[bytes] = self._plain_chunks(schema, batch)
        content = None
        if batch.hash_content:  # the token names the content: every chunk checked before the insert
            try:
                chunks = list(chunks)
            except _NotPlain:
                return ""
            content = b"".join(chunks)
        token = _token(batch.topic, runs.spans, content)
        try:
            self.wh.command_input(
                _plain_insert_sql(schema), chunks, "JSONEachRow", _plain_structure(schema),
                params={"topic": batch.topic, "rows": n, **runs.params()},
                settings=dict(INSERT_SETTINGS, max_threads=1, insert_deduplication_token=token))
        except _NotPlain:
            return ""  # a chunk failed the checks: the insert was cut off, nothing was inserted
        except WarehouseError as err:
            if err.code not in _DATA_ERROR_CODES and err.code != _THROW_IF:
                raise
            return "refused"  # a bad row: the staged path finds it (nothing was inserted)
        return "in"

    def _plain_chunks(self, schema: Schema, batch: Batch) -> Iterator[bytes]:
        """The batch's bytes as the plain insert's body, made and checked while the insert runs:
        ``PLAIN_CHUNK_RECORDS`` records joined at a time, each chunk checked by :func:`_plain`
        (its checks are sums over records, so chunks that pass make a batch that passes) and
        yielded with the separator before it. Raises :class:`_NotPlain` at the first chunk that
        fails (the insert it feeds is then cut off: nothing is inserted)."""
        head, shape, limit = schema_prefix(schema.name), _SHAPES[schema.name], self.max_record_bytes
        payloads = batch.payloads
        for a in range(0, len(payloads), PLAIN_CHUNK_RECORDS):
            part = payloads[a:a + PLAIN_CHUNK_RECORDS]
            data = b"\n".join(part)
            if not _plain(data, len(part), head, limit, part, shape):
                raise _NotPlain(f"records {a}..{a + len(part) - 1} need the per-record path")
            if a:
                yield b"\n"
            yield data

    def _write_staged(self, schema: Schema, batch: Batch, kept: list[int], lines: list[bytes],
                      result: BatchResult) -> int:
        """The rejected-batch path: ClickHouse parses the batch once into a session-private
        Memory table, skipping the rows it cannot parse; one query names the rows that break a
        landing rule; Python reads back only the positions that are missing or bad; the dead
        letters are written; the good rows go from the staging table into the landing table (one
        block, the same dedup token as a direct insert of them). Returns the rows inserted."""
        data = b"\n".join(lines)
        if _LINE_END_COLUMN.encode() in data:  # a record names our end marker: the careful path
            return self._write_classified(schema, batch, kept, lines, result)
        stage = self._stage_table(schema)
        try:
            # Every line is one object, ``{"_topic":...}``, with no newline inside: the end marker
            # goes before each line's last brace, so a line whose object ends early (junk or a
            # second object after it, which a direct insert refuses) stages a row without it.
            marked = data.replace(b'}\n{"_topic":', b',%s}\n{"_topic":' % _LINE_END)[:-1] + b",%s}" % _LINE_END
            del data
            self.wh.insert_raw(stage, marked, "JSONEachRow", _stage_settings(len(lines)))
            del marked
            bad = self._staged_verdicts(schema, stage, batch, kept, lines)
            if bad is None:  # a position staged twice: the careful classification below
                return self._write_classified(schema, batch, kept, lines, result)
            self._dead(schema, [(batch.record(kept[i]), why) for i, why in bad.items()], result)
            if not bad:
                self._staging.discard(schema.name)  # clean again: the next batch goes in directly
            else:
                self._staging.add(schema.name)  # bad rows come in runs: skip the doomed direct insert
            good = [k for i, k in enumerate(kept) if i not in bad] if bad else kept
            if not good:
                return 0
            data = b"\n".join(ln for i, ln in enumerate(lines) if i not in bad) if batch.hash_content else None
            try:
                self._insert_select(schema.landing_table,
                                    f"SELECT * EXCEPT ({_LINE_END_COLUMN}) FROM {stage} WHERE {_verdict(schema, staged=True)} = ''",
                                    _token(batch.topic, _spans(batch, good), data))
                return len(good)
            except WarehouseError as err:
                if err.code not in _DATA_ERROR_CODES:
                    raise
                lines = [ln for i, ln in enumerate(lines) if i not in bad]
                return self._write_classified(schema, batch, good, lines, result)
        finally:
            self.wh.command(f"TRUNCATE TABLE IF EXISTS {stage}")

    def _stage_table(self, schema: Schema) -> str:
        """The session's staging table of ``schema`` (temporary: private to the warehouse session,
        so concurrent loaders never share one; created each time, since a reconnected session
        has lost it)."""
        name = "ccab_stage_" + re.sub(r"[^a-z0-9]", "_", schema.name)
        self.wh.command(f"CREATE TEMPORARY TABLE IF NOT EXISTS {name} ({input_structure(schema)}, "
                        f"{_LINE_END_COLUMN} Nullable(UInt8)) ENGINE = Memory")
        return name

    def _staged_verdicts(self, schema: Schema, stage: str, batch: Batch, kept: list[int],
                         lines: list[bytes]) -> dict[int, str] | None:
        """Index (into ``lines``) -> reason of every bad row of the staged batch; None when a
        line produced more than one row (two objects on one line: no position names the stray)."""
        total, distinct = self.wh.query(
            f"SELECT count(), uniqExact(_partition, _offset) FROM {stage} "
            "WHERE _partition IS NOT NULL AND _offset IS NOT NULL").rows[0]
        if int(total) != int(distinct):
            return None
        where = {(batch.partitions[k], batch.offsets[k]): i for i, k in enumerate(kept)}
        bad: dict[int, str] = {}
        for p, o, violated in self.wh.query(
                f"SELECT _partition, _offset, v FROM (SELECT _partition, _offset, {_verdict(schema, staged=True)} AS v "
                f"FROM {stage} WHERE _partition IS NOT NULL AND _offset IS NOT NULL) WHERE v != ''").rows:
            i = where.get((int(p), int(o)))
            if i is None:
                return None  # a stray object naming a position not in this batch
            bad[i] = _STAGED_REASONS.get(violated) or reason_from_constraint(violated)
        if int(total) < len(lines):  # rows ClickHouse could not parse: the positions it did not see
            seen = {where.get((int(p), int(o))) for p, o in self.wh.query(
                f"SELECT _partition, _offset FROM {stage} WHERE _partition IS NOT NULL AND _offset IS NOT NULL").rows}
            unparsed = [i for i in range(len(lines)) if i not in seen]
            if any(_may_name_line_end(batch.payloads[kept[i]]) for i in unparsed):
                return None  # our end marker may have made it a duplicate key: the careful path
            self._explain_unparsed(schema, batch, kept, lines, unparsed, bad)
        return bad

    def _explain_unparsed(self, schema: Schema, batch: Batch, kept: list[int], lines: list[bytes],
                          unparsed: list[int], bad: dict[int, str]) -> None:
        """Reasons for rows ClickHouse could not parse: Python's strict reading for the first
        ``MAX_PYTHON_REASONS``, ClickHouse's own error for up to ``MAX_CLICKHOUSE_REASONS`` of
        those Python finds nothing wrong with; the rest a generic reason (the raw payload is kept)."""
        asked = 0
        for n, i in enumerate(unparsed):
            reason = None
            if n < MAX_PYTHON_REASONS:
                reason = _python_reason(batch.record(kept[i]).payload, schema)
                if reason is None and asked < MAX_CLICKHOUSE_REASONS:
                    asked += 1
                    reason = self._clickhouse_reason(schema, lines[i])
            bad[i] = reason or "bad JSON or wrong type: rejected by ClickHouse's JSON reader"

    def _write_classified(self, schema: Schema, batch: Batch, kept: list[int], lines: list[bytes],
                          result: BatchResult) -> int:
        """The careful fallback (a line that holds two objects): classify in one query, then
        bisect against the ``*_check`` table what the classification could not tell."""
        bad = self._classify(schema, batch, kept, lines)
        while True:
            self._dead(schema, [(batch.record(kept[i]), why) for i, why in bad.items()], result)
            kept = [k for i, k in enumerate(kept) if i not in bad]
            lines = [ln for i, ln in enumerate(lines) if i not in bad]
            if not lines:
                return 0
            try:
                self._insert(schema.landing_table, batch, kept, lines)
                return len(lines)
            except WarehouseError as err2:
                if err2.code not in _DATA_ERROR_CODES:
                    raise
                bad = self._bisect(schema, lines)  # rows the classification could not tell
                if not bad:
                    raise

    def _prepare(self, schema: Schema, batch: Batch) -> tuple[list[bytes], list[int], list[tuple[Record, str]]]:
        """Landing lines, the batch index of each, and the records refused before ClickHouse.

        The loader's hot loop, written as comprehensions (no per-record function calls or
        objects): one pass finds the records that need the careful path (rare), one regex and
        one UTF-8 check over the whole batch find suspect bytes, one pass splices the source
        position into all the others."""
        limit = self.max_record_bytes
        payloads, partitions, offsets = batch.payloads, batch.partitions, batch.offsets
        head = schema_prefix(schema.name)
        n = len(head)
        unusual = [i for i, body in enumerate(payloads)
                   if len(body) > limit or body[:n] != head or body[-1:] != b"}" or b"\n" in body]
        joined = b"\n".join(payloads)
        hits = _suspect_positions(joined)  # one pass over the batch
        utf8_ok = _utf8(joined)
        shape = _SHAPES[schema.name]
        shape_ok = shape.ok(joined, len(payloads))
        if hits or not utf8_ok or not shape_ok:
            seen = set(unusual)
            ends = list(itertools.accumulate(len(body) + 1 for body in payloads))  # end of record i, +1
            suspects = {bisect.bisect_right(ends, h) for h in hits}
            if not utf8_ok:
                suspects.update(i for i, body in enumerate(payloads) if not _utf8(body))
            if not shape_ok:
                suspects.update(shape.misfits(joined, [e - 1 for e in ends]))
            unusual += sorted(suspects - seen)
        del joined
        prefix = {p: _prefix(batch.topic, p) for p in set(partitions)}
        if not unusual:
            lines = [b"%s%d,%s" % (prefix[p], o, memoryview(body)[1:])
                     for body, p, o in zip(payloads, partitions, offsets)]
            return lines, list(range(len(payloads))), []
        lines, kept, dead = [], [], []
        careful_set = set(unusual)
        for i, (body, p, o) in enumerate(zip(payloads, partitions, offsets)):
            if i not in careful_set:
                lines.append(b"%s%d,%s" % (prefix[p], o, memoryview(body)[1:]))
                kept.append(i)
                continue
            line, reason = careful(batch.record(i), schema, limit)
            if reason:
                dead.append((batch.record(i), reason))
            else:
                lines.append(line)  # type: ignore[arg-type]
                kept.append(i)
        return lines, kept, dead

    def _dead(self, schema: Schema, dead: list[tuple[Record, str]], result: BatchResult) -> None:
        if dead:
            self.write_dead_letters(schema.name, dead)
            result.dead.update(why for _, why in dead)

    def _insert(self, table: str, batch: Batch, kept: list[int], lines: list[bytes]) -> None:
        data = b"\n".join(lines)
        token = _token(batch.topic, _spans(batch, kept), data if batch.hash_content else None)
        self.wh.insert_raw(table, data, "JSONEachRow", dict(INSERT_SETTINGS, insert_deduplication_token=token))

    def _insert_select(self, table: str, select: str, token: str) -> None:
        self.wh.command(f"INSERT INTO {table} {select}", settings=dict(INSERT_SETTINGS, insert_deduplication_token=token))

    def _classify(self, schema: Schema, batch: Batch, kept: list[int], lines: list[bytes]) -> dict[int, str]:
        """Index (into ``lines``) -> reason of every row ClickHouse rejects, in one query: the
        rows read with the landing structure, unparsable ones skipped, each landing constraint
        evaluated per row. Rare path (the batch failed)."""
        verdict = _verdict(schema)
        sql = (f"SELECT _partition, _offset, {verdict} AS violated FROM {{input}} "
               "WHERE NOT ignore(*)")  # every column read: a type error anywhere counts
        settings = dict(INSERT_SETTINGS, input_format_allow_errors_num=len(lines) + 1,
                        input_format_allow_errors_ratio=1, input_format_parallel_parsing=0)
        for k in ("async_insert", "insert_deduplicate", "deduplicate_blocks_in_dependent_materialized_views",
                  "min_insert_block_size_rows", "min_insert_block_size_bytes", "max_insert_block_size"):
            settings.pop(k, None)
        rows = self.wh.query_input(sql, b"\n".join(lines), "JSONEachRow", input_structure(schema), settings).rows
        where = {(batch.partitions[k], batch.offsets[k]): i for i, k in enumerate(kept)}
        parsed: set[int] = set()
        bad: dict[int, str] = {}
        for p, o, violated in rows:
            i = where.get((p, o))
            if i is None:
                continue  # a stray object (two on one line): the bisection finds its line
            if i in parsed:  # the same position twice: that line held two objects
                bad[i] = "bad JSON: more than one JSON value in the record"
                continue
            parsed.add(i)
            if violated:
                bad[i] = reason_from_constraint(violated)
        self._explain_unparsed(schema, batch, kept, lines,
                               [i for i in range(len(lines)) if i not in parsed and i not in bad], bad)
        return bad

    def _check(self, schema: Schema, lines: list[bytes], any_refusal: bool = False) -> WarehouseError | None:
        """ClickHouse's refusal of ``lines`` (None: it takes them). A refusal whose code is not
        known as bad data is raised, unless ``any_refusal`` and the warehouse answers."""
        settings = dict(INSERT_SETTINGS, input_format_parallel_parsing=0, insert_deduplicate=0)
        try:
            self.wh.insert_raw(schema.check_table, b"\n".join(lines), "JSONEachRow", settings)
            return None
        except WarehouseError as err:
            if err.code not in _DATA_ERROR_CODES and not (any_refusal and self.healthy()):
                raise
            return err

    def _clickhouse_reason(self, schema: Schema, line: bytes) -> str | None:
        err = self._check(schema, [line])
        return _reason_from_error(err) if err is not None else None

    def _bisect(self, schema: Schema, lines: list[bytes], any_refusal: bool = False) -> dict[int, str]:
        """Index -> reason of the rows the ``*_check`` table rejects, by halving: a chunk that
        passes is good as a whole, so b bad rows of n cost O(b log n) check inserts."""
        bad: dict[int, str] = {}
        stack = [(0, len(lines))] if lines else []
        while stack:
            a, b = stack.pop()
            err = self._check(schema, lines[a:b], any_refusal)
            if err is None:
                continue
            if b - a == 1:
                bad[a] = _reason_from_error(err)
                continue
            mid = (a + b) // 2
            stack += [(mid, b), (a, mid)]
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
