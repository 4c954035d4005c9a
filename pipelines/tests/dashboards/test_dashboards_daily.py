"""The rollup panels read whole days from the daily rollups and the edge hours from the hourly
ones: over any range they return what reading every hour returns."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import rollup_rows
from ccab.dashboards import definitions
from ccab.dashboards.expand import expand

DAY0 = datetime(2025, 11, 20, tzinfo=timezone.utc)
EVERY_HOUR = "toDateTime('2100-01-01 00:00:00', 'UTC')"  # no day is whole before 2100


def rollup_panels():
    for make in definitions.DASHBOARDS.values():
        board, _ = make()
        stack = list(board.get("panels", []))
        while stack:
            p = stack.pop(0)
            stack.extend(p.get("panels", []))
            for t in p.get("targets", []):
                sql = t.get("rawSql", "")
                if "cohort_hourly" in sql or "cohort_heatmap_hourly" in sql:
                    yield p["title"], p.get("repeat"), sql


def test_rollup_panels_read_days_with_the_same_result_as_hours(warehouse):
    rollup_rows.fill(warehouse, DAY0, days=3)
    panels = list(rollup_panels())
    assert len(panels) == 5, [t for t, _, _ in panels]  # PDF, CDF, two heatmaps, per-host mean
    values = {"pop": rollup_rows.POP, "rollout": rollup_rows.ROLLOUT, "arm": ["bbr", "control"], "kernel": ["6.1"],
              "metric": "rtt_us", "segment": "all"}
    ranges = [(DAY0 + timedelta(hours=5, minutes=13), DAY0 + timedelta(days=2, hours=7, minutes=2)),
              (DAY0, DAY0 + timedelta(days=3)), (DAY0 + timedelta(hours=3), DAY0 + timedelta(hours=20))]
    for title, repeat, sql in panels:
        assert definitions._DAY_FIRST in sql, title
        v = {**values, repeat: "bbr"} if repeat else values
        for t0, t1 in ranges:
            got = warehouse.query(expand(sql, v, t0, t1, interval_s=3600)).rows
            want = warehouse.query(expand(sql.replace(definitions._DAY_FIRST, EVERY_HOUR), v, t0, t1,
                                          interval_s=3600)).rows
            assert got and sorted(map(repr, got)) == sorted(map(repr, want)), (title, t0, t1, got[:2], want[:2])
