"""Warehouse connection, migrations and the cluster DDL variant, on the real (embedded) engine."""

from __future__ import annotations

import re

from ccab.base import contracts
from ccab.base import schema as migrate
from ccab.base.warehouse import WarehouseError, split_statements

TABLES = {"tcp_samples", "tcp_conns", "http_requests", "assignments", "agent_status", "dead_letters"}


def test_split_statements_respects_quotes_and_comments():
    sql = "SELECT ';' ; -- a ; comment\nSELECT 2; /* ; */ SELECT `a;b`;"
    assert list(split_statements(sql)) == ["SELECT ';'", "SELECT 2", "SELECT `a;b`"]


def test_migrate_creates_the_raw_tables_and_rerunning_is_a_noop(warehouse):
    tables = {r[0] for r in warehouse.query("SELECT name FROM system.tables WHERE database = currentDatabase()").rows}
    assert TABLES <= tables
    assert migrate.migrate(warehouse, log=lambda _m: None) == []  # fixture already migrated
    assert set(migrate.applied(warehouse)) == {m.version for m in migrate.discover()}


def test_every_migration_statement_is_idempotent(warehouse):
    for mig in migrate.discover():
        for stmt in split_statements(mig.sql):
            warehouse.command(stmt)  # a second run must not fail


def test_raw_tables_have_audit_columns_and_ttl(warehouse):
    for table in ("tcp_samples", "http_requests", "agent_status"):
        cols = {r[0] for r in warehouse.query(f"SELECT name FROM system.columns WHERE database = currentDatabase() AND table = '{table}'").rows}
        assert {"_topic", "_partition", "_offset", "_loaded_at"} <= cols
        ddl = warehouse.query(f"SHOW CREATE TABLE {table}").scalar()
        assert "TTL" in ddl and "non_replicated_deduplication_window" in ddl


def test_errors_carry_the_clickhouse_code(warehouse):
    try:
        warehouse.query("SELECT * FROM no_such_table")
    except WarehouseError as exc:
        assert exc.code == 60 and "no_such_table" in str(exc)
    else:
        raise AssertionError("expected an error")


def test_cluster_ddl_makes_replicated_locals_and_distributed_tables():
    stmts = [s for m in migrate.discover() for s in migrate.cluster_statements(m.sql, "ccab")]
    text = "\n".join(stmts)
    for t in TABLES:
        assert re.search(rf"CREATE TABLE IF NOT EXISTS {t}_local ON CLUSTER 'ccab'", text), t
        assert re.search(rf"CREATE TABLE IF NOT EXISTS {t} ON CLUSTER 'ccab' AS {t}_local\nENGINE = Distributed", text), t
    assert "ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/tcp_samples_local', '{replica}')" in text
    assert "ReplicatedReplacingMergeTree(" in text  # dead_letters keeps its engine family
    assert "Distributed('ccab', currentDatabase(), tcp_samples_local, cityHash64(host))" in text
    assert "Distributed('ccab', currentDatabase(), dead_letters_local, cityHash64(_topic, _partition))" in text
    # materialized views write to the shard-local tables
    mvs = [s for s in stmts if s.startswith("CREATE MATERIALIZED VIEW")]
    # ... and read only shard-local tables: the landing block and, for the natural-key dedupe, the raw table
    assert len(mvs) == len(contracts.SCHEMAS) and all(re.search(r"TO \w+_local AS", s) for s in mvs)
    for s in mvs:
        sources = re.findall(r"\bFROM\s+(\w+)", s)
        assert any(t.endswith("_landing_local") for t in sources) and all(t.endswith("_local") for t in sources), sources
    # nothing single-node is left behind
    assert not re.search(r"ENGINE = MergeTree\b", text)


def test_cluster_ddl_is_valid_sql_for_clickhouse(warehouse):
    """Parse every generated statement with the real ClickHouse parser (no cluster needed)."""
    for m in migrate.discover():
        for stmt in migrate.cluster_statements(m.sql, "ccab"):
            formatted = warehouse.query("SELECT formatQuerySingleLine({q:String})", params={"q": stmt}).scalar()
            assert formatted.startswith(("CREATE", "ALTER TABLE"))


def test_goodput_alias_is_null_for_a_zero_request_time(warehouse):
    # nginx logs request_time 0.000 for bodies served within a millisecond: no goodput, not an error
    warehouse.command(
        "INSERT INTO http_requests (ts_ms, pop, host, kernel, arm, rollout_id, cc, peer_prefix, conn_serial, "
        "conn_requests, method, status, bytes_sent, body_bytes_sent, request_time_ms, sample_rate, _topic, "
        "_partition, _offset) VALUES "
        "(1, 'p', 'h', 'k', 'a', 'r', 'cubic', '192.0.2.0/24', 1, 1, 'GET', 200, 10, 10, 0, 1, 't', 0, 0), "
        "(2, 'p', 'h', 'k', 'a', 'r', 'cubic', '192.0.2.0/24', 1, 1, 'GET', 200, 10, 1000, 1, 1, 't', 0, 1)")
    assert warehouse.query("SELECT goodput_bps FROM http_requests ORDER BY ts_ms").rows == [(None,), (8_000_000,)]


def test_a_contract_change_re_creates_the_landing_layer(warehouse):
    """The landing layer is derived from the contracts: when 0002_landing.sql changes, migrate drops
    and re-creates it (after the numbered migrations), and records land with the new fields."""
    migrate.migrate(warehouse, log=lambda _m: None)
    warehouse.command("INSERT INTO schema_migrations (version, name, checksum, applied_at) "
                      "VALUES (2, 'landing', 'an-older-contract', now() + 60)")
    assert [m.version for m in migrate.migrate(warehouse, log=lambda _m: None)] == [2]
    assert migrate.migrate(warehouse, log=lambda _m: None) == []
    columns = {r[0] for r in warehouse.query("SELECT name FROM system.columns WHERE table = 'http_requests_landing'").rows}
    assert {"peer_prefix", "ts_source"} <= columns


HOSTILE_STRINGS = ["bs\\x", "tyo1-bbr-canary\\x", "a\\\\b", "\\", "\\N", "it's", 'q"q', "tab\there", "new\nline",
                   "cr\rlf", "nul\0byte", "\\x41", "\\u0041", "ünïcødé € 😀", "", "'; DROP TABLE t; --",
                   "{x:String}", "`tick`", "\b\f\a\v"]


def test_hostile_strings_round_trip_through_query_parameters(warehouse):
    """ClickHouse reads parameter values as escaped text: before the warehouse escaped them, a
    backslash failed the query (CANNOT_PARSE_ESCAPE_SEQUENCE) or changed the value."""
    for s in HOSTILE_STRINGS:
        got = warehouse.query("SELECT {s:String} AS v, {a:Array(String)} AS a, {n:Nullable(String)} AS n",
                              params={"s": s, "a": [s, "z"], "n": None}).rows[0]
        assert got == (s, [s, "z"], None), repr(s)


def test_server_binding_escapes_as_the_engine_reads(warehouse):
    """ServerWarehouse passes parameters through clickhouse-connect's server-side binding; its
    text for a hostile string must read back as the string in the real engine."""
    from clickhouse_connect.driver.binding import bind_query

    for s in HOSTILE_STRINGS:
        _, bound = bind_query("SELECT {s:String}", {"s": s})
        text = bound.get("param_s", bound.get("s"))
        got = warehouse._session.query("SELECT {s:String}", "JSONCompact", params={"s": text}).bytes()
        import orjson

        assert orjson.loads(got)["data"][0][0] == s, repr(s)
