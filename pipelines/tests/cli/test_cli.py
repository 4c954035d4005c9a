"""The `ccab` CLI as a person uses it: help texts, query output, db commands, env."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ccab import cli
from factories import line, tcp_sample


def test_every_command_has_help():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"kafka", "db", "loader", "load", "query", "env"} <= set(sub.choices)
    for name, p in sub.choices.items():
        assert p.format_help().startswith("usage: ccab " + name), name


def test_ccab_without_a_command_prints_help_and_exits_2():
    out = subprocess.run([sys.executable, "-m", "ccab.cli"], capture_output=True, text=True)
    assert out.returncode == 2 and "COMMAND" in out.stdout


def test_db_migrate_then_status_then_query(empty_warehouse_env, capsys, tmp_path):
    assert cli.main(["db", "migrate"]) == 0
    assert "migration(s) applied" in capsys.readouterr().out
    assert cli.main(["db", "migrate"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert cli.main(["db", "status"]) == 0
    assert "0001_raw_tables.sql" in capsys.readouterr().out
    f = tmp_path / "x.jsonl"
    f.write_bytes(b"\n".join(line(tcp_sample(i)) for i in range(3)))
    assert cli.main(["load", str(f)]) == 0
    capsys.readouterr()
    assert cli.main(["query", "SELECT arm, count() AS n FROM tcp_samples GROUP BY arm ORDER BY arm"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["arm", "n"] and out[2].split() == ["bbr2", "2"] and out[3].split() == ["control", "1"]
    assert cli.main(["query", "--format", "json", "SELECT 1 AS one"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"one": 1}]


def test_query_errors_are_reported_not_raised(warehouse_env, capsys):
    assert cli.main(["query", "SELECT * FROM nope"]) == 1
    assert "nope" in capsys.readouterr().err


def test_gen_landing_check_passes_on_the_committed_file(capsys):
    assert cli.main(["db", "gen-landing", "--check"]) == 0


def test_env_says_embedded_by_default_and_server_when_set(monkeypatch, capsys):
    monkeypatch.delenv("CCAB_CLICKHOUSE_URL", raising=False)
    monkeypatch.delenv("CCAB_KAFKA_BROKERS", raising=False)
    cli.main(["env"])
    out = capsys.readouterr().out
    assert "embedded chdb" in out and "local broker" in out
    monkeypatch.setenv("CCAB_CLICKHOUSE_URL", "http://u:secret@ch1:8123/ccab")
    monkeypatch.setenv("CCAB_KAFKA_BROKERS", "k1:9092")
    cli.main(["env"])
    out = capsys.readouterr().out
    assert "server ch1:8123/ccab" in out and "secret" not in out and "cluster k1:9092" in out


def test_server_warehouse_maps_the_url_and_errors(monkeypatch):
    """Unit test of the server adapter's wiring (no ClickHouse server can run here; the SQL
    itself is exercised against the real engine through chdb everywhere else)."""
    import clickhouse_connect
    from ccab.base.warehouse import ServerWarehouse, WarehouseError

    calls = []

    class FakeClient:
        def __init__(self, **kw):
            calls.append(kw)

        def command(self, sql, parameters=None, settings=None):
            if "boom" in sql:
                raise RuntimeError("Code: 60. DB::Exception: Unknown table boom")

        def close(self):
            pass

    monkeypatch.setattr(clickhouse_connect, "get_client", lambda **kw: FakeClient(**kw))
    wh = ServerWarehouse("https://alice:pw@ch.example:8443/edge")
    assert wh.database == "edge"
    assert calls == [dict(host="ch.example", port=8443, username="alice", password="pw", secure=True,
                          compress=True, settings=None)]  # one client: it creates the database, then uses it
    assert wh._client.database == "edge"
    with pytest.raises(WarehouseError) as exc:
        wh.command("SELECT boom")
    assert exc.value.code == 60


def test_query_is_read_only_unless_write(warehouse_env, tmp_path, capsys):
    """Analysts cannot change the warehouse by accident (issue 29): without --write ClickHouse's
    readonly setting refuses INSERT, DROP, ALTER, TRUNCATE..., also after a trailing `--` comment
    (which would hide a SETTINGS clause on the same line) and when the statement tries to turn
    readonly off itself."""
    f = tmp_path / "x.jsonl"
    f.write_bytes(b"\n".join(line(tcp_sample(i)) for i in range(3)))
    assert cli.main(["load", str(f)]) == 0

    def count() -> int:
        capsys.readouterr()
        assert cli.main(["query", "--format", "json", "SELECT count() AS n FROM tcp_samples"]) == 0
        return json.loads(capsys.readouterr().out)[0]["n"]

    assert count() == 3
    for sql in ("DROP TABLE tcp_samples", "TRUNCATE TABLE tcp_samples", "INSERT INTO tcp_samples SELECT * FROM tcp_samples",
                "INSERT INTO tcp_samples SELECT * FROM tcp_samples --", "ALTER TABLE tcp_samples DELETE WHERE 1",
                "CREATE TABLE scratch (x UInt8) ENGINE = Memory"):
        assert cli.main(["query", sql]) == 1, sql
        err = capsys.readouterr().err
        assert "read-only" in err and "--write" in err and err.count("\n") == 1, (sql, err)
    assert cli.main(["query", "SELECT 1 SETTINGS readonly = 0"]) == 1
    assert "cannot change the readonly setting; use --write" in capsys.readouterr().err
    assert count() == 3
    assert cli.main(["query", "--write", "INSERT INTO tcp_samples SELECT * FROM tcp_samples"]) == 0
    assert count() == 6


def test_a_known_rollout_without_alerts_is_not_an_error(warehouse_env, capsys):
    from ccab.base.warehouse import connect

    assert cli.main(["db", "migrate"]) == 0
    wh = connect()
    try:
        wh.command("INSERT INTO assignments (rollout_id, generation, pop, host, arm, cc) VALUES ('r1', 1, 'tyo1', 'h1', 'control', 'cubic')")
    finally:
        wh.close()
    capsys.readouterr()
    assert cli.main(["alerts", "--rollout", "r1"]) == 0
    assert capsys.readouterr().out.strip() == "no page or ticket alerts for r1"
    assert cli.main(["verdicts", "--rollout", "r1"]) == 0
    assert cli.main(["alerts", "--rollout", "r2"]) == 2
    assert "(known: r1)" in capsys.readouterr().err


def test_dashboards_check_says_ok(capsys):
    assert cli.main(["dashboards", "check"]) == 0
    assert capsys.readouterr().out.startswith("ccab dashboards check: OK: ")


def test_raw_retrans_pct_is_a_percentage_like_everywhere_else(warehouse_env, tmp_path, capsys):
    """tcp_samples.retrans_pct / rwnd_limited_pct are percentages (issue 29: they held fractions while
    every other retrans_pct — rollups, judge, views, dashboards — is 100 x bytes_retrans / bytes_sent)."""
    f = tmp_path / "x.jsonl"
    f.write_bytes(line(tcp_sample(0, bytes_sent=1000, bytes_retrans=84, busy_ms=200, rwnd_limited_ms=50)))
    assert cli.main(["load", str(f)]) == 0
    capsys.readouterr()
    assert cli.main(["query", "--format", "json", "SELECT retrans_pct, rwnd_limited_pct FROM tcp_samples"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"retrans_pct": 8.4, "rwnd_limited_pct": 25.0}]
