"""Migration 0018 (histogram cells as rows): a warehouse whose rollups hold the earlier Map
histograms (`hist` of cohort_hourly and cohort_daily) keeps them, as cells, on the real engine."""

from __future__ import annotations

import shutil

from ccab.base import schema
from ccab.base.warehouse import ChdbWarehouse

KEYS = "'tyo1', 'r1', 'control', '6.1', 'cubic', 0, 'h1'"


def test_0018_converts_the_maps_to_cells_and_drops_them(tmp_path):
    before = tmp_path / "migrations"
    before.mkdir()
    for p in schema.discover():
        if p.version != 18:  # a warehouse with every migration but 0018 (the landing layer, generated from
            shutil.copy(p.path, before / p.path.name)  # today's contracts, needs the later raw columns)
    wh = ChdbWarehouse(tmp_path / "warehouse")
    try:
        schema.migrate(wh, directory=before, log=lambda _m: None)
        # two parts of one key (not merged yet: a reader sums them) and a second metric
        wh.command(f"""INSERT INTO cohort_hourly (hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment,
                           metric, n, n_zero, hist) VALUES
                       ('2025-11-20 01:00:00', {KEYS}, 'all', 'rtt_us', 5, 1, map(1000, 3, 1001, 1)),
                       ('2025-11-20 02:00:00', {KEYS}, 'all', 'retrans_pct', 2, 2, map())""")
        wh.command(f"""INSERT INTO cohort_hourly (hour, pop, rollout_id, arm, kernel, cc, cc_version, host, segment,
                           metric, n, n_zero, hist) VALUES
                       ('2025-11-20 01:00:00', {KEYS}, 'all', 'rtt_us', 2, 0, map(1001, 2))""")
        wh.command(f"""INSERT INTO cohort_daily (day, pop, rollout_id, arm, kernel, cc, cc_version, host, segment,
                           metric, n, n_zero, hist) VALUES
                       ('2025-11-20 00:00:00', {KEYS}, 'all', 'rtt_us', 7, 1, map(1000, 3, 1001, 3))""")
        assert not schema.migrate(wh, directory=before, log=lambda _m: None)  # nothing pending there
        applied = schema.migrate(wh, log=lambda _m: None)
        assert [m.path.name for m in applied] == ["0018_cohort_cells.sql"]

        hourly = wh.query("SELECT toString(hour), metric, bin, sum(count) FROM cohort_cells_hourly "
                          "GROUP BY ALL ORDER BY ALL").rows
        assert hourly == [("2025-11-20 01:00:00", "rtt_us", 1000, 3), ("2025-11-20 01:00:00", "rtt_us", 1001, 3)]
        daily = wh.query("SELECT bin, sum(count) FROM cohort_cells_daily GROUP BY bin ORDER BY bin").rows
        assert daily == [(1000, 3), (1001, 3)]
        for table in ("cohort_hourly", "cohort_hourly_stage", "cohort_daily", "cohort_daily_stage"):
            # stored columns: `hist` is gone from storage (an empty ALIAS keeps old statements re-runnable)
            cols = {r[0] for r in wh.query("SELECT name FROM system.columns WHERE database = currentDatabase() "
                                           "AND table = {t:String} AND default_kind != 'ALIAS'",
                                           params={"t": table}).rows}
            assert "hist" not in cols and "n_zero" in cols, table
            assert wh.query(f"SELECT countIf(length(hist) > 0) FROM {table}").scalar() == 0, table
        # the sums are untouched
        assert wh.query("SELECT sum(n), sum(n_zero) FROM cohort_hourly WHERE metric = 'rtt_us'").rows == [(7, 1)]
    finally:
        wh.close()


def test_0018_interrupted_after_dropping_a_map_column_applies_again(tmp_path):
    """A crash (the sharded loader's SIGKILL test) between 0018's DROP COLUMN hist and its ADD of the
    ALIAS left no `hist`, and every re-run of 0018 failed on the conversion (UNKNOWN_IDENTIFIER)."""
    before = tmp_path / "migrations-before-0018"
    before.mkdir()
    for p in schema.MIGRATIONS_DIR.glob("*.sql"):
        if not p.name.startswith("0018"):
            shutil.copy(p, before / p.name)
    wh = ChdbWarehouse(tmp_path / "warehouse")
    try:
        schema.migrate(wh, directory=before, log=lambda _m: None)
        m18 = next(m for m in schema.discover() if m.version == 18)
        for stmt in schema.split_statements(m18.sql):  # 0018 up to its first DROP, then the crash
            wh.command(stmt)
            if stmt.startswith("ALTER TABLE cohort_hourly DROP COLUMN"):
                break
        assert "hist" not in {r[0] for r in wh.query("SELECT name FROM system.columns WHERE database = "
                                                    "currentDatabase() AND table = 'cohort_hourly'").rows}
        assert [m.version for m in schema.migrate(wh, log=lambda _m: None) if m.version == 18] == [18]
    finally:
        wh.close()
