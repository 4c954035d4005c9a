"""The daily rollups: each day is the exact sum of its hours (also after late data recomputes an
hour), and the analyst views give the same answer reading whole days from them as reading hours."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import rollup_rows
from ccab import cli
from ccab.cohorts.job import run_window
from ccab.cohorts.views import install_views, view_files
from ccab.ingest.loader import load_files
from cohort_reference import read_jsonl

DAY0 = datetime(2025, 11, 20, tzinfo=timezone.utc)
SUMS = ("sum(n)", "sum(n_zero)", "sum(n_missing)", "sum(n_above_50pct)", "round(sum(value_sum), 3)",
        "round(sum(ratio_num), 3)", "round(sum(ratio_den), 3)", "round(sum(weight_sum), 3)")
KEYS = "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric"
CELL_KEYS = KEYS + ", bin"
HEAT_KEYS = "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin"


def by_day(wh) -> tuple[list, list]:
    """(hourly regrouped by day, daily) for both rollups; each list sorted."""
    sums = ", ".join(SUMS)
    out = []
    for hourly, daily, keys, cols in (("cohort_hourly", "cohort_daily", KEYS, sums),
                                      ("cohort_cells_hourly", "cohort_cells_daily", CELL_KEYS, "sum(count)"),
                                      ("cohort_heatmap_hourly", "cohort_heatmap_daily", HEAT_KEYS, "sum(connections)")):
        a = wh.query(f"SELECT toStartOfDay(hour, 'UTC') AS d, {keys}, {cols} FROM {hourly} GROUP BY d, {keys} "
                     f"ORDER BY ALL").rows
        b = wh.query(f"SELECT day, {keys}, {cols} FROM {daily} GROUP BY day, {keys} ORDER BY ALL").rows
        out.append((a, b))
    return out


@pytest.mark.slow
def test_each_day_is_the_sum_of_its_hours_also_after_late_rows(warehouse, tmp_path):
    start = DAY0 - timedelta(hours=2)  # 22:00 to 01:00: two days
    out = tmp_path / "sim"
    assert cli.main(["sim", "tiny", "--out", str(out), "--hours", "3", "--connections", "600", "--workers", "1",
                     "--no-progress", "--start", start.isoformat()]) == 0
    records = read_jsonl(out / "ccab.tcp.v1.jsonl") + read_jsonl(out / "ccab.http.v1.jsonl")
    cut = int((DAY0 + timedelta(minutes=30)).timestamp() * 1000)
    (tmp_path / "early.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["ts_ms"] < cut))
    (tmp_path / "late.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records if r["ts_ms"] >= cut))

    assert not load_files(warehouse, [tmp_path / "early.jsonl"]).dead
    run_window(warehouse, start, start + timedelta(hours=3))
    for hourly, daily in by_day(warehouse):
        assert hourly and hourly == daily
    assert {r[0] for r in by_day(warehouse)[0][1]} == {"2025-11-19 00:00:00", "2025-11-20 00:00:00"}

    # late rows: the hours are recomputed, and with them their days — replaced, not added to
    assert not load_files(warehouse, [tmp_path / "late.jsonl"]).dead
    before = warehouse.query("SELECT sum(n) FROM cohort_daily").scalar()
    run_window(warehouse, start, start + timedelta(hours=3))
    for hourly, daily in by_day(warehouse):
        assert hourly == daily
    assert warehouse.query("SELECT sum(n) FROM cohort_daily").scalar() > before


VIEW_ARGS = {
    "cohort_quantiles": "metric = 'rtt_us', segment = '%'",
    "cohort_cdf": "metric = 'rtt_us', segment = 'all', bins_per_octave = 16",
    "cohort_pdf": "metric = 'retrans_pct', segment = 'bulk', bins_per_octave = 8",
    "cohort_heatmap": "pair = 'rtt_us:retrans_pct', segment = 'all', bins_per_octave = 2",
    "cohort_network_pdf": "metric = 'rtt_us', segment = '%:%', bins_per_octave = 16",
    "cohort_goodput_by_rtt_class": "",
    "cohort_asn_table": "",
}
DAY_FIRST = "toStartOfDay({t_from:DateTime('UTC')} + 86399, 'UTC')"


def test_views_read_whole_days_from_the_daily_rollups_with_the_same_result(warehouse, tmp_path):
    rollup_rows.fill(warehouse, DAY0, days=3)
    install_views(warehouse)
    # the same views reading every hour from the hourly tables: no day is "whole" before 2100
    hourly_only = tmp_path / "hourly-only"
    hourly_only.mkdir()
    rollup_views = []  # views over raw rows (e.g. cohort_goodput_by_client_speed) have no daily rollup to read
    for name, path in view_files().items():
        sql = path.read_text()
        if "cohort_hourly" not in sql and "cohort_heatmap_hourly" not in sql:
            continue
        rollup_views.append(name)
        assert name in VIEW_ARGS, f"add view {name} to VIEW_ARGS"
        assert DAY_FIRST in sql, f"view {name} reads every hour: read whole days from the daily rollups"
        (hourly_only / f"{name}_h.sql").write_text(
            sql.replace(DAY_FIRST, "toDateTime('2100-01-01 00:00:00', 'UTC')")
               .replace("FROM cohort_pdf(", "FROM cohort_pdf_h(").replace("FROM cohort_quantiles(", "FROM cohort_quantiles_h("))
    install_views(warehouse, hourly_only)
    ranges = [(DAY0 + timedelta(hours=5), DAY0 + timedelta(days=2, hours=7)),  # edges + one whole day
              (DAY0, DAY0 + timedelta(days=3)),  # whole days only
              (DAY0 + timedelta(hours=3), DAY0 + timedelta(hours=20))]  # inside one day
    for name in rollup_views:
        for t_from, t_to in ranges:
            args = ", ".join(x for x in (f"pop = '{rollup_rows.POP}'", f"rollout_id = '{rollup_rows.ROLLOUT}'",
                                         VIEW_ARGS[name], f"t_from = '{t_from:%Y-%m-%d %H:%M:%S}'",
                                         f"t_to = '{t_to:%Y-%m-%d %H:%M:%S}'") if x)
            got = warehouse.query(f"SELECT * FROM {name}({args}) ORDER BY ALL").rows
            want = warehouse.query(f"SELECT * FROM {name}_h({args}) ORDER BY ALL").rows
            assert got and got == want, (name, t_from, t_to, got[:3], want[:3])

    # and whole days really come from the daily tables
    args = (f"pop = '{rollup_rows.POP}', rollout_id = '{rollup_rows.ROLLOUT}', {VIEW_ARGS['cohort_pdf']}, "
            f"t_from = '{DAY0:%Y-%m-%d %H:%M:%S}', t_to = '{DAY0 + timedelta(days=3):%Y-%m-%d %H:%M:%S}'")
    warehouse.command("TRUNCATE TABLE cohort_daily")
    assert warehouse.query(f"SELECT count() FROM cohort_pdf({args})").scalar() == 0


def test_new_hours_are_added_to_their_day_and_a_retry_after_a_crash_counts_nothing_twice(warehouse, tmp_path,
                                                                                       monkeypatch):
    """The usual hourly run adds its hour to the day (no recomputation of the day so far); a run
    that died after updating the day but before its watermark is redone with the day recomputed
    whole, so the day is still the exact sum of its hours, not that plus the hour again."""
    import ccab.cohorts.job as job
    from ccab.base.warehouse import WarehouseError

    out = tmp_path / "sim"
    assert cli.main(["sim", "tiny", "--out", str(out), "--hours", "3", "--connections", "400", "--workers", "1",
                     "--no-progress", "--start", DAY0.isoformat()]) == 0
    assert not load_files(warehouse, [out / "ccab.tcp.v1.jsonl", out / "ccab.http.v1.jsonl"]).dead
    whole_days = []
    real_refresh = job.refresh_day
    monkeypatch.setattr(job, "refresh_day", lambda wh, t: (whole_days.append(t), real_refresh(wh, t))[1])
    hour = timedelta(hours=1)
    job.run_window(warehouse, DAY0, DAY0 + hour)
    job.run_window(warehouse, DAY0 + hour, DAY0 + 2 * hour)
    assert whole_days == []  # both hours were new: added, the day never recomputed
    for hourly, daily in by_day(warehouse):
        assert hourly and hourly == daily

    # hour 2 dies after its day was updated, before its watermark
    real_command = warehouse.command

    def crash_at_the_watermark(sql, *args, **kwargs):
        if sql.lstrip().startswith("INSERT INTO cohort_watermarks"):
            raise WarehouseError("simulated crash before the watermark")
        return real_command(sql, *args, **kwargs)

    monkeypatch.setattr(warehouse, "command", crash_at_the_watermark)
    with pytest.raises(job.CohortJobError):
        job.run_window(warehouse, DAY0 + 2 * hour, DAY0 + 3 * hour)
    monkeypatch.setattr(warehouse, "command", real_command)
    assert list(job.stale_hours(warehouse, DAY0, DAY0 + 3 * hour)) == [DAY0 + 2 * hour]
    job.run_window(warehouse, DAY0 + 2 * hour, DAY0 + 3 * hour)  # the retry
    for hourly, daily in by_day(warehouse):
        assert hourly and hourly == daily  # not hour 2 twice
    assert whole_days == [DAY0]
