"""The clean batch's path (issue 19): the consumer's bytes go to ClickHouse joined once, and
ClickHouse attaches each row's source position from the batch's runs of offsets (real chdb)."""

from __future__ import annotations

from ccab.base.contracts import TCP_SAMPLE
from ccab.ingest.batch import MAX_PLAIN_RUNS, Batch, BatchWriter, offset_runs
from factories import line, tcp_sample


class _Spy:
    """The warehouse, recording which statements the writer sends."""

    def __init__(self, wh):
        self.wh, self.calls = wh, []

    def __getattr__(self, name):
        attr = getattr(self.wh, name)
        if name in ("insert_raw", "query", "query_input", "command", "command_input"):
            def recorded(*a, **k):
                self.calls.append(name)
                return attr(*a, **k)
            return recorded
        return attr


def _positions(wh) -> dict[str, tuple[int, int]]:
    return {s: (int(p), int(o)) for s, p, o in wh.query("SELECT sock_id, _partition, _offset FROM tcp_samples").rows}


def _batch(layout: list[tuple[int, int, int]], bad: dict[int, bytes] | None = None) -> tuple[Batch, dict]:
    """Records in runs (partition, first offset, count), in this order; ``bad``: row -> payload."""
    payloads, parts, offs, want = [], [], [], {}
    for p, first, count in layout:
        for o in range(first, first + count):
            rec = tcp_sample(len(payloads))
            body = (bad or {}).get(len(payloads), line(rec))
            if len(payloads) not in (bad or {}):
                want[rec["sock_id"]] = (p, o)
            payloads.append(body)
            parts.append(p)
            offs.append(o)
    return Batch("ccab.tcp.v1", payloads, parts, offs), want


# interleaved partitions, gaps inside a partition (compaction, transaction markers), a lone record
LAYOUT = [(0, 0, 700), (1, 5, 300), (0, 700, 200), (2, 10_000, 1), (1, 400, 500), (0, 5_000, 299)]


def test_a_clean_batch_is_one_insert_with_each_rows_position_attached_by_clickhouse(warehouse):
    batch, want = _batch(LAYOUT)
    spy = _Spy(warehouse)
    res = BatchWriter(spy).write(TCP_SAMPLE, batch)
    assert (res.inserted, res.dead_total) == (len(batch), 0)
    assert spy.calls == ["command_input"]  # no per-record splice, no second statement
    assert _positions(warehouse) == want


def test_a_line_holding_two_objects_never_shifts_the_positions_of_the_others(warehouse):
    """ClickHouse reads two rows from such a line: numbered blindly, every later row would carry
    its neighbour's position. The plain insert refuses the batch instead (the staged path finds
    the line)."""
    two = line(tcp_sample(10_000)) + line(tcp_sample(10_001))
    batch, want = _batch(LAYOUT, bad={50: two})
    res = BatchWriter(warehouse).write(TCP_SAMPLE, batch)
    assert (res.inserted, res.dead_total) == (len(batch) - 1, 1)
    assert _positions(warehouse) == want


def test_a_batch_cut_in_many_runs_takes_the_per_record_path_with_the_same_positions(warehouse):
    layout = [(i % 2, i, 1) for i in range(2 * MAX_PLAIN_RUNS + 3)]
    batch, want = _batch(layout)
    assert offset_runs(batch.partitions, batch.offsets) is None
    res = BatchWriter(warehouse).write(TCP_SAMPLE, batch)
    assert (res.inserted, res.dead_total) == (len(batch), 0)
    assert _positions(warehouse) == want


def test_offset_runs():
    runs = offset_runs([0, 0, 0, 1, 1, 0, 0], [5, 6, 7, 3, 4, 9, 10])
    assert (runs.starts, runs.parts, runs.firsts) == ([0, 3, 5], [0, 1, 0], [5, 3, 9])
    assert runs.spans == {0: [5, 10], 1: [3, 4]}


def test_records_the_reader_refuses_with_rarer_error_codes_are_dead_letters_not_retries(warehouse):
    """Before: a lone ``"app_limited":-1`` (CANNOT_PARSE_BOOL, 467) or a lone surrogate escape
    (CANNOT_PARSE_ESCAPE_SEQUENCE, 25) raised as "the warehouse is unwell": the loader retried
    the batch for ever."""
    for n, body in enumerate([line(tcp_sample(1, app_limited=-1)),
                              line(tcp_sample(2)).replace(b'"kernel":"', b'"kernel":"\\ud800', 1)]):
        res = BatchWriter(warehouse).write(TCP_SAMPLE, Batch("ccab.tcp.v1", [body], [0], [n]))
        assert (res.inserted, res.dead_total) == (0, 1), res.dead


def test_the_careful_paths_shortcut_for_wide_integers_agrees_with_the_strict_reading(monkeypatch):
    """A record with a number beyond its field's width is dead by a regex over its bytes, not a
    strict decode: only where that cannot change its fate (no nested object, no backslash)."""
    from ccab.ingest import batch as B

    base = line(tcp_sample(1))
    big = str(2**64 + 1).encode()
    cases = [
        base.replace(b'"bytes_acked":', b'"bytes_acked":' + big + b',"z":', 1),  # the usual one
        base.replace(b'"ts_ms":', b'"ts_ms":-' + big + b',"z":', 1),
        base[:-1] + b',"meta":{"bytes_acked":' + big + b'}}',  # nested: not a contract field
        base[:-1] + b',"note":"\\",\\"bytes_acked\\":' + big + b',\\""}',  # inside a string
        base[:-1] + b',"bytes_acked":' + big + b'}',  # also a duplicate key
        base[:-1] + b',"sample_rate_x":' + big + b'}',  # unknown member: loads
        base.replace(b'"sample_rate":1.0', b'"sample_rate":' + big, 1),  # a float field: loads
        base.replace(b'"bytes_acked":', b'"bytes_acked":0' + big + b',"z":', 1),  # leading zero: not JSON
        base.replace(b'"bytes_acked":', b'"bytes_acked":' + str(2**64 - 1).encode() + b',"z":', 1),  # the edge: loads
    ]
    for n, body in enumerate(cases):
        rec = B.Record(body, "t", 0, n)
        fast = B.careful(rec, TCP_SAMPLE, 1 << 20)
        with monkeypatch.context() as m:
            m.setattr(B, "_wide_int_reason", lambda *_a: None)
            strict = B.careful(rec, TCP_SAMPLE, 1 << 20)
        assert (fast[0] is None) == (strict[0] is None), (n, fast[1], strict[1])
        if strict[1] and "integer out of range" in strict[1]:
            assert fast[1] == strict[1]
    assert B._wide_int_reason(cases[0], TCP_SAMPLE) == "field bytes_acked: integer out of range 0..18446744073709551615"
