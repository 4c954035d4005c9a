"""A streamed insert (issue 28): the body of ``INSERT ... SELECT ... FROM input('s') FORMAT f`` goes
into the engine through a named pipe as it arrives, so the engine parses while the rest is in
transit. A body that ends early — the client gone, a malformed chunked encoding — fails the insert
with nothing inserted, wherever it was cut; the engine's own refusal is ClickHouse's error; the
service keeps serving, and streamed inserts take their admission slots like any statement.
Real service process, real chdb, raw sockets and clickhouse-connect; nothing mocked."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.parse
import urllib.request
import uuid

import pytest
from ccab.base.warehouse import ServerWarehouse, WarehouseError

INSERT = "INSERT INTO t (id, s) SELECT id, s FROM input('id UInt64, s String') FORMAT JSONEachRow"


@pytest.fixture
def remote(warehouse_service):
    wh = ServerWarehouse(f"{warehouse_service}/t_{uuid.uuid4().hex[:12]}")
    wh.command("CREATE TABLE t (id UInt64, s String) ENGINE = MergeTree ORDER BY id")
    yield wh
    wh.close()


def _rows(a: int, b: int) -> bytes:
    return b"\n".join(b'{"id":%d,"s":"row %d, \\"quoted\\" {x}"}' % (i, i) for i in range(a, b))


def _metric(url: str, name: str) -> int:
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name} (\d+)$", text, re.M)
    return int(m.group(1)) if m else 0


def _wait(what, timeout_s: float = 60.0) -> None:
    """Wait until ``what()`` holds (an event in another process; not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.02)


def _open(url: str, database: str, headers: str = "Transfer-Encoding: chunked\r\n",
          session_id: str = "") -> socket.socket:
    """A raw HTTP request of INSERT, headers sent, body not yet."""
    port = int(url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    query = urllib.parse.urlencode({"database": database, "query": INSERT,
                                    **({"session_id": session_id} if session_id else {})})
    sock.sendall(f"POST /?{query} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n{headers}\r\n"
                 .encode())
    return sock


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    f = sock.makefile("rb")
    status = int(f.readline().split()[1])
    headers = {}
    while (ln := f.readline().decode().strip()):
        k, v = ln.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    return status, headers, f.read(int(headers.get("content-length", 0)))


def test_a_streamed_insert_lands_every_row_exactly_once(remote, warehouse_service):
    """Chunks cut anywhere (mid-record, mid-string): their concatenation is the data. By
    clickhouse-connect (chunked transfer), by hand with chunks, and with Content-Length (read in
    pieces by the service)."""
    data = _rows(0, 30_000)

    def chunks():
        at = 0
        for size in (1, 7, 1000, 65_537, 300_000, 1 << 20):
            yield data[at:at + size]
            at += size
        while at < len(data):
            yield data[at:at + 777_777]
            at += 777_777

    before = _metric(warehouse_service, "ccab_warehouse_aborted_bodies_total")
    remote.command_input("INSERT INTO t (id, s) SELECT id, s FROM {input}", chunks(), "JSONEachRow",
                         "id UInt64, s String")
    assert remote.query("SELECT count(), uniqExact(id), min(id), max(id), countIf(s != concat('row ', toString(id), "
                        "', \"quoted\" {x}')) FROM t").rows == [(30_000, 30_000, 0, 29_999, 0)]
    sock = _open(warehouse_service, remote.database)
    sock.sendall(_chunk(_rows(30_000, 30_500)) + _chunk(b"\n" + _rows(30_500, 31_000)) + b"0\r\n\r\n")
    assert _answer(sock)[0] == 200
    sock.close()
    body = _rows(31_000, 32_000)
    sock = _open(warehouse_service, remote.database, f"Content-Length: {len(body)}\r\n")
    sock.sendall(body)
    assert _answer(sock)[0] == 200
    sock.close()
    assert remote.query("SELECT count(), uniqExact(id) FROM t").rows == [(32_000, 32_000)]
    assert _metric(warehouse_service, "ccab_warehouse_aborted_bodies_total") == before


def test_a_body_cut_off_anywhere_inserts_nothing_and_the_service_keeps_serving(remote, warehouse_service):
    """The client goes away after part of the body — at a record boundary, after the newline, in a
    key, in a string, inside an escape, in a number, mid chunk, in a chunk's size line; chunked or
    Content-Length: the insert fails (the service puts ABORT_BYTES after what came) and not one
    row lands. Then the same session inserts and queries as usual."""
    data = _rows(0, 2000)
    second = data.index(b"\n") + 1
    cuts = [second - 1, second, second + 2, second + 8, data.index(b"row", second) + 2,
            data.index(b"\\", second) + 1, data.index(b":", second) + 2, len(data) // 2]
    session = f"s{uuid.uuid4().hex[:8]}"
    aborted = _metric(warehouse_service, "ccab_warehouse_aborted_bodies_total")
    for cut in cuts:
        for how in ("chunked", "mid chunk", "size line", "length"):
            if how == "length":
                sock = _open(warehouse_service, remote.database, f"Content-Length: {len(data)}\r\n", session)
                sock.sendall(data[:cut])
            else:
                sock = _open(warehouse_service, remote.database, session_id=session)
                sent = _chunk(data[:cut])
                if how == "mid chunk":
                    sent = b"%x\r\n%s" % (len(data), data[:cut])
                elif how == "size line":
                    sent += b"1"
                sock.sendall(sent)
            sock.close()
            aborted += 1
            _wait(lambda: _metric(warehouse_service, "ccab_warehouse_aborted_bodies_total") >= aborted)
            assert remote.query("SELECT count() FROM t").scalar() == 0, (cut, how)
    sock = _open(warehouse_service, remote.database, session_id=session)
    sock.sendall(_chunk(data) + b"0\r\n\r\n")
    assert _answer(sock)[0] == 200
    sock.close()
    assert remote.query("SELECT count(), uniqExact(id) FROM t").rows == [(2000, 2000)]


def test_a_malformed_chunked_body_is_refused_with_clickhouse_error_and_nothing_inserted(remote, warehouse_service):
    sock = _open(warehouse_service, remote.database)
    sock.sendall(_chunk(_rows(0, 100)) + b"zz\r\n" + _rows(100, 200) + b"\r\n0\r\n\r\n")
    status, headers, body = _answer(sock)
    sock.close()
    assert (status, headers["x-clickhouse-exception-code"]) == (500, "33"), body
    assert body.startswith(b"Code: 33. DB::Exception: the request body ended early (malformed chunked encoding"), body
    assert b"nothing was inserted" in body
    assert remote.query("SELECT count() FROM t").scalar() == 0


def test_the_engines_refusal_mid_stream_is_clickhouses_error_and_nothing_goes_in(remote):
    """A bad row in the first chunk while five more follow: the engine stops reading, the service
    reads (and drops) the rest of the body, answers ClickHouse's code and words, and the same
    connection carries the next statement."""
    def chunks():
        yield _rows(0, 10) + b'\n{"id":"ten","s":"x"}'
        for k in range(5):
            yield b"\n" + _rows(100 + 1000 * k, 1100 + 1000 * k)

    with pytest.raises(WarehouseError) as e:
        remote.command_input("INSERT INTO t (id, s) SELECT id, s FROM {input}", chunks(), "JSONEachRow",
                             "id UInt64, s String")
    assert e.value.code in (26, 27, 6, 117) and str(e.value).startswith("Code: "), e.value
    assert remote.query("SELECT count() FROM t").scalar() == 0


def test_a_chunk_producer_that_fails_cuts_the_request_off_and_its_error_is_raised(remote, warehouse_service):
    """The loader's way to give up mid-batch: its chunk generator raises; the client cuts the
    request off, the service's insert fails, nothing lands, the caller gets the generator's error."""
    class Nope(Exception):
        pass

    def chunks():
        yield _rows(0, 500)
        yield b"\n" + _rows(500, 1000)
        raise Nope("a chunk failed the checks")

    before = _metric(warehouse_service, "ccab_warehouse_aborted_bodies_total")
    with pytest.raises(Nope):
        remote.command_input("INSERT INTO t (id, s) SELECT id, s FROM {input}", chunks(), "JSONEachRow",
                             "id UInt64, s String")
    _wait(lambda: _metric(warehouse_service, "ccab_warehouse_aborted_bodies_total") > before)
    assert remote.query("SELECT count() FROM t").scalar() == 0
    remote.command_input("INSERT INTO t (id, s) SELECT id, s FROM {input}", iter([_rows(0, 10)]), "JSONEachRow",
                         "id UInt64, s String")
    assert remote.query("SELECT count() FROM t").scalar() == 10


def test_streamed_inserts_hold_batch_slots_and_a_priority_statement_still_passes(remote, warehouse_service):
    """The session's service has 4 slots, 1 of them for priority statements. Three streamed inserts
    whose bodies are still coming take the three batch slots; a batch query queues behind them, a
    priority query (a breaker's) runs at once; when one body ends, the batch query runs."""
    def health() -> dict:
        import json
        return json.loads(urllib.request.urlopen(f"{warehouse_service}/healthz", timeout=10).read())

    waiting = ServerWarehouse(f"{warehouse_service}/{remote.database}")  # connected before the slots fill
    urgent = ServerWarehouse(f"{warehouse_service}/{remote.database}", priority=1)
    socks = []
    for k in range(3):
        sock = _open(warehouse_service, remote.database)
        sock.sendall(_chunk(_rows(1000 * k, 1000 * k + 500)))
        socks.append(sock)
    _wait(lambda: health()["running"] == 3)
    batch_answer: list = []
    batch = threading.Thread(target=lambda: batch_answer.append(waiting.query("SELECT count() FROM t").scalar()))
    batch.start()
    _wait(lambda: health()["queued"] == 1)
    assert urgent.query("SELECT 1").scalar() == 1  # not behind the three inserts nor the queued query
    assert batch_answer == [] and health()["queued"] == 1
    socks[0].sendall(_chunk(b"\n" + _rows(500, 1000)) + b"0\r\n\r\n")
    assert _answer(socks[0])[0] == 200
    batch.join(60)
    assert batch_answer and batch_answer[0] in (0, 1000)
    for k, sock in enumerate(socks[1:], 1):
        sock.sendall(_chunk(b"\n" + _rows(1000 * k + 500, 1000 * k + 1000)) + b"0\r\n\r\n")
        assert _answer(sock)[0] == 200
        sock.close()
    socks[0].close()
    urgent.close()
    waiting.close()
    assert remote.query("SELECT count(), uniqExact(id) FROM t").rows == [(3000, 3000)]
