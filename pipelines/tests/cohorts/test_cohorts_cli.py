"""``ccab analyze`` and ``ccab plot`` through the CLI, on simulated data in a fresh data dir."""

from __future__ import annotations

import json

import pytest
from ccab import cli
from cohort_reference import connections, read_jsonl

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sim_dir(tiny_world):
    return tiny_world  # the shared `ccab sim tiny --hours 2` (conftest)


@pytest.fixture
def loaded(warehouse_env, sim_dir):
    assert cli.main(["load", str(sim_dir / "ccab.tcp.v1.jsonl"), str(sim_dir / "ccab.http.v1.jsonl")]) == 0
    return warehouse_env


def analyze(capsys, *extra: str) -> dict:
    capsys.readouterr()
    assert cli.main(["analyze", "--from", "2025-11-20T12:00Z", "--to", "2025-11-20T14:00Z", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_analyze_is_idempotent_and_summarises_every_arm(loaded, sim_dir, capsys):
    first = analyze(capsys)
    assert [h["hour"] for h in first["rollup"]["hours"]] == ["2025-11-20T12:00:00+00:00", "2025-11-20T13:00:00+00:00"]
    assert first["compare"]["summary_rows"] > 0 and first["judge"]["verdicts"]  # summaries, then the judge
    assert {v["treatment_arm"] for v in first["judge"]["verdicts"]} == {a["arm"] for a in first["arms"]} - {"control"}
    tcp = read_jsonl(sim_dir / "ccab.tcp.v1.jsonl")
    per_arm = {}
    for c in connections(tcp):
        if c["retrans_pct"] is not None:
            per_arm[c["arm"]] = per_arm.get(c["arm"], 0) + 1
    assert {a["arm"]: a["connections"] for a in first["arms"]} == per_arm
    second = analyze(capsys)
    assert second["arms"] == first["arms"]
    assert second["compare"]["summary_rows"] == first["compare"]["summary_rows"] > 0
    only = analyze(capsys, "--rollout", "tst1-tiny")
    assert only["arms"] == first["arms"]
    assert analyze(capsys, "--rollout", "no-such-rollout")["arms"] == []


def test_analyze_prints_a_table(loaded, capsys):
    assert cli.main(["analyze", "--from", "2025-11-20T12:00Z", "--to", "2025-11-20T14:00Z", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 hour(s) computed" in out and "control" in out and "bbr2" in out


@pytest.mark.parametrize("args, message", [
    (["--from", "2025-11-20T12:30Z", "--to", "2025-11-20T14:00Z"], "not on a UTC hour boundary"),
    (["--from", "yesterday", "--to", "2025-11-20T14:00Z"], "not an ISO date"),
    (["--from", "2025-11-20T14:00Z", "--to", "2025-11-20T12:00Z"], "must be after"),
])
def test_analyze_rejects_bad_windows(warehouse_env, capsys, args, message):
    assert cli.main(["analyze", *args]) == 2
    assert message in capsys.readouterr().err


def test_plot_commands_write_pngs(loaded, tmp_path, capsys):
    assert cli.main(["plot", "heatmap", "--out", str(tmp_path / "h.png")]) == 1  # nothing rolled up yet
    assert "ccab analyze" in capsys.readouterr().err
    analyze(capsys)
    for args in (["heatmap", "--segment", "bulk"], ["heatmap", "--pair", "rtt_us:inflight_bytes"],
                 ["pdf", "--metric", "retrans_pct"], ["cdf", "--metric", "goodput_bps", "--segment", "rtt:0-20ms"],
                 ["heatmap", "--segment", "access:unknown"], ["cdf", "--metric", "rtt_us", "--segment", "access_type:unknown"],
                 # hour 12 is the pre-period that bands the prefixes, hour 13 the window
                 ["speed", "--from", "2025-11-20T13:00Z", "--to", "2025-11-20T14:00Z", "--pre-hours", "1"]):
        out = tmp_path / f"{'-'.join(args)}.png"
        assert cli.main(["plot", *args, "--out", str(out)]) == 0, args
        assert out.read_bytes()[:8] == PNG and out.stat().st_size > 5000, args
    # an empty selection is an error, not an empty picture
    capsys.readouterr()
    empty = tmp_path / "empty.png"
    assert cli.main(["plot", "pdf", "--metric", "rtt_us", "--rollout", "nothing-here", "--out", str(empty)]) == 1
    assert not empty.exists() and "nothing" in capsys.readouterr().err
    # no pre-period data before the window: nothing is banded, so no figure (never bands from the window)
    assert cli.main(["plot", "speed", "--from", "2025-11-20T12:00Z", "--to", "2025-11-20T14:00Z", "--pre-hours", "1",
                     "--out", str(empty)]) == 1
    assert not empty.exists()
