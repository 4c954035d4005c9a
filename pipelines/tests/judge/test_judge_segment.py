"""A segment rollout's judge (real chdb): the segment_applied gate from tcp_conns (policy_generation
and cc of the segment's connections on treated hosts, the segment found through the networks
dictionary), cc_compliance on the rest, and guardrails judged on the segment and on the rest."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

from ccab.cohorts import networks as nw
from ccab.judge import core, data
from ccab.judge.model import Guardrail

START = datetime(2025, 11, 20, 0, tzinfo=timezone.utc)
END = datetime(2025, 11, 20, 1, tzinfo=timezone.utc)
T0 = int(START.timestamp() * 1000)


def _conn(i: int, host: str, arm: str, cc: str, prefix: str, gen: int | None) -> dict:
    return {"ts_ms": T0 + i * 1000, "pop": "lab", "host": host, "kernel": "6.18", "arm": arm, "rollout_id": "seg",
            "cc": cc, "cc_source": "socket", "sock_id": f"s{i}", "peer_prefix": prefix, "local_port": 80,
            "sample_rate": 1.0, "policy_generation": gen, "_topic": "t", "_partition": 0, "_offset": i}


def test_segment_applied_gate(warehouse):
    nw.load(warehouse, [nw.Network("10.201.0.0/16", 64501, "M", "JP", "mobile"),
                        nw.Network("10.202.0.0/16", 64502, "F", "JP", "fixed")], "test", "ccab")
    rows, i = [], 0
    plan = [  # host, arm, cc, prefix, policy_generation, how many
        ("t1", "bbr", "bbr", "10.201.1.0/24", 7, 40),      # treated, mobile, applied
        ("t1", "bbr", "cubic", "10.202.1.0/24", None, 30),  # treated, fixed: control's algorithm
        ("t2", "bbr", "bbr", "10.201.2.0/24", 7, 30),
        ("t2", "bbr", "cubic", "10.201.2.0/24", None, 10),  # treated, mobile, NOT applied (before the policy)
        ("c1", "control", "cubic", "10.201.3.0/24", None, 25),
    ]
    for host, arm, cc, prefix, gen, n in plan:
        for _ in range(n):
            rows.append(_conn(i, host, arm, cc, prefix, gen))
            i += 1
    warehouse.insert_raw("tcp_conns", "\n".join(json.dumps(r) for r in rows).encode(), "JSONEachRow")
    counts = data.segment_conn_counts(warehouse, "lab", "seg", START, END, ("access:mobile",), {"bbr": "bbr"})
    assert counts == [("bbr", "t1", 40, 40), ("bbr", "t2", 30, 40), ("control", "c1", 0, 25)]
    gates = core.segment_gates(warehouse, "lab", "seg", START, END, ("access:mobile",), {"bbr": "bbr"}, "control")
    by_host = {g.host: g for g in gates}
    assert set(by_host) == {"t1", "t2"}  # control hosts are cc_compliance's
    assert by_host["t1"].status == "pass" and by_host["t1"].value == 1.0
    assert by_host["t2"].status == "fail" and math.isclose(by_host["t2"].value, 0.75)
    assert by_host["t2"].detail == "30 of 40 access:mobile connections ran bbr set by the socket policy"
    # a union: mobile or fixed
    both = data.segment_conn_counts(warehouse, "lab", "seg", START, END, ("access:mobile", "asn:64502"),
                                    {"bbr": "bbr"})
    assert both[0] == ("bbr", "t1", 40, 70)


def test_segment_guardrails_and_rest_counts():
    g = (Guardrail("retrans_pct", "ratio", 2.5), Guardrail("rtt_us", "p50", 0.2, "ticket", segment="country:JP"))
    out = core.segment_guardrails(g, ("access:mobile",), ["access:fixed", "access:mobile", "access:unknown"])
    assert [(x.metric, x.segment) for x in out] == [("retrans_pct", "access:mobile"), ("retrans_pct", "access:fixed"),
                                                    ("retrans_pct", "access:unknown"), ("rtt_us", "country:JP")]
    # a country segment has no "rest" family: the segment only
    out = core.segment_guardrails(g[:1], ("country:JP",), ["access:fixed"])
    assert [x.segment for x in out] == ["country:JP"]
    rest = data.subtract_counts([("bbr", "t1", "bbr", 40), ("bbr", "t1", "cubic", 30)],
                                [("bbr", "t1", "bbr", 40)])
    assert rest == [("bbr", "t1", "cubic", 30)]


def test_rest_guardrails_act_on_regression_but_need_not_pass():
    from ccab.judge.model import Result

    def res(segment, outcome, p=0.5):
        return Result("bbr", "control", "retrans_pct", "ratio", segment, "guardrail", "perm", 4, 4, 1.0, 1.0, 0.0,
                      -0.3, 0.4, p, 0.014, severity="page", outcome=outcome, alpha_look=0.05, margin=0.25)
    target = res("access:mobile", "non_inferior", 0.01)
    rest = frozenset({"access:fixed"})
    wide = res("access:fixed", "inconclusive")
    assert core.decide("lab", "seg", "bbr", "control", [target, wide], [], [], 1, 1, 0.05).decision == "halt"
    assert core.decide("lab", "seg", "bbr", "control", [target, wide], [], [], 1, 1, 0.05,
                       rest=rest).decision == "pass"
    worse = res("access:fixed", "regression", 0.01)
    assert core.decide("lab", "seg", "bbr", "control", [target, worse], [], [], 1, 1, 0.05,
                       rest=rest).decision == "rollback"
