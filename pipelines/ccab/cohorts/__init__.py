"""Cohort analytics: per-cohort distributions in ClickHouse rollups (docs/cohorts/README.md).

- ``bins``     the fixed log2 bin scheme and histograms read from it (pure)
- ``metrics``  what each metric is: unit, grain, source
- ``job``      the hourly rollup job: raw rows -> cohort_hourly / cohort_heatmap_hourly, idempotent,
               with late-data watermarks (SQL in ``cohorts/sql/``)
- ``views``    installs the analysts' parameterized views from ``sql/views/``
- ``compare``  per-arm summaries of a window, and the statistical judge's hook
- ``report``   the daily PNG + Markdown report
- ``tasks``    what the Airflow DAGs in ``dags/`` call
- ``airflow_local``  a local Airflow (SQLite) for ``dag.test()``: ``ccab dags test``
- ``cli``      ``ccab analyze`` and ``ccab dags``
"""
