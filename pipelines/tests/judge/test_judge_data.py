"""The judge's inputs: many segments' host rows read by one query are each segment's own query's."""

from __future__ import annotations

from conftest import TINY_END, TINY_START
from ccab.base.vocabulary import METRICS
from ccab.judge import data


def test_segments_in_one_query_are_each_segments_own_rows(tiny_warehouse):
    wh = tiny_warehouse  # the tiny world loaded and rolled up (conftest)
    segments = [s for (s,) in wh.query("SELECT DISTINCT segment FROM cohort_hourly ORDER BY segment").rows]
    assert len(segments) > 5
    metrics = [m.name for m in METRICS]
    arms = ["control", "bbr1", "bbr2"]
    together = data.segments_host_rows(wh, "tst1", "tst1-tiny", segments + ["rtt:none-such"], TINY_START, TINY_END,
                                       metrics, arms)
    assert together.pop("rtt:none-such") == {}
    for s in segments:
        assert together[s] == data.host_rows(wh, "tst1", "tst1-tiny", s, TINY_START, TINY_END, metrics, arms), s
    assert data.segments_host_rows(wh, "tst1", "tst1-tiny", [], TINY_START, TINY_END, metrics, arms) == {}
