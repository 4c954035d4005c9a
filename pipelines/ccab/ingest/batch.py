"""Validate and insert one batch of raw JSON records: the core shared by the Kafka loader and
``ccab load``.

How a batch goes in (no per-row Python objects on the hot path):

1. Cheap byte checks per record: size limit, "looks like a JSON object". The record's source
   position (``_topic``, ``_partition``, ``_offset``) is spliced into the object's text.
2. The whole batch is inserted as JSONEachRow into the schema's ``*_landing`` table (Null engine,
   Nullable columns, constraints generated from :mod:`ccab.base.contracts`); a materialized view moves
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
from ccab.base.contracts import Schema, reason_from_constraint, validate
from ccab.base.warehouse import Warehouse, WarehouseError

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


def _token(topic: str, spans: dict[int, list[int]], data: bytes | None) -> str:
    """Names what a batch holds: source positions (and, for files, the content)."""
    where = ",".join(f"{p}:{a}-{b}" for p, (a, b) in sorted(spans.items()))
    digest = f"#{hashlib.blake2b(data, digest_size=12).hexdigest()}" if data is not None else ""
    return f"{topic}/{where}{digest}"


class BatchWriter:
    """Inserts batches of one schema into the warehouse; see the module docstring."""

    def __init__(self, wh: Warehouse, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES):
        self.wh = wh
        self.max_record_bytes = max_record_bytes

    def write(self, schema: Schema, batch: Batch) -> BatchResult:
        result = BatchResult()
        lines, kept, dead = self._prepare(batch)
        self._dead(schema, dead, result)  # dead letters always land before the good rows
        if not lines:
            return result
        try:
            self._insert(schema.landing_table, batch, kept, lines)
        except WarehouseError as err:
            if err.code not in _DATA_ERROR_CODES:
                raise
            bad = self._find_bad_rows(schema, [batch.record(i) for i in kept], lines)
            self._dead(schema, [(batch.record(kept[i]), why) for i, why in bad.items()], result)
            kept = [k for i, k in enumerate(kept) if i not in bad]
            lines = [ln for i, ln in enumerate(lines) if i not in bad]
            if lines:
                self._insert(schema.landing_table, batch, kept, lines)
        result.inserted = len(lines)
        return result

    def _prepare(self, batch: Batch) -> tuple[list[bytes], list[int], list[tuple[Record, str]]]:
        """Landing lines, the batch index of each, and the records that failed the cheap checks.

        The loader's hot loop, written as comprehensions (no per-record function calls or
        objects): one pass finds the records that need the careful path of :func:`precheck`
        (rare), one pass splices the source position into all the others."""
        limit = self.max_record_bytes
        payloads, partitions, offsets = batch.payloads, batch.partitions, batch.offsets
        unusual = [i for i, body in enumerate(payloads)
                   if len(body) > limit or body[:1] != b"{" or body[-1:] != b"}" or b"\n" in body
                   or body[1:2] in (b"}", b" ", b"\t")]
        prefix = {p: _prefix(batch.topic, p) for p in set(partitions)}
        if not unusual:
            lines = [b"%s%d,%s" % (prefix[p], o, memoryview(body)[1:])
                     for body, p, o in zip(payloads, partitions, offsets)]
            return lines, list(range(len(payloads))), []
        lines, kept, dead = [], [], []
        careful = set(unusual)
        for i, (body, p, o) in enumerate(zip(payloads, partitions, offsets)):
            if i not in careful:
                lines.append(b"%s%d,%s" % (prefix[p], o, memoryview(body)[1:]))
                kept.append(i)
                continue
            line, reason = precheck(batch.record(i), limit)
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
        parts, offs = batch.partitions, batch.offsets
        if len(kept) != len(parts):
            parts, offs = [parts[i] for i in kept], [offs[i] for i in kept]
        # a label of what the batch holds: first and last position seen per partition
        last = {p: o for p, o in zip(parts, offs)}
        first = {p: o for p, o in zip(reversed(parts), reversed(offs))}
        spans = {p: [first[p], last[p]] for p in last}
        data = b"\n".join(lines)
        token = _token(batch.topic, spans, data if batch.hash_content else None)
        self.wh.insert_raw(table, data, "JSONEachRow", dict(INSERT_SETTINGS, insert_deduplication_token=token))

    def _find_bad_rows(self, schema: Schema, records: list[Record], lines: list[bytes]) -> dict[int, str]:
        """Index -> reason of every row ClickHouse would reject. Rare path (the batch failed):
        decode and check each record with :func:`ccab.base.contracts.validate`, then confirm the rest
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
