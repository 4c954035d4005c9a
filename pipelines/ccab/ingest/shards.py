"""Splitting loader batches by ClickHouse shard, and where each Kafka partition resumes.

A cluster's ``Distributed`` tables (``ccab db cluster-ddl``) place a row on shard
``cityHash64(host) % N``. An insert is atomic per shard, not across shards, so the loader writes
each shard's part of a batch into that shard's own tables, and the resume rule is per shard
(ARCHITECTURE.md, "At scale"):

- per-shard inserts are atomic and in offset order, so the largest offset a shard holds for a
  partition means "every row of this partition for this shard up to here is in";
- a partition resumes at ``max(committed, min over shards of (that shard's max offset + 1))``
  (a shard holding nothing of the partition counts as 0: everything is re-read, and dropped);
- a re-read row is dropped when its offset is at or below its own shard's maximum.

Pure functions here; :func:`shard_numbers` asks ClickHouse for the hash (the same
``cityHash64`` the ``Distributed`` tables use), never Python.
"""

from __future__ import annotations

from ccab.base.warehouse import Warehouse
from ccab.ingest.batch import Batch

#: What places a record on a shard: the ``Distributed`` tables' key (base/schema.py `_shard_key`),
#: computed on the record's bytes. A record without a string ``host`` (a dead letter to be) goes
#: to the shard of the empty host, always the same one for the same bytes.
SHARD_KEY_SQL = "cityHash64(JSONExtractString(line, 'host')) % {n:UInt32}"


def shard_numbers(wh: Warehouse, payloads: list[bytes], shards: int) -> list[int]:
    """The shard of each payload (``cityHash64(host) % shards``), computed by ClickHouse in one
    query over the batch's bytes."""
    if shards == 1 or not payloads:
        return [0] * len(payloads)
    data = b"\n".join(payloads) + b"\n"
    if data.count(b"\n") != len(payloads):  # a raw newline inside a record (rare): one line each
        data = b"\n".join(p.replace(b"\n", b" ") for p in payloads) + b"\n"
    res = wh.query_input(f"SELECT {SHARD_KEY_SQL.replace('{n:UInt32}', str(int(shards)))} FROM {{input}}",
                         data, "LineAsString", "line String",
                         settings={"max_threads": 1, "input_format_parallel_parsing": 0})
    out = [int(r[0]) for r in res.rows]
    if len(out) != len(payloads):
        raise RuntimeError(f"shard split: ClickHouse read {len(out)} lines from a batch of {len(payloads)} records")
    return out


def resume_offset(committed: int, next_by_shard: list[int | None]) -> int | None:
    """Where a partition resumes: ``committed`` (Kafka's committed offset, < 0 when none) and,
    per shard, the next offset after the largest it holds (None: it holds nothing of the partition).
    None means "no position known": Kafka's reset policy (earliest) decides."""
    complete = min((n or 0) for n in next_by_shard)  # every shard holds everything below this
    if committed >= 0:
        return max(committed, complete)
    return complete if complete > 0 else None


def split(batch: Batch, shard_of: list[int], floors: dict[tuple[int, int], int], shards: int) -> list[Batch]:
    """``batch`` as one batch per shard (index = shard), without the rows their shard already
    holds: a row of partition p for shard k is dropped when its offset < ``floors[(k, p)]``
    (the next offset after shard k's maximum, read when the partition was assigned)."""
    parts = [Batch(batch.topic, [], [], [], batch.hash_content) for _ in range(shards)]
    for payload, partition, offset, k in zip(batch.payloads, batch.partitions, batch.offsets, shard_of):
        if offset < floors.get((k, partition), 0):
            continue
        part = parts[k]
        part.payloads.append(payload)
        part.partitions.append(partition)
        part.offsets.append(offset)
    return parts
