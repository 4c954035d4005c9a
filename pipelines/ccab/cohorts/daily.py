"""The daily rollups (``cohort_daily``, ``cohort_cells_daily``, ``cohort_heatmap_daily``;
sql/migrations/0017_cohort_daily.sql, 0018_cohort_cells.sql):
each UTC day recomputed whole from the hourly tables and swapped in, like an hour of the job.

The hourly job updates a day after it swapped in the day's hours, before their watermarks, so a
failure here leaves the hours stale and the next run redoes both. Hours the daily tables have never
held (their hourly partitions were empty before the swap: the usual hourly run) are *added* to
their day (:func:`add_hours`: the hours' rows copied as the job wrote them, never aggregated a second
time; the tables merge by key),
so an hourly run costs one hour of rows, not the whole day so far; a day with any recomputed hour
is recomputed whole (:func:`refresh_day`), which is exact whatever the daily table held.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ccab.base.chtime import sql_time, utc_hour
from ccab.base.warehouse import Warehouse

DAY = timedelta(days=1)
#: settings of every insert of the hourly job into its stage tables and of the daily tables' inserts
#: (job.py uses them too):
#: - optimize_on_insert=0: the rows are already one per key (GROUP BY output, or the hour's rows as
#:   the job wrote them), so the engine's merge-on-insert pass would only sort them again (~3x the
#:   insert time);
#: - insert blocks of up to 8Mi rows or 1 GiB (the default squashes an INSERT ... SELECT into ~1M-row
#:   blocks: one part per block and hour, each merged again in the background while the next
#:   statements run). Measured on the whole job (bench/cohorts, close records, 5 hours; background
#:   merges awaited after each run): x10 17.9 s + 43 s of merges after it -> 13.0 s + none;
#:   x30 53.2 s + 126 s -> 36.8 s + 30 s. Blocks of 4Mi rows: x10 11.4 s + 6 s, x30 46.4 s + 124 s.
STAGE_INSERT_SETTINGS: dict[str, int] = {"optimize_on_insert": 0, "min_insert_block_size_rows": 8 << 20,
                                         "min_insert_block_size_bytes": 1 << 30}

#: the hourly tables the daily ones are computed from
SOURCES = ("cohort_hourly", "cohort_cells_hourly", "cohort_heatmap_hourly")
# (hourly source, daily target, its stage, the key columns after the time column, the summed columns)
_TABLES = (
    ("cohort_hourly", "cohort_daily", "cohort_daily_stage",
     "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric",
     ("n", "n_zero", "n_missing", "n_above_50pct", "value_sum", "value_sum_sq", "ratio_num", "ratio_den",
      "weight_sum")),
    ("cohort_cells_hourly", "cohort_cells_daily", "cohort_cells_daily_stage",
     "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric, bin", ("count",)),
    ("cohort_heatmap_hourly", "cohort_heatmap_daily", "cohort_heatmap_daily_stage",
     "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin", ("connections",)),
)


def day_of(t: datetime) -> datetime:
    """The start of ``t``'s UTC day."""
    return utc_hour(t).replace(hour=0)


def day_partition_id(day: datetime) -> str:
    """Partition id of ``day`` in the daily tables (unix seconds of its start)."""
    return str(int(day_of(day).timestamp()))


def refresh_day(wh: Warehouse, t: datetime) -> dict[str, int]:
    """Recompute the UTC day of ``t`` in every daily table from its hourly table; rows per table.

    Raises
    ------
    WarehouseError
        A statement failed; the daily table keeps its previous version of the day.
    """
    day = day_of(t)
    pid = day_partition_id(day)
    params = {"day": sql_time(day), "next": sql_time(day + DAY)}
    counts = {}
    for source, target, stage, keys, columns in _TABLES:
        sums = ", ".join(f"sum({c})" for c in columns)
        wh.command(f"ALTER TABLE {stage} DROP PARTITION ID '{pid}'")
        wh.command(f"""INSERT INTO {stage}
SELECT {{day:DateTime('UTC')}} AS day, {keys}, {sums}
FROM {source}
WHERE hour >= {{day:DateTime('UTC')}} AND hour < {{next:DateTime('UTC')}}
GROUP BY {keys}""", params=params, settings=STAGE_INSERT_SETTINGS)
        counts[target] = int(wh.query(f"SELECT count() FROM {stage} WHERE _partition_id = {{p:String}}",
                                      params={"p": pid}).scalar())
        if counts[target]:
            wh.command(f"ALTER TABLE {target} REPLACE PARTITION ID '{pid}' FROM {stage}")
        else:  # REPLACE from an empty partition is refused: the day has no rows
            wh.command(f"ALTER TABLE {target} DROP PARTITION ID '{pid}'")
        wh.command(f"ALTER TABLE {stage} DROP PARTITION ID '{pid}'")
    return counts


def add_hours(wh: Warehouse, first: datetime, end: datetime) -> None:
    """Add the hours ``[first, end)`` (within one UTC day) to their day in every daily table: the
    hours' rows as the job wrote them (the hour's result, copied with ``hour`` -> ``day``: no second
    aggregation) — the daily tables are an AggregatingMergeTree of sums (``cohort_daily``) and
    SummingMergeTrees (``cohort_cells_daily``, ``cohort_heatmap_daily``): rows of one key add up when
    parts merge, and every reader sums.

    Exact only for hours the daily tables have never held; the caller (the hourly job) knows: their
    hourly partitions were empty before it swapped them in. A run that died after this insert left
    its hours swapped in, so its retry takes :func:`refresh_day` instead and nothing counts twice.
    """
    if end <= first or day_of(first) != day_of(end - timedelta(hours=1)):
        raise ValueError(f"add_hours: [{first}, {end}) is not one or more hours of one UTC day")
    params = {"day": sql_time(day_of(first)), "first": sql_time(first), "end": sql_time(end)}
    for source, target, _stage, keys, columns in _TABLES:
        wh.command(f"""INSERT INTO {target}
SELECT {{day:DateTime('UTC')}} AS day, {keys}, {", ".join(columns)}
FROM {source}
WHERE hour >= {{first:DateTime('UTC')}} AND hour < {{end:DateTime('UTC')}}""", params=params,
                   settings=STAGE_INSERT_SETTINGS)
