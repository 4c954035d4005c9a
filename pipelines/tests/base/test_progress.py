"""Progress lines (stderr not a terminal) only for operations that take longer than a few seconds
(issue 29: `ccab load` of a 2 KB file printed progress lines). The elapsed time is set, not waited for."""

from __future__ import annotations

import io

from ccab.base.progress import Progress


def test_a_quick_operation_prints_no_progress_line():
    out = io.StringIO()
    with Progress("load", total=2048, unit="bytes", stream=out) as p:
        p.advance(1024)
        p.advance(1024)
    assert out.getvalue() == ""


def test_a_long_operation_prints_a_line_per_10_percent_after_the_quiet_start():
    out = io.StringIO()
    with Progress("load", total=1000, unit="bytes", stream=out) as p:
        p.advance(150)  # 15 %, within the first 2 s: nothing
        p._t0 -= 5  # as if 5 s had passed
        p.advance(100)  # 25 %: one line, not one per threshold passed meanwhile
        p.advance(100)  # 35 %
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "load: 250/1,000 bytes (25 %)" in lines[0] and "load: 350/1,000 bytes (35 %)" in lines[1]
