"""The same record is stored once, whatever brought it (issue 29): ``ccab load`` recognised a
loaded file by its name and positions only, so a renamed copy or the first 2,000 lines of a
loaded file loaded again (110,201 rows, 106,198 distinct ``(host, sock_id, ts_ms)``), and a
record loaded from a file and from Kafka was stored twice. Now each raw table keeps one row per
natural key (``Schema.key``; the landing view drops a row whose key the table holds). Real chdb,
real broker, the CLI."""

from __future__ import annotations

from ccab import cli
from ccab.base.contracts import HTTP_REQUEST, TCP_CONN, TCP_SAMPLE
from ccab.base.warehouse import connect
from ccab.ingest.loader import Loader
from factories import http_request, tcp_sample
from hostile_cases import dump, tcp_conn

SCHEMAS3 = (TCP_SAMPLE, TCP_CONN, HTTP_REQUEST)


def _records() -> dict[str, list[bytes]]:
    return {TCP_SAMPLE.name: [dump(tcp_sample(i)) for i in range(3000)],
            TCP_CONN.name: [dump(tcp_conn(i)) for i in range(500)],
            HTTP_REQUEST.name: [dump(http_request(i)) for i in range(1000)]}


def _counts(wh) -> dict[str, tuple[int, int]]:
    out = {}
    for s in SCHEMAS3:
        key = ", ".join(s.key)
        out[s.table] = tuple(int(x) for x in wh.query(f"SELECT count(), uniqExact({key}) FROM {s.table}").rows[0])
    return out


def test_a_record_is_stored_once_via_renamed_files_prefixes_duplicates_and_kafka(tmp_path, warehouse_env, capsys,
                                                                                 kafka_broker, fresh_topic):
    from confluent_kafka import Producer

    recs = _records()
    lines = [b for name in recs for b in recs[name]]
    original = tmp_path / "day1.jsonl"
    original.write_bytes(b"\n".join(lines) + b"\n")
    renamed = tmp_path / "day1-copy.jsonl"
    renamed.write_bytes(original.read_bytes())
    prefix = tmp_path / "day1-head.jsonl"
    prefix.write_bytes(b"\n".join(lines[:2000]) + b"\n")
    doubled = tmp_path / "doubled.jsonl"  # the same record twice in one batch
    doubled.write_bytes(b"\n".join(lines[2500:2600] * 2) + b"\n")

    assert cli.main(["load", str(original)]) == 0
    capsys.readouterr()
    for path in (renamed, prefix, doubled):
        assert cli.main(["load", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tcp_samples                   0 rows inserted (3,000 already loaded: skipped as duplicates)" in out, out

    # the same records through Kafka (another name, another path) after the files
    topics = {s.name: fresh_topic("dedupe." + s.name.split("/")[0], partitions=2) for s in SCHEMAS3}
    producer = Producer({"bootstrap.servers": kafka_broker, "linger.ms": 5})
    for name, bodies in recs.items():
        for i, body in enumerate(bodies):
            producer.produce(topics[name], value=body, key=b"h%d" % (i % 5))
    assert producer.flush(60) == 0
    wh = connect()
    try:
        loader = Loader(wh, kafka_broker, {topics[s.name]: s for s in SCHEMAS3}, group=f"g-{topics[TCP_SAMPLE.name]}",
                        batch_rows=700, batch_wait_s=0.2)
        loader.run(max_idle_s=3, max_records=len(lines))
        assert _counts(wh) == {s.table: (len(recs[s.name]),) * 2 for s in SCHEMAS3}, _counts(wh)
        # and a new record in a batch of old ones is stored
        fresh = tmp_path / "day2.jsonl"
        fresh.write_bytes(b"\n".join(lines[:100] + [dump(tcp_sample(10_000))]) + b"\n")
    finally:
        wh.close()
    assert cli.main(["load", str(fresh)]) == 0
    wh = connect()
    try:
        assert _counts(wh)[TCP_SAMPLE.table] == (3001, 3001)
    finally:
        wh.close()
