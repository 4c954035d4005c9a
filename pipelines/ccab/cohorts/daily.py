"""The daily rollups (``cohort_daily``, ``cohort_heatmap_daily``; sql/migrations/0017_cohort_daily.sql):
each UTC day recomputed whole from the hourly tables and swapped in, like an hour of the job.

The hourly job calls :func:`refresh_day` after it swapped in an hour, before that hour's
watermark, so a failure here leaves the hour stale and the next run redoes both.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ccab.base.chtime import sql_time, utc_hour
from ccab.base.warehouse import Warehouse

DAY = timedelta(days=1)

# (hourly source, daily target, its stage, the key columns after the time column, the sums)
_TABLES = (
    ("cohort_hourly", "cohort_daily", "cohort_daily_stage",
     "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, metric",
     "sum(n), sum(n_zero), sum(n_missing), sum(n_above_50pct), sum(value_sum), sum(value_sum_sq), "
     "sum(ratio_num), sum(ratio_den), sum(weight_sum), sumMap(hist)"),
    ("cohort_heatmap_hourly", "cohort_heatmap_daily", "cohort_heatmap_daily_stage",
     "pop, rollout_id, arm, kernel, cc, cc_version, host, segment, pair, x_bin, y_bin",
     "sum(connections)"),
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
    for source, target, stage, keys, sums in _TABLES:
        wh.command(f"ALTER TABLE {stage} DROP PARTITION ID '{pid}'")
        wh.command(f"""INSERT INTO {stage}
SELECT {{day:DateTime('UTC')}} AS day, {keys}, {sums}
FROM {source}
WHERE hour >= {{day:DateTime('UTC')}} AND hour < {{next:DateTime('UTC')}}
GROUP BY {keys}""", params=params, settings={"optimize_on_insert": 0})
        counts[target] = int(wh.query(f"SELECT count() FROM {stage} WHERE _partition_id = {{p:String}}",
                                      params={"p": pid}).scalar())
        if counts[target]:
            wh.command(f"ALTER TABLE {target} REPLACE PARTITION ID '{pid}' FROM {stage}")
        else:  # REPLACE from an empty partition is refused: the day has no rows
            wh.command(f"ALTER TABLE {target} DROP PARTITION ID '{pid}'")
        wh.command(f"ALTER TABLE {stage} DROP PARTITION ID '{pid}'")
    return counts
