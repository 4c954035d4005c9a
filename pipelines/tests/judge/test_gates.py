"""Unit tests of the pure data-quality gates (ccab.judge.gates): each fails on the case it exists
for and passes on clean input."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from ccab.judge import gates

T0 = datetime(2025, 11, 20, 0, tzinfo=timezone.utc)


def _status(checks):
    return {(c.gate, c.arm, c.host): c.status for c in checks}


def test_window_hours_are_the_warehouse_strings():
    assert gates.window_hours(T0, T0.replace(hour=3)) == ["2025-11-20 00:00:00", "2025-11-20 01:00:00",
                                                          "2025-11-20 02:00:00"]


def test_arm_hosts_needs_two_hosts_per_arm():
    out = _status(gates.arm_hosts_gate({"control": {"a", "b"}, "bbr2": {"c"}}, ["control", "bbr2", "bbr1"]))
    assert out == {("arm_hosts", "control", ""): "pass", ("arm_hosts", "bbr2", ""): "fail",
                   ("arm_hosts", "bbr1", ""): "fail"}


def test_completeness_fails_a_silent_or_missing_host():
    hours = ["h0", "h1", "h2"]
    out = _status(gates.completeness_gate([("control", "a", hours), ("control", "b", ["h0", "h2"])],
                                          {"a": "control", "b": "control", "c": "bbr2"}, hours))
    assert out == {("host_completeness", "control", "a"): "pass", ("host_completeness", "control", "b"): "fail",
                   ("host_completeness", "bbr2", "c"): "fail"}


def test_sampling_catches_a_host_and_an_arm_that_sample_less():
    arm_of = {f"c{i}": "control" for i in range(6)} | {f"t{i}": "bbr2" for i in range(6)}
    requests = {h: 10_000.0 for h in arm_of}
    clean = {h: 100 + i for i, h in enumerate(arm_of)}
    assert all(c.status == "pass" for c in gates.sampling_gate(clean, requests, arm_of, "control"))
    halved = {h: (n // 2 if arm_of[h] == "bbr2" else n) for h, n in clean.items()}
    arm_checks = [c for c in gates.sampling_gate(halved, requests, arm_of, "control") if not c.host]
    assert [c.status for c in arm_checks] == ["fail"] and arm_checks[0].arm == "bbr2"
    one_host = dict(clean, c0=10)
    assert _status(gates.sampling_gate(one_host, requests, arm_of, "control"))[("sampling_rate", "control", "c0")] == "fail"
    assert gates.sampling_gate({"a": 1}, {"a": 1.0}, {"a": "control"}, "control")[0].status == "skipped"


def test_cc_compliance_fails_above_one_percent_wrong_algorithm():
    counts = [("bbr2", "t1", "bbr2", 990), ("bbr2", "t1", "cubic", 10),
              ("bbr2", "t2", "bbr2", 950), ("bbr2", "t2", "cubic", 50)]
    expected = gates.expected_cc_by_host(counts, {})
    assert expected == {"t1": "bbr2", "t2": "bbr2"}
    out = _status(gates.cc_gate(counts, expected))
    assert out == {("cc_compliance", "bbr2", "t1"): "pass", ("cc_compliance", "bbr2", "t2"): "fail"}
    # the controller's assignment wins over the arm's majority
    assert gates.expected_cc_by_host(counts, {"t1": ("bbr2", "bbr")})["t1"] == "bbr"


def test_traffic_share_compares_with_the_pre_period_or_is_skipped():
    arm_of = {f"h{i}": ("control" if i % 2 else "bbr2") for i in range(10)}
    assert gates.traffic_share_gate({"h0": 1, "h1": 1}, {}, arm_of)[0].status == "skipped"
    pre = {h: 100.0 for h in arm_of}
    out = _status(gates.traffic_share_gate(dict(pre, h0=250.0), pre, arm_of))  # h0 doubled its share
    assert out[("traffic_share", "bbr2", "h0")] == "fail"
    assert all(v == "pass" for k, v in out.items() if k[2] != "h0")


def test_failed_for_arm_only_reports_gates_of_the_comparison():
    checks = [gates.GateCheck("arm_hosts", "bbr1", "", "fail", 1, 2, "1 host"),
              gates.GateCheck("arm_hosts", "bbr2", "", "fail", 1, 2, "1 host"),
              gates.GateCheck("sampling_rate", "", "", "fail", math.nan, 2, "pop-wide")]
    assert gates.failed_for_arm(checks, "bbr2", "control") == ["arm_hosts bbr2: 1 host", "sampling_rate rollout: pop-wide"]
