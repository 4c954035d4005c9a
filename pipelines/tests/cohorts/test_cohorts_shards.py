"""The hourly job per shard (``ccab cohorts run --shard K``) on a shard layout of one embedded
engine (``CCAB_CLICKHOUSE_SHARDS=3``): the union of the shards' rollups is the single-node rollup
of the same records. Not tested here (no ClickHouse server can run): Distributed reads of the
rollups, one server per shard with ``--fleet-samples`` naming a Distributed table."""

from __future__ import annotations

import pytest
from ccab import cli
from ccab.base.warehouse import connect, shard_database

#: a cluster's layout (3 shard databases, every shard migrated and loaded) end to end: the system tier
pytestmark = pytest.mark.system

SHARDS = 3
WINDOW = ["--from", "2025-11-20T12:00Z", "--to", "2025-11-20T14:00Z"]


@pytest.fixture(scope="module")
def sim_dir(tiny_world):
    return tiny_world  # the shared `ccab sim tiny --hours 2` (conftest)


def _rows(wh, database: str, table: str, order: str, final: str = "FINAL") -> list[tuple]:
    """Every row of ``table`` (merged), Float64 sums to 10 significant digits (the same values may
    be added in another order: single node and shards differ in the last bits, nothing else)."""
    res = wh.query(f"SELECT * FROM {database}.{table} {final} ORDER BY {order}")
    floats = [i for i, t in enumerate(res.types) if "Float" in t]
    return [tuple(float(f"{float(v):.10g}") if i in floats else v for i, v in enumerate(row)) for row in res.rows]


HOURLY_KEY = "pop, rollout_id, metric, segment, arm, kernel, cc, cc_version, host, hour"
HEATMAP_KEY = "pop, rollout_id, pair, segment, arm, kernel, cc, cc_version, host, hour, x_bin, y_bin"
PREFIX_KEY = "pop, hour, peer_prefix"


def test_union_of_per_shard_rollups_is_the_single_node_rollup(warehouse_env, sim_dir, monkeypatch, capsys):
    files = [str(sim_dir / "ccab.tcp.v1.jsonl"), str(sim_dir / "ccab.http.v1.jsonl")]
    # single node: database ccab of the data dir
    networks = ["networks", "load", str(sim_dir / "networks.csv"), "--top", "3"]
    assert cli.main(["load", *files]) == 0
    assert cli.main(networks) == 0
    assert cli.main(["cohorts", "run", *WINDOW]) == 0
    # the same records on 3 shard databases of the same engine, the job once per shard; the
    # networks and the fleet's ASN ranking loaded into every shard (the asn:* segments must agree)
    monkeypatch.setenv("CCAB_CLICKHOUSE_SHARDS", str(SHARDS))
    assert cli.main(["load", *files]) == 0
    assert cli.main(networks) == 0
    for k in range(SHARDS):
        assert cli.main(["cohorts", "run", *WINDOW, "--shard", str(k)]) == 0
    out = capsys.readouterr().out
    assert all(f"shard {k} (" in out for k in range(SHARDS)), out

    wh = connect()  # the single node and, beside it, its shard databases
    base = wh.database
    try:
        dbs = [shard_database(base, k) for k in range(SHARDS)]
        raw = [int(wh.query(f"SELECT count() FROM {db}.tcp_samples").scalar()) for db in dbs]
        assert sum(raw) == int(wh.query(f"SELECT count() FROM {base}.tcp_samples").scalar()) and sum(r > 0 for r in raw) >= 2
        # the case that matters: client prefixes seen by hosts on different shards
        spanning = int(wh.query(
            f"SELECT count() FROM (SELECT peer_prefix FROM merge(REGEXP('^{base}_shard[0-9]+$'), '^tcp_samples$') "
            "GROUP BY peer_prefix HAVING uniqExact(_database) > 1)").scalar())
        assert spanning > 0
        # the client-network segments are really there (not all 'unknown'), ASNs of their own included
        segments = {r[0] for r in wh.query(f"SELECT DISTINCT segment FROM {base}.cohort_hourly").rows}
        assert any(s.startswith("country:") and s != "country:unknown" for s in segments), segments
        assert sum(s.startswith("asn:") and s[4:].isdigit() for s in segments) == 3, segments
        for table, key in (("cohort_hourly", HOURLY_KEY), ("cohort_heatmap_hourly", HEATMAP_KEY)):
            single = _rows(wh, base, table, key)
            union = sorted((r for db in dbs for r in _rows(wh, db, table, key)), key=repr)
            assert len(single) > 0 and union == sorted(single, key=repr), table
        # prefix RTT classes pool the whole fleet: every shard has the single-node classes
        single_prefixes = _rows(wh, base, "cohort_prefix_hourly", PREFIX_KEY, final="")
        for db in dbs:
            assert _rows(wh, db, "cohort_prefix_hourly", PREFIX_KEY, final="") == single_prefixes
    finally:
        wh.close()


def test_a_late_sample_on_another_shard_makes_the_hour_stale(warehouse_env, sim_dir, monkeypatch):
    """The prefix RTT classes of a shard's hour pool the fleet's samples, so a sample arriving late
    on shard 1 changes shard 0's classes too: its hour must look stale to shard 0's job."""
    from ccab.base.config import settings
    from ccab.base.warehouse import close_all, connect_shards
    from ccab.cohorts.job import JobConfig, fleet_samples, stale_hours
    from datetime import datetime, timezone

    monkeypatch.setenv("CCAB_CLICKHOUSE_SHARDS", str(SHARDS))
    assert cli.main(["load", str(sim_dir / "ccab.tcp.v1.jsonl"), str(sim_dir / "ccab.http.v1.jsonl")]) == 0
    assert cli.main(["cohorts", "run", *WINDOW]) == 0  # every shard in turn
    start, end = datetime(2025, 11, 20, 12, tzinfo=timezone.utc), datetime(2025, 11, 20, 14, tzinfo=timezone.utc)
    shards = connect_shards(settings())
    try:
        cfg = JobConfig(prefix_samples=fleet_samples("(" + "|".join(wh.database for wh in shards) + ")"))
        assert all(stale_hours(wh, start, end, cfg) == {} for wh in shards)
        # one sample of 12:xx arrives late on shard 1 only
        late = shards[1]
        late.command("INSERT INTO tcp_samples SELECT * FROM tcp_samples "
                     "WHERE ts >= '2025-11-20 12:00:00' AND ts < '2025-11-20 13:00:00' LIMIT 1")
        assert list(stale_hours(shards[0], start, end, cfg)) == [start]
        assert list(stale_hours(shards[2], start, end, cfg)) == [start]
    finally:
        close_all(shards)
