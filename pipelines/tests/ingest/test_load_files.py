"""`ccab load`: replay files through the loader's validation and insert path, against real chdb."""

from __future__ import annotations

import json

import pytest
from ccab import cli
from ccab.base.contracts import SCHEMAS
from ccab.ingest.batch import Batch, BatchWriter, Record
from ccab.ingest.loader import load_files
from factories import http_request, line, tcp_sample


def _count(wh, sql):
    return wh.query(sql).scalar()


@pytest.fixture
def mixed_file(tmp_path):
    """Valid records mixed with every kind of bad one the issue names."""
    good = [line(tcp_sample(i)) for i in range(10)] + [line(http_request(i)) for i in range(5)]
    bad = {
        "unknown schema": line(tcp_sample(100, schema="tcp_sample/9")),
        "truncated": line(tcp_sample(101))[:120],
        "string where an int belongs": line(tcp_sample(102, cwnd="lots")),
        "missing required field": line({k: v for k, v in tcp_sample(103).items() if k != "mss"}),
        "10 MB line": line(tcp_sample(104, padding="x" * (10 << 20))),
    }
    lines = good[:7] + list(bad.values()) + good[7:]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, len(good), bad


def test_valid_rows_load_and_each_bad_one_is_dead_lettered_with_its_reason(warehouse, mixed_file):
    path, n_good, bad = mixed_file
    report = load_files(warehouse, [path])
    assert report.inserted == {"tcp_samples": 10, "http_requests": 5}
    assert _count(warehouse, "SELECT count() FROM tcp_samples") == 10
    assert _count(warehouse, "SELECT count() FROM http_requests") == 5
    dead = warehouse.query("SELECT _offset, reason, raw_bytes, raw FROM dead_letters FINAL ORDER BY _offset").rows
    assert [r[0] for r in dead] == [8, 9, 10, 11, 12]  # line numbers of the bad lines
    reasons = [r[1] for r in dead]
    assert reasons[0] == "unknown schema 'tcp_sample/9'"
    assert reasons[1].startswith("bad JSON")
    assert reasons[2].startswith("field cwnd: expected uint")
    assert reasons[3] == "missing required field mss"
    assert reasons[4].startswith("oversize: 1048") and reasons[4].endswith("> limit 1048576") and dead[4][2] > 10 << 20
    # the raw payload is kept whole, so nothing is lost
    assert json.loads(dead[2][3])["cwnd"] == "lots"
    assert len(dead[4][3]) == dead[4][2]


def test_cli_exit_status_is_nonzero_only_with_strict(warehouse_env, mixed_file, capsys):
    path, _, _ = mixed_file
    assert cli.main(["load", str(path)]) == 0
    out = capsys.readouterr().out
    assert "10 rows inserted" in out and "5 records rejected" in out
    assert cli.main(["load", "--strict", str(path)]) == 1


