"""The plain path streams a batch into the warehouse service (issue 28): the batch is checked
and sent chunk by chunk while the engine parses what came. Real service process, real chdb, real
clickhouse-connect over HTTP (chunked transfer encoding); nothing mocked.

A chunk that fails the checks after earlier chunks went in cuts the request off: the service's
insert fails with nothing inserted and the batch takes the per-record path, every record once."""

from __future__ import annotations

import re
import urllib.request

import pytest
from ccab.base.contracts import TCP_SAMPLE
from ccab.base.warehouse import connect
from ccab.ingest import batch as batch_mod
from ccab.ingest.batch import Batch, BatchWriter
from factories import line, tcp_sample

N = 1000
CHUNK = 64  # records per chunk here: 16 chunks per batch


@pytest.fixture
def wh(warehouse_env, monkeypatch):
    monkeypatch.setattr(batch_mod, "PLAIN_CHUNK_RECORDS", CHUNK)
    w = connect()
    yield w
    w.close()


def _aborted(warehouse_service) -> int:
    text = urllib.request.urlopen(f"{warehouse_service}/metrics", timeout=10).read().decode()
    return int(re.search(r"^ccab_warehouse_aborted_bodies_total (\d+)$", text, re.M).group(1))


def _batch(bad: dict[int, bytes] | None = None, topic: str = "ccab.tcp.v1") -> Batch:
    bad = bad or {}
    payloads = [bad.get(i, line(tcp_sample(i))) for i in range(N)]
    # two partitions in runs, as Kafka hands them out
    parts = [0 if i < 600 else 1 for i in range(N)]
    offs = [100 + i if i < 600 else 7000 + i for i in range(N)]
    return Batch(topic, payloads, parts, offs)


def _rows(wh, topic: str = "ccab.tcp.v1") -> list[tuple]:
    return wh.query(f"SELECT sock_id, _partition, _offset FROM tcp_samples WHERE _topic = '{topic}' "
                    "ORDER BY _partition, _offset").rows


def _want(batch: Batch, skip: set[int] = frozenset()) -> list[tuple]:
    return sorted(((f"s{i:08x}", batch.partitions[i], batch.offsets[i]) for i in range(N) if i not in skip),
                  key=lambda r: (r[1], r[2]))


def test_a_streamed_batch_lands_every_row_exactly_once_at_its_position(wh, warehouse_service):
    batch = _batch()
    before = _aborted(warehouse_service)
    res = BatchWriter(wh).write(TCP_SAMPLE, batch)
    assert (res.inserted, res.dead_total) == (N, 0)
    assert _rows(wh) == _want(batch)
    # the same batch again (a redelivery): the dedup token drops it
    BatchWriter(wh).write(TCP_SAMPLE, batch)
    assert _rows(wh) == _want(batch)
    assert _aborted(warehouse_service) == before


def test_a_chunk_failing_the_checks_mid_stream_falls_back_with_nothing_lost_or_duplicated(wh, warehouse_service):
    """Record 900 (chunk 15 of 16) holds a space between tokens: valid JSON the plain checks do not
    take (a space could hide a quoted number). Chunks 1-14 were already in the engine when it was
    found: the request is cut off (the service counts an aborted body), that insert fails, and the
    per-record path inserts all 1,000 records once."""
    spaced = line(tcp_sample(900)).replace(b'"pop":"tyo1"', b'"pop": "tyo1"')
    batch = _batch({900: spaced})
    before = _aborted(warehouse_service)
    res = BatchWriter(wh).write(TCP_SAMPLE, batch)
    assert _aborted(warehouse_service) == before + 1, "the stream was cut off mid-way"
    assert (res.inserted, res.dead_total) == (N, 0)
    assert _rows(wh) == _want(batch)


def test_a_bad_record_in_a_late_chunk_is_a_dead_letter_and_the_rest_land_once(wh, warehouse_service):
    """A record the contract refuses (an integer beyond its field's width) in the last chunk: the
    streamed insert is cut off, the per-record path dead-letters it and inserts the other 999."""
    wide = line(tcp_sample(990)).replace(b'"cwnd":', b'"cwnd":18446744073709551617,"x":', 1)
    batch = _batch({990: wide})
    res = BatchWriter(wh).write(TCP_SAMPLE, batch)
    assert (res.inserted, res.dead_total) == (N - 1, 1)
    assert _rows(wh) == _want(batch, skip={990})
    assert wh.query("SELECT _partition, _offset FROM dead_letters FINAL WHERE _topic = 'ccab.tcp.v1'").rows == \
        [(1, 7990)]


def test_a_row_the_engine_refuses_mid_stream_inserts_nothing_and_the_staged_path_takes_the_batch(wh):
    """A sample rate out of (0, 1] passes the byte checks; the engine refuses it (a landing
    constraint) while later chunks are still coming: the service reads the rest of the body and
    answers ClickHouse's error, nothing of the streamed insert is in, and the staged path inserts
    the other 999 once."""
    bad = line(tcp_sample(300)).replace(b'"sample_rate":1.0', b'"sample_rate":1.5')
    assert b'"sample_rate":1.5' in bad
    batch = _batch({300: bad})
    res = BatchWriter(wh).write(TCP_SAMPLE, batch)
    assert (res.inserted, res.dead_total) == (N - 1, 1)
    assert _rows(wh) == _want(batch, skip={300})
