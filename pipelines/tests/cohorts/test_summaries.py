"""The per-arm summaries of a window (``cohort_arm_summaries``) are the ``cohort_quantiles`` view's
rows of every metric, each labelled with its own metric — written by one statement for all metrics."""

from __future__ import annotations

import pytest
from conftest import TINY_END, TINY_START
from ccab.base.chtime import sql_time
from ccab.base.vocabulary import METRICS
from ccab.cohorts.summaries import write_arm_summaries

COLUMNS = "arm, cc, segment, hosts, n, n_zero, mean, ratio, share_above_50pct, p10, p50, p90, p99, p50_nonzero"


def test_every_metric_summary_is_the_views_rows_for_that_metric(tiny_warehouse):
    wh = tiny_warehouse
    result = write_arm_summaries(wh, TINY_START, TINY_END)
    assert result.rollouts == [("tst1", "tst1-tiny")]
    window = {"a": sql_time(TINY_START), "b": sql_time(TINY_END)}
    total = 0
    for metric in METRICS:
        stored = wh.query(f"SELECT {COLUMNS} FROM cohort_arm_summaries FINAL WHERE metric = {{m:String}} "
                          "AND window_start = {a:DateTime('UTC')} AND window_end = {b:DateTime('UTC')} "
                          "ORDER BY arm, segment", params={"m": metric.name, **window}).rows
        view = wh.query(f"SELECT {COLUMNS} FROM cohort_quantiles(pop = 'tst1', rollout_id = 'tst1-tiny', "
                        "metric = {m:String}, segment = '%', t_from = {a:DateTime('UTC')}, t_to = {b:DateTime('UTC')}) "
                        "ORDER BY arm, segment", params={"m": metric.name, **window}).rows
        assert stored and [r[:3] for r in stored] == [r[:3] for r in view], metric.name
        for got, want in zip(stored, view):  # float sums in another order: equal to rounding
            for a, b in zip(got[3:], want[3:]):
                assert a == b if b is None else a == pytest.approx(b, rel=1e-12, nan_ok=True), (metric.name, got, want)
        total += len(stored)
    assert result.summary_rows == total
    # a re-run replaces the same rows (ReplacingMergeTree keyed by the window)
    assert write_arm_summaries(wh, TINY_START, TINY_END).summary_rows == total
