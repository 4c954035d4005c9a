"""``ccab db cluster-ddl`` read back by the real engine's parser (chdb's ``formatQuery`` and
``EXPLAIN AST`` parse DDL for engines it cannot run). Parsing is all this proves: no ClickHouse
server, Keeper or second node runs here, so the DDL is never executed on a cluster."""

from __future__ import annotations

import re

import pytest
from ccab import cli
from ccab.base.schema import discover
from ccab.base.warehouse import ChdbWarehouse, split_statements
from ccab.ingest.shards import SHARD_KEY_SQL


@pytest.fixture(scope="module")
def cluster_ddl(tmp_path_factory) -> list[str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["db", "cluster-ddl", "--cluster", "edge_fleet"]) == 0
    return list(split_statements(out.getvalue()))


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    wh = ChdbWarehouse(tmp_path_factory.mktemp("ddl-parser") / "warehouse")
    yield wh
    wh.close()


def formatted(engine, stmt: str) -> str:
    return engine.query("SELECT formatQuerySingleLine({q:String})", params={"q": stmt}).scalar()


def test_every_statement_parses_and_runs_on_the_whole_cluster(engine, cluster_ddl):
    assert len(cluster_ddl) > 50
    for stmt in cluster_ddl:
        text = formatted(engine, stmt)  # raises on a syntax error, naming the statement
        assert re.search(r"ON CLUSTER edge_fleet\b", text), f"runs on one node only: {text[:160]}"


def test_each_table_is_a_replicated_local_table_under_a_distributed_one(engine, cluster_ddl):
    tables = {m.group(1) for mig in discover() for m in re.finditer(r"CREATE TABLE IF NOT EXISTS (\w+)", mig.sql)}
    texts = [formatted(engine, s) for s in cluster_ddl]
    paths = []
    for name in tables:
        local = [t for t in texts if t.startswith(f"CREATE TABLE IF NOT EXISTS {name}_local ON CLUSTER")]
        dist = [t for t in texts if t.startswith(f"CREATE TABLE IF NOT EXISTS {name} ON CLUSTER")]
        assert len(local) == 1 and len(dist) == 1, name
        engine_args = re.search(r"ENGINE = `?(\w+)`?(\('([^']*)')?", local[0])
        assert engine_args.group(1) == "Null" or engine_args.group(1).startswith("Replicated"), local[0][:200]
        if engine_args.group(1) != "Null":
            paths.append(engine_args.group(3))
        assert f"ENGINE = Distributed('edge_fleet', currentDatabase(), {name}_local, " in dist[0], dist[0]
    assert len(paths) == len(set(paths)), "two Replicated tables share a Keeper path"


def test_rows_with_a_host_are_sharded_by_the_key_the_loader_splits_by(engine, cluster_ddl):
    for name in ("tcp_samples", "http_requests", "tcp_conns", "cohort_hourly", "cohort_hourly_stage"):
        dist = next(s for s in cluster_ddl if s.startswith(f"CREATE TABLE IF NOT EXISTS {name} ON CLUSTER"))
        ast = "\n".join(r[0] for r in engine.query(f"EXPLAIN AST {dist}").rows)
        assert re.search(r"Function cityHash64 \(children 1\)\n\s+ExpressionList \(children 1\)\n\s+Identifier host$",
                         ast, re.M), (name, ast)
    assert SHARD_KEY_SQL.startswith("cityHash64(JSONExtractString(line, 'host')) %")


def test_every_sharding_key_names_columns_of_its_table(engine, cluster_ddl):
    """A Distributed table whose key names a column its table lacks cannot be created."""
    for stmt in cluster_ddl:
        m = re.match(r"CREATE TABLE IF NOT EXISTS (\w+)_local ON CLUSTER '\w+'\s*\((.*)\)\s*ENGINE", stmt, re.S)
        if not m:
            continue
        columns = set(re.findall(r"^\s+(\w+)\s", m.group(2), re.M))
        dist = next(s for s in cluster_ddl if s.startswith(f"CREATE TABLE IF NOT EXISTS {m.group(1)} ON CLUSTER"))
        key = re.search(r"_local, (.*)\)$", dist.strip()).group(1)
        used = set(re.findall(r"\b([a-z_]\w*)\b(?!\()", key))
        assert used <= columns, (m.group(1), key, sorted(used - columns))