def test_cli_missing_file_is_a_clear_error(warehouse_env, tmp_path, capsys):
    assert cli.main(["load", str(tmp_path / "nope.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_loading_the_same_file_twice_does_not_double(warehouse, mixed_file):
    path, _, _ = mixed_file
    load_files(warehouse, [path])
    load_files(warehouse, [path])
    assert _count(warehouse, "SELECT count() FROM tcp_samples") == 10
    assert _count(warehouse, "SELECT count() FROM dead_letters FINAL") == 5


def test_clickhouse_rejects_on_its_own_what_python_validation_rejects(warehouse):
    """The hot path never runs Python validation: the landing-table constraints must catch
    every bad kind by themselves (check table: writes nothing)."""
    from ccab.base.warehouse import WarehouseError
    from ccab.ingest.batch import INSERT_SETTINGS, precheck

    schema = SCHEMAS["tcp_sample/1"]
    cases = {
        "wrong schema": tcp_sample(1, schema="http_request/1"),
        "string for int": tcp_sample(2, cwnd="lots"),
        "negative uint": tcp_sample(3, cwnd=-4),
        "number for string": tcp_sample(4, host=17),
        "missing required": {k: v for k, v in tcp_sample(5).items() if k != "rtt_us"},
        "null required": tcp_sample(6, mss=None),
    }
    for name, rec in cases.items():
        data, why = precheck(Record(line(rec), "t", 0, 1), 1 << 20)
        assert why is None
        with pytest.raises(WarehouseError):
            warehouse.insert_raw(schema.check_table, data, "JSONEachRow", dict(INSERT_SETTINGS, insert_deduplicate=0))
            pytest.fail(f"ClickHouse accepted {name}")
    ok, _ = precheck(Record(line(tcp_sample(7)), "t", 0, 1), 1 << 20)
    warehouse.insert_raw(schema.check_table, ok, "JSONEachRow", dict(INSERT_SETTINGS, insert_deduplicate=0))
    assert _count(warehouse, "SELECT count() FROM tcp_samples") == 0  # check table writes nothing


def test_a_batch_with_a_bad_row_in_the_middle_keeps_its_neighbours(warehouse):
    recs = [Record(line(tcp_sample(i)), "ccab.tcp.v1", 0, i) for i in range(1000)]
    recs[500] = Record(line(tcp_sample(500, cwnd="x")), "ccab.tcp.v1", 0, 500)
    recs[501] = Record(b'{"schema":"tcp_sample/1"}', "ccab.tcp.v1", 0, 501)
    res = BatchWriter(warehouse).write(SCHEMAS["tcp_sample/1"], Batch.of(recs))
    assert res.inserted == 998 and res.dead_total == 2
    assert _count(warehouse, "SELECT count() FROM tcp_samples") == 998
    assert _count(warehouse, "SELECT groupArray(_offset) FROM (SELECT _offset FROM dead_letters FINAL ORDER BY _offset)") == [500, 501]


def test_derived_columns(warehouse, tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_bytes(line(tcp_sample(0)) + b"\n" + line(http_request(0)) + b"\n")
    load_files(warehouse, [p])
    retrans_pct, inflight = warehouse.query("SELECT retrans_pct, inflight_bytes FROM tcp_samples").rows[0]
    assert retrans_pct == pytest.approx(100 * 430056 / 2762784)  # a percentage (0019_raw_percent_aliases)
    assert inflight == 292496 - 292496
    goodput = warehouse.query("SELECT goodput_bps FROM http_requests").scalar()
    assert goodput == pytest.approx(4194304 * 8 / 0.912)


@pytest.mark.parametrize(
    "payload, expect",
    [
        (b'{"a":1}', b'{"_topic":"t","_partition":2,"_offset":7,"a":1}'),
        (b'  {"a":1}\n', b'{"_topic":"t","_partition":2,"_offset":7,"a":1}'),
        (b'{ "a": 1 }', b'{"_topic":"t","_partition":2,"_offset":7, "a": 1 }'),
        (b'{}', b'{"_topic":"t","_partition":2,"_offset":7}'),
        (b'{ }', b'{"_topic":"t","_partition":2,"_offset":7}'),
        (b'{"a":\n1}', b'{"_topic":"t","_partition":2,"_offset":7,"a": 1}'),
    ],
)
def test_precheck_splices_the_source_position_into_the_object(payload, expect):
    from ccab.ingest.batch import precheck

    assert precheck(Record(payload, "t", 2, 7), 1 << 20) == (expect, None)


@pytest.mark.parametrize(
    "payload, reason",
    [(b"", "bad JSON: empty record"), (b"[1]", "bad JSON: not a JSON object"),
     (b'{"a":1', "bad JSON: truncated (no closing brace)"), (b"{" + b" " * 100 + b"}", "oversize: 102 bytes > limit 50")],
)
def test_precheck_rejects_what_cannot_be_a_record(payload, reason):
    from ccab.ingest.batch import precheck

    assert precheck(Record(payload, "t", 0, 1), 50) == (None, reason)


def test_fast_and_slow_preparation_paths_agree(warehouse):
    from ccab.base.contracts import TCP_SAMPLE
    from ccab.ingest.batch import precheck

    good = line(tcp_sample(1))
    reordered = json.dumps({"ts_ms": 1, **tcp_sample(2)}, separators=(",", ":")).encode()
    payloads = [good, b" " + good, good.replace(b',"ts_ms"', b',\n"ts_ms"'), b"nope", reordered, line(tcp_sample(3))]
    batch = Batch("t", payloads, [0, 1, 0, 1, 0, 1], [10, 11, 12, 13, 14, 15])
    lines, kept, dead = BatchWriter(warehouse)._prepare(TCP_SAMPLE, batch)
    expected = [precheck(batch.record(i), 1 << 20) for i in range(len(payloads))]
    assert lines == [ln for ln, why in expected if why is None]
    assert kept == [0, 1, 2, 4, 5] and [why for _, why in dead] == ["bad JSON: not a JSON object"]