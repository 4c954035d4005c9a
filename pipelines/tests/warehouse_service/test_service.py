"""The warehouse service speaks the part of ClickHouse's HTTP interface clickhouse-connect uses:
the same answers as the engine in-process (values, types, parameters, error codes), inserts and
external tables, a session's temporary tables, admission, metrics, and one line when it is down.
Real service process, real chdb, real clickhouse-connect; nothing mocked."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid

import pytest
from ccab.base.warehouse import ChdbWarehouse, ServerWarehouse, WarehouseError
from ccab.warehouse_service.engine import Admission, replace_identifier, split_input_insert, split_insert
from paths import REPO

CCAB = [sys.executable, "-m", "ccab.cli"]
NASTY = ["plain", "tab\there", "new\nline", "back\\slash", "quote'd", 'dq"', "nul\0byte", "ünï €", "", "\\N", "{x:String}"]


@pytest.fixture
def both(tmp_path, warehouse_service):
    """The engine in this process and a fresh database on the service, same DDL on each."""
    local = ChdbWarehouse(tmp_path / "wh")
    remote = ServerWarehouse(f"{warehouse_service}/t_{uuid.uuid4().hex[:12]}")
    ddl = ("CREATE TABLE IF NOT EXISTS t (id UInt64, s String, n Nullable(Int32), ts DateTime('UTC'), "
           "d Decimal(10, 3), arr Array(String), f Float64, m Map(String, UInt8)) ENGINE = MergeTree ORDER BY id")
    for wh in (local, remote):
        wh.command(ddl)
    yield local, remote
    local.close()
    remote.close()


def test_same_values_and_types_as_the_embedded_engine(both):
    rows = b"\n".join(
        b'{"id":%d,"s":"%s","n":%s,"ts":"2026-11-27 12:%02d:28","d":"%d.125","arr":["a","b\'"],"f":%d.5,"m":{"k":%d}}'
        % (i, b"x" * i, b"null" if i % 3 == 0 else str(-i).encode(), i, i, i, i) for i in range(50))
    for wh in both:
        wh.insert_raw("t", rows, "JSONEachRow")
    queries = [
        ("SELECT * FROM t ORDER BY id", None),
        ("SELECT count() AS c, sum(id) AS s, avg(f) AS a, max(ts) AS t, bitShiftLeft(toUInt64(1), 63) AS big FROM t", None),
        ("SELECT {s:String} AS s, length({s:String}) AS n", "s"),
        ("SELECT has({a:Array(String)}, {s:String}) AS h, {a:Array(String)} AS a", "a"),
        ("SELECT {x:Nullable(String)} AS x, {i:Int64} AS i, {f:Float64} AS f", "x"),
        ("SELECT id, s FROM t WHERE id IN {ids:Array(UInt64)} ORDER BY id", "ids"),
    ]
    local, remote = both
    for sql, kind in queries:
        params_list = [None]
        if kind == "s":
            params_list = [{"s": v} for v in NASTY]
        elif kind == "a":
            params_list = [{"a": NASTY, "s": v} for v in NASTY[:4]]
        elif kind == "x":
            params_list = [{"x": None, "i": -7, "f": 0.25}, {"x": "y'z", "i": 2 ** 62, "f": -1e300}]
        elif kind == "ids":
            params_list = [{"ids": [1, 5, 49]}]
        for params in params_list:
            a, b = local.query(sql, params), remote.query(sql, params)
            assert (a.columns, a.types, a.rows) == (b.columns, b.types, b.rows), (sql, params)
    assert remote.query("SELECT {s:String} AS s", {"s": "tab\there"}).scalar() == "tab\there"


def test_errors_keep_clickhouse_codes_and_words(both):
    local, remote = both
    for sql, code in (("SELECT * FROM nope", 60), ("SELEC 1", 62), ("SELECT throwIf(1, 'boom')", 395),
                      ("SELECT x FROM t", 47)):
        with pytest.raises(WarehouseError) as a:
            local.query(sql)
        with pytest.raises(WarehouseError) as b:
            remote.query(sql)
        assert a.value.code == b.value.code == code, (sql, str(b.value))
        assert str(b.value).startswith(f"Code: {code}. DB::Exception:"), str(b.value)
    with pytest.raises(WarehouseError) as e:
        remote.insert_raw("t", b'{"id":"not a number"}\n', "JSONEachRow")
    assert e.value.code != 0


def test_inserts_external_tables_and_a_sessions_temporary_tables(both, warehouse_service):
    _, remote = both
    structure = "id UInt64, s String"
    data = b'{"id":1,"s":"a"}\n{"id":2,"s":"b\\tc"}\n{"id":3,"s":"d"}'
    res = remote.query_input("SELECT sum(id) AS total, groupArray(s) AS ss FROM {input}", data, "JSONEachRow", structure)
    assert res.rows == [(6, ["a", "b\tc", "d"])]
    remote.command_input("INSERT INTO t (id, s) SELECT id + {k:UInt64}, s FROM {input}", data, "JSONEachRow",
                         structure, params={"k": 100})
    assert remote.query("SELECT groupArray(id) FROM (SELECT id FROM t ORDER BY id)").scalar() == [101, 102, 103]
    remote.insert_raw("t", b"", "JSONEachRow")  # an empty insert inserts nothing
    # a temporary table lives in the client's session (the loader stages rejected batches there)
    remote.command("CREATE TEMPORARY TABLE IF NOT EXISTS stage (x UInt8) ENGINE = Memory")
    remote.insert_raw("stage", b'{"x":7}\n', "JSONEachRow")
    assert remote.query("SELECT sum(x) FROM stage").scalar() == 7
    other = ServerWarehouse(f"{warehouse_service}/{remote.database}")
    try:
        with pytest.raises(WarehouseError) as e:
            other.query("SELECT * FROM stage")
        assert e.value.code == 60
    finally:
        other.close()


def test_an_insert_select_from_input_takes_its_rows_from_the_raw_body(both, warehouse_service):
    """``INSERT ... SELECT ... FROM input('structure') FORMAT f`` in ``query``, the rows as the whole
    request body (ClickHouse's HTTP form; how the loader's plain path sends a batch): read back
    in order, each transformed by the SELECT (bind parameters, row numbers), nothing else taken
    from the body as SQL, and a bad row refuses the insert as a whole."""
    _, remote = both
    n = 5000
    rows = b"\n".join(b'{"id":%d,"s":"r%d \'q\' FORMAT x; input(\'y\')"}' % (i, i) for i in range(n))
    remote.command_input("INSERT INTO t (id, s, f) SELECT id + {k:UInt64}, s, rowNumberInAllBlocks() FROM {input}",
                         rows, "JSONEachRow", "id UInt64, s String", params={"k": 1000},
                         settings={"max_threads": 1})
    got = remote.query("SELECT count(), countIf(id != toUInt64(f) + 1000), countIf(s != concat('r', toString(id - 1000), "
                       "' \\'q\\' FORMAT x; input(\\'y\\')')) FROM t").rows
    assert got == [(n, 0, 0)]
    # the same request by hand: statement in `query`, the rows as the raw body (no multipart form)
    sql = "INSERT INTO t (id, s) SELECT id, upper(s) FROM input('id UInt64, s String') FORMAT JSONEachRow"
    req = urllib.request.Request(f"{warehouse_service}/?database={remote.database}&query={urllib.parse.quote(sql)}",
                                 data=b'{"id":1,"s":"abc"}\n{"id":2,"s":"de"}\n', method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    assert urllib.request.urlopen(req, timeout=30).status == 200
    assert remote.query("SELECT groupArray(s) FROM (SELECT s FROM t WHERE id < 1000 ORDER BY id)").scalar() == ["ABC", "DE"]
    with pytest.raises(WarehouseError) as e:  # a string where an int belongs: nothing of the body goes in
        remote.command_input("INSERT INTO t (id, s) SELECT id, s FROM {input}", b'{"id":3,"s":"a"}\n{"id":"x","s":"b"}',
                             "JSONEachRow", "id UInt64, s String")
    assert e.value.code in (26, 27, 6, 117), e.value
    assert remote.query("SELECT count() FROM t WHERE id = 3").scalar() == 0


def test_a_priority_statement_goes_first_and_has_a_slot_batch_work_cannot_take():
    adm = Admission(slots=2, reserved=1)
    order: list[str] = []
    assert adm.acquire(False) < 1  # one batch statement runs: the batch slots are full
    started = threading.Event()

    def worker(name: str, urgent: bool) -> None:
        started.set()
        adm.acquire(urgent)
        order.append(name)

    batch = threading.Thread(target=worker, args=("batch", False))
    batch.start()
    started.wait()
    while adm.queued < 1:
        time.sleep(0.01)
    urgent = threading.Thread(target=worker, args=("priority", True))
    urgent.start()
    urgent.join(10)
    assert order == ["priority"], "the priority statement took the reserved slot while batch work waits"
    adm.release(True)
    adm.release(False)
    batch.join(10)
    assert order == ["priority", "batch"]


def test_helpers_split_inserts_and_name_external_tables():
    assert split_insert(b"INSERT INTO t (a, b) FORMAT JSONEachRow\n{}\n") [:2] == ("t (a, b)", "JSONEachRow")
    assert bytes(split_insert(b"INSERT INTO t FORMAT Native\n\x01\x02")[2]) == b"\x01\x02"
    assert split_insert(b"INSERT INTO t SELECT 1") is None
    assert split_input_insert("INSERT INTO t (a) SELECT a + 1 FROM input('a UInt8, b String') FORMAT JSONEachRow") == (
        "INSERT INTO t (a) SELECT a + 1 FROM {input}", "JSONEachRow", "a UInt8, b String")
    assert split_input_insert("INSERT INTO t SELECT 'input(\\'x\\')' FROM input('a UInt8') FORMAT CSV")[0] == (
        "INSERT INTO t SELECT 'input(\\'x\\')' FROM {input}")
    assert split_input_insert("INSERT INTO t SELECT * FROM input('a UInt8')") is None  # no FORMAT: no rows
    assert split_input_insert("INSERT INTO t SELECT * FROM u FORMAT CSV") is None  # no input()
    assert split_input_insert("SELECT * FROM input('a UInt8') FORMAT CSV") is None
    sql = "SELECT ccab_input.x, 'ccab_input' FROM ccab_input -- ccab_input\nJOIN t.ccab_input"
    assert replace_identifier(sql, "ccab_input", "F") == "SELECT F.x, 'ccab_input' FROM F -- ccab_input\nJOIN t.ccab_input"


def test_answers_are_not_held_back_by_nagles_algorithm():
    """Every answer is two writes (headers, then the body); with Nagle's algorithm on, the body
    waited for the client's delayed ACK (40 ms on Linux): every statement took >= 40 ms. The
    service's connections have TCP_NODELAY set."""
    import socket

    from ccab.warehouse_service.http import WarehouseHTTPServer

    seen = []
    server = WarehouseHTTPServer(("127.0.0.1", 0), engine=None, log=lambda _line: None)
    real = server.RequestHandlerClass

    class Recording(real):
        def handle(self):
            seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            super().handle()

    server.RequestHandlerClass = Recording
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/ping", timeout=5).read() == b"Ok.\n"
    finally:
        server.shutdown()
        server.server_close()
    assert seen and all(seen), seen


