"""Hostile records, third round (issue 29), through the loader's batch path on the real engine:
one record nested thousands deep, or refused by ClickHouse in a way no path expects, is a dead
letter while the good records beside it load; duplicate keys at any depth are refused in every
schema; a value of the wrong JSON type, or outside what its field means, is a dead letter naming
the field (the cases derived from the contracts, not listed by hand); a ``ts_ms`` outside the
plausible window is a dead letter and cannot break ``ccab networks load``."""

from __future__ import annotations

import json

import pytest
from ccab import cli
from ccab.base import contracts
from ccab.base.contracts import TCP_SAMPLE, TS_MAX_AHEAD_MS, TS_MS_MIN, Schema
from ccab.base.warehouse import connect
from ccab.ingest import batch as batch_mod
from ccab.ingest.batch import Batch, BatchWriter
from ccab.ingest.loader import load_files
from factories import tcp_sample
from hostile_cases import DATA_SCHEMAS, DEEP, FACTORY, confusion_cases, dump, duplicate_cases, raw

def _load(wh, tmp_path, name: str, lines: list[bytes]):
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return load_files(wh, [path]), f"file:{name}"


def _dead(wh, topic: str) -> dict[int, str]:
    return {int(o): r for o, r in wh.query("SELECT _offset, reason FROM dead_letters FINAL WHERE _topic = {t:String}",
                                            params={"t": topic}).rows}


def _rows(wh, schema: Schema, topic: str) -> int:
    return int(wh.query(f"SELECT count() FROM {schema.table} WHERE _topic = {{t:String}}", params={"t": topic}).scalar())


# --------------------------------------------------------------------------- nesting


@pytest.mark.parametrize("schema", DATA_SCHEMAS, ids=lambda s: s.name)
def test_one_record_nested_thousands_deep_is_a_dead_letter_beside_1000_good(warehouse, tmp_path, schema):
    """Before: ClickHouse's Code 306 TOO_DEEP_RECURSION failed the whole batch (``ccab load``
    exit 1, 0 of the 1,000 good records loaded; the Kafka loader retried it for ever)."""
    make = FACTORY[schema.name]
    good = [dump(make(i)) for i in range(1000)]
    for field in ("pop", "extra"):  # in a contract member and in an unknown one
        lines = good[:500] + [raw(make(5000), field, DEEP)] + good[500:]
        rep, topic = _load(warehouse, tmp_path, f"deep-{field}.jsonl", lines)
        assert rep.inserted == {schema.table: 1000}, rep
        dead = _dead(warehouse, topic)
        assert list(dead) == [501] and "nested 5001 levels deep" in dead[501], dead


def test_a_batch_clickhouse_refuses_in_an_unexpected_way_is_isolated(warehouse, monkeypatch):
    """The class behind the nesting case: a refusal whose error code no path expects (here a
    real Code 306 from ClickHouse, its depth limit lowered below ours) is not raised for the
    caller to retry for ever while the warehouse answers: the batch is bisected, the record
    ClickHouse refuses is a dead letter naming the error, the rest is loaded."""
    monkeypatch.setitem(batch_mod.INSERT_SETTINGS, "input_format_json_max_depth", 3)
    recs = [dump(tcp_sample(i)) for i in range(1000)]
    recs[700] = raw(tcp_sample(700), "extra", b"[" * 10 + b"]" * 10)  # within our limit of 64
    res = BatchWriter(warehouse).write(TCP_SAMPLE, Batch("iso", recs, [0] * 1000, list(range(1000))))
    assert res.inserted == 999 and res.dead_total == 1, res
    [(offset, reason)] = _dead(warehouse, "iso").items()
    assert offset == 700 and "code 306" in reason and "TOO_DEEP_RECURSION" in reason, reason


# --------------------------------------------------------------------------- duplicate keys


