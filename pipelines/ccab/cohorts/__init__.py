"""Cohort analytics: per-cohort distributions in ClickHouse rollups (docs/cohorts/README.md).

- ``job``        the hourly rollup job: raw rows -> cohort_hourly / cohort_heatmap_hourly, idempotent,
                 with late-data watermarks (SQL in ``cohorts/sql/``)
- ``views``      installs the analysts' parameterized views from ``sql/views/``
- ``summaries``  per-arm summaries of a window (``cohort_arm_summaries``)

Bins and the metric vocabulary are in :mod:`ccab.base`; the judge runs on top (:mod:`ccab.pipeline`).
"""