def test_health_metrics_and_ping(warehouse_service, both):
    _, remote = both
    remote.query("SELECT 1", settings={"priority": 1})
    assert urllib.request.urlopen(warehouse_service + "/ping").read() == b"Ok.\n"
    metrics = urllib.request.urlopen(warehouse_service + "/metrics").read().decode()
    for name in ('ccab_warehouse_statements_total{statement="query",priority="priority"}',
                 'ccab_warehouse_queue_wait_seconds_bucket{priority="batch",le="0.001"}',
                 'ccab_warehouse_errors_total{code="', "ccab_warehouse_sessions "):
        assert name in metrics, name


def test_a_command_that_finds_it_down_says_so_in_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "CCAB_CLICKHOUSE_URL"}
    # CCAB_WAREHOUSE_WAIT_S=0: at once (the default waits 20 s for a restarting service, saying so
    # first: test_waiting_for_the_service.py)
    env.update(CCAB_DATA_DIR=str(tmp_path / "data"), CCAB_WAREHOUSE_PORT=str(port), CCAB_WAREHOUSE_WAIT_S="0")
    for args in (["query", "SELECT 1"], ["db", "migrate"], ["power", "--metric", "retrans_pct", "--statistic", "ratio", "--mde", "0.1"],
                 ["verdicts"]):
        p = subprocess.run([*CCAB, *args], env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "the local warehouse is not running: start it with `ccab warehouse up`" in lines[0], \
            (args, p.stderr)
    p = subprocess.run([*CCAB, "warehouse", "status"], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 1 and "not running" in p.stdout


def test_up_status_down_and_another_data_dirs_service_is_refused(local_warehouse, tmp_path, monkeypatch):
    env = dict(os.environ)
    p = subprocess.run([*CCAB, "warehouse", "status"], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0 and f"engine {local_warehouse / 'warehouse'}" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([*CCAB, "warehouse", "up"], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert p.returncode == 0 and "already running" in p.stdout
    other = dict(env, CCAB_DATA_DIR=str(tmp_path / "other"))  # same port, another data dir
    for args in (["query", "SELECT 1"], ["warehouse", "up"]):
        p = subprocess.run([*CCAB, *args], env=other, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert p.returncode == 1 and "CCAB_WAREHOUSE_PORT" in p.stderr and str(local_warehouse) in p.stderr, p.stderr
    # a second service on the same engine is refused before it opens chdb
    p = subprocess.run([*CCAB, "warehouse", "serve", "--port", "0"], env=env, capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    assert p.returncode == 1 and "another warehouse service owns" in p.stderr, p.stderr
