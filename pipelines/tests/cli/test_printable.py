"""Stored values reach the terminal without their control characters (issue 29: `ccab analyze`
printed a stored NUL, newline and tab raw): every byte of a stored id is still visible, escaped."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from ccab.cli.analyze import _print_summary
from ccab.cli.common import printable
from ccab.cli.judge import print_verdicts


def test_printable_escapes_control_characters():
    assert printable("a\x00b\nc\td\x1b[31m\x7f\x85é") == "a\\x00b\\nc\\td\\x1b[31m\\x7f\\x85é"
    assert printable("tyo1-bbr-canary") == "tyo1-bbr-canary"


def test_analyze_summary_prints_stored_values_escaped(capsys):
    t = datetime(2025, 11, 20, tzinfo=timezone.utc)
    report = SimpleNamespace(start=t, end=t, summary=lambda: "1 hour", hours=[])
    compared = SimpleNamespace(summaries=SimpleNamespace(summary_rows=1))
    row = {"pop": "ty\x00o1", "rollout_id": "r\n1", "arm": "bb\tr2", "cc": "[red]bbr\x1b[2J", "hosts": 2,
           "connections": 10, "retrans_pct_p50": 1.0, "retrans_above_50pct_share": 0.0,
           "inflight_bytes_busy_sample_p50": 1024.0, "rtt_us_p50": 1000.0, "goodput_bps_p50": 1e6,
           "rwnd_limited_pct_ratio": 0.0}
    _print_summary(report, compared, [row])
    out = capsys.readouterr().out
    assert "\x00" not in out and "\t" not in out and "\x1b" not in out, repr(out)
    assert "ty\\x00o1/r\\n1" in out and "bb\\tr2" in out and "[red]bbr\\x1b[2J" in out, out


def test_verdicts_print_stored_values_escaped(capsys):
    t = datetime(2025, 11, 20, tzinfo=timezone.utc)
    v = SimpleNamespace(treatment_arm="bbr\n2", control_arm="control", decision="halt", reasons=["why\x00not"])
    j = SimpleNamespace(pop="tyo1", rollout_id="r\t1", error="", verdicts=[v], gates=[])
    report = SimpleNamespace(window_start=t, window_end=t, look=1, looks_planned=2, rollouts=[j], alerts=[])
    print_verdicts(report)
    out = capsys.readouterr().out
    assert "tyo1/r\\t1 bbr\\n2 vs control: HALT" in out and "why\\x00not" in out and "\x00" not in out, out
