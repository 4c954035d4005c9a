"""Generated rollup rows for tests of the readers (views, dashboards): a few hosts x days of
``cohort_hourly`` / ``cohort_cells_hourly`` / ``cohort_heatmap_hourly`` written with ``INSERT ... SELECT FROM numbers()``,
then each day's daily rollups by the job's own :func:`ccab.cohorts.daily.refresh_day`."""

from __future__ import annotations

from datetime import datetime, timedelta

from ccab.cohorts.daily import refresh_day

POP, ROLLOUT = "tst1", "r-days"
METRICS = ("rtt_us", "retrans_pct", "goodput_bps")
SEGMENTS = ("all", "bulk", "rtt:20-80ms", "access:mobile", "asn:64500")
PAIRS = ("rtt_us:retrans_pct", "rtt_us:inflight_bytes")


def fill(wh, start: datetime, days: int, hosts: int = 4) -> None:
    """Rows for every hour of ``days`` days from ``start`` (a UTC midnight), then the daily rollups."""
    s0 = int(start.timestamp())
    m_arr = "[" + ",".join(f"'{m}'" for m in METRICS) + "]"
    s_arr = "[" + ",".join(f"'{s}'" for s in SEGMENTS) + "]"
    p_arr = "[" + ",".join(f"'{p}'" for p in PAIRS) + "]"
    rows = hosts * 24 * days
    host = "concat('h', toString(h))"
    arm = "if(h % 2 = 0, 'control', 'bbr')"
    wh.command(f"""
INSERT INTO cohort_hourly
SELECT toDateTime({s0} + intDiv(number, {hosts}) * 3600, 'UTC'), '{POP}', '{ROLLOUT}', {arm} AS arm, '6.1',
       if(arm = 'bbr', 'bbr', 'cubic'), 0, {host}, seg, met,
       toUInt64(5 + (number * 7 + mi) % 13) AS n, toUInt64(n % 3), toUInt64(n % 2), toUInt64(n % 4),
       n * 100.25, n * 1e4, n * 3.0, n * 40.0, n * 1.0
FROM (SELECT number, number % {hosts} AS h FROM numbers({rows}))
ARRAY JOIN {m_arr} AS met, arrayEnumerate({m_arr}) AS mi
ARRAY JOIN {s_arr} AS seg""", settings={"max_partitions_per_insert_block": 0})
    wh.command(f"""
INSERT INTO cohort_cells_hourly
SELECT toDateTime({s0} + intDiv(number, {hosts}) * 3600, 'UTC'), '{POP}', '{ROLLOUT}', {arm} AS arm, '6.1',
       if(arm = 'bbr', 'bbr', 'cubic'), 0, {host}, seg, met,
       toInt32(mi * 300 + 1000 + j * 17 + (number % 5)), toUInt64(1 + (number + j) % 7)
FROM (SELECT number, number % {hosts} AS h FROM numbers({rows}))
ARRAY JOIN {m_arr} AS met, arrayEnumerate({m_arr}) AS mi
ARRAY JOIN {s_arr} AS seg
ARRAY JOIN range(6) AS j""", settings={"max_partitions_per_insert_block": 0})
    wh.command(f"""
INSERT INTO cohort_heatmap_hourly
SELECT toDateTime({s0} + intDiv(number, {hosts}) * 3600, 'UTC'), '{POP}', '{ROLLOUT}', {arm} AS arm, '6.1',
       if(arm = 'bbr', 'bbr', 'cubic'), 0, {host}, seg, pair,
       toInt32(100 + c % 5 + number % 3), if(c % 4 = 0, toInt32(-2147483648), toInt32(20 + c)),
       toUInt64(1 + (number + c) % 9)
FROM (SELECT number, number % {hosts} AS h FROM numbers({rows}))
ARRAY JOIN {p_arr} AS pair
ARRAY JOIN ['all', 'bulk'] AS seg
ARRAY JOIN range(6) AS c""", settings={"max_partitions_per_insert_block": 0})
    for d in range(days):
        refresh_day(wh, start + timedelta(days=d))