@pytest.mark.parametrize("schema", DATA_SCHEMAS, ids=lambda s: s.name)
def test_duplicate_keys_are_dead_letters_in_every_schema_at_any_depth(warehouse, tmp_path, schema):
    """Before: tcp_conn/1 stored a record with a nested object holding a duplicate key (every
    schema did: ClickHouse skips unknown members without looking inside)."""
    make = FACTORY[schema.name]
    bad = duplicate_cases(schema)
    good = [dump(make(i)) for i in range(10, 30)]
    rep, topic = _load(warehouse, tmp_path, "dup.jsonl", good + bad)
    assert rep.inserted == {schema.table: len(good)}, rep
    dead = _dead(warehouse, topic)
    assert sorted(dead) == list(range(len(good) + 1, len(good) + len(bad) + 1)), dead
    assert all(r.startswith("duplicate key") for r in dead.values()), dead


# --------------------------------------------------------------------------- type confusion


@pytest.mark.parametrize("schema", DATA_SCHEMAS, ids=lambda s: s.name)
def test_a_value_of_the_wrong_type_or_outside_its_bounds_is_a_dead_letter_naming_the_field(warehouse, tmp_path,
                                                                                            schema):
    """Before: ``"pop": {"a":1}`` was stored as the text ``{"a":1}``, ``"5"`` read as 5, ``1`` as
    true; a negative or 1e308 ``sample_rate``, a negative ``request_time_ms``, a ``ts_ms`` in
    the year 2200 were stored."""
    cases = confusion_cases(schema)
    good = [dump(FACTORY[schema.name](10_000 + i)) for i in range(50)]
    rep, topic = _load(warehouse, tmp_path, "types.jsonl", good + [line for _, line in cases])
    dead = _dead(warehouse, topic)
    stored = [(cases[o - 51][0], cases[o - 51][1][-120:]) for o in range(51, 51 + len(cases)) if o not in dead]
    assert not stored, f"{len(stored)} of {len(cases)} stored, e.g. {stored[:6]}"
    unnamed = [(cases[o - 51][0], r) for o, r in dead.items() if o > 50 and cases[o - 51][0] not in r]
    assert not unnamed, unnamed[:6]
    assert rep.inserted == {schema.table: len(good)}, rep
    # each alone, in its own batch: the same fate whatever the neighbours
    writer = BatchWriter(warehouse)
    for k, (name, line) in enumerate(cases[::7]):
        res = writer.write(schema, Batch(f"alone-{schema.table}-{k}", [line], [0], [0]))
        assert res.inserted == 0 and res.dead_total == 1 and name in next(iter(res.dead)), (name, line[-80:], res)


def test_the_time_window_keeps_the_warehouse_clock_and_a_day(warehouse):
    import time

    now_ms = int(time.time() * 1000)
    writer = BatchWriter(warehouse)
    for ts, ok in ((TS_MS_MIN, True), (now_ms, True), (now_ms + TS_MAX_AHEAD_MS - 60_000, True),
                   (now_ms + TS_MAX_AHEAD_MS + 60_000, False), (TS_MS_MIN - 1, False)):
        res = writer.write(TCP_SAMPLE, Batch(f"window-{ts}", [dump(tcp_sample(1, ts_ms=ts))], [0], [0]))
        assert (res.inserted == 1) == ok, (ts, res)
        assert contracts.validate(tcp_sample(1, ts_ms=ts)) == ([] if ok else [contracts.bound_reason(
            TCP_SAMPLE.field("ts_ms"))])


def test_a_record_in_the_year_2200_cannot_break_networks_load(tmp_path, warehouse_env, capsys):
    """Before: after ``ccab load`` of one tcp_sample in 2200, every ``ccab networks load`` failed
    with Code 407 Convert overflow (the newest ``ts_ms`` does not fit a DateTime)."""
    data = tmp_path / "samples.jsonl"
    data.write_bytes(dump(tcp_sample(1)) + b"\n" + dump(tcp_sample(2, ts_ms=7_258_118_400_000)) + b"\n")
    assert cli.main(["load", str(data)]) == 0
    nets = tmp_path / "networks.csv"
    nets.write_text("network,asn,as_name,country,access\n203.0.113.0/24,64500,EXAMPLE,JP,fixed\n")
    capsys.readouterr()
    assert cli.main(["networks", "load", str(nets)]) == 0, capsys.readouterr()
    wh = connect()
    try:
        assert wh.query("SELECT count() FROM dead_letters FINAL WHERE reason LIKE '%ts_ms%time window%'").scalar() == 1
    finally:
        wh.close()
