"""Who the clients are, end to end on the real engine: the simulated canary (Verizon pattern planted
on mobile prefixes) → ccab load → ccab networks load (the sim's synthetic metadata) → the hourly
job → the judge's heterogeneity on access-type segments and a mobile-only guardrail."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from ccab import cli
from ccab.judge import DEFAULT_GUARDRAILS, Guardrail

HOURS = 3  # the session canary world's (conftest)
START = datetime(2025, 11, 20, 0, tzinfo=timezone.utc)
END = datetime(2025, 11, 20, HOURS, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def canary(canary_world) -> Path:
    assert HOURS == 3  # the session's canary world (conftest) covers 3 hours
    return canary_world


def test_mobile_queueing_delay_bbr_vs_cubic_is_flagged(canary, warehouse_env, capsys):
    from ccab.cohorts.job import run_window
    from ccab.judge import judge_window
    from ccab.pipeline import open_warehouse

    assert cli.main(["load", str(canary / "ccab.tcp.v1.jsonl"), str(canary / "ccab.http.v1.jsonl")]) == 0
    assert cli.main(["networks", "load", str(canary / "networks.csv")]) == 0
    assert "ranked" in capsys.readouterr().out
    guardrails = tuple(DEFAULT_GUARDRAILS) + (
        Guardrail("queue_delay_us", "p50", 0.10, "ticket"),
        # "BBR must not add queueing delay on mobile"
        Guardrail("queue_delay_us", "p50", 0.10, "page", segment="access:mobile"),
    )
    with open_warehouse() as wh:
        run_window(wh, START, END)
        # every connection is in exactly one access segment; unknown prefixes are counted, not dropped
        n = dict(wh.query("""SELECT if(segment = 'all', 'all', 'access'), sum(n) FROM cohort_hourly
                             WHERE metric = 'rtt_us' AND (segment = 'all' OR segment LIKE 'access:%')
                             GROUP BY 1""").rows)
        assert n["all"] == n["access"] > 0
        unknown = wh.query("SELECT sum(n) FROM cohort_hourly WHERE metric = 'rtt_us' "
                           "AND segment = 'access:unknown'").scalar()
        assert 0 < unknown < 0.1 * n["all"]
        assert wh.query("SELECT count() FROM cohort_hourly WHERE segment = 'asn:other' OR "
                        "match(segment, '^asn:[0-9]+$')").scalar() > 0
        report = judge_window(wh, START, END, "tyo1-bbr-canary", guardrails=guardrails, write=False)
    results = [r for j in report.rollouts for r in j.results]

    def one(arm, metric, stat, segment, role):
        hits = [r for r in results if (r.treatment_arm, r.metric, r.statistic, r.segment, r.role)
                == (arm, metric, stat, segment, role)]
        assert len(hits) == 1, (arm, metric, stat, segment, role, len(hits))
        return hits[0]

    for arm in ("bbr1", "bbr2"):
        mobile_q = one(arm, "queue_delay_us", "p50", "access:mobile", "segment")
        fixed_q = one(arm, "queue_delay_us", "p50", "access:fixed", "segment")
        # the planted truth: Cubic fills the mobile buffer, BBR does not -> far less queueing delay
        # (estimates are relative changes: -0.5 = half of control's)
        assert mobile_q.estimate < -0.5 and mobile_q.ci_high < 0, mobile_q
        assert mobile_q.q_value is not None and mobile_q.q_value < 0.05, mobile_q  # flagged (BH in the guardrail)
        assert mobile_q.outcome == "improvement", mobile_q
        assert mobile_q.estimate < fixed_q.estimate  # the effect is concentrated on mobile
        # ... at similar throughput
        mobile_g = one(arm, "goodput_bps", "p50", "access:mobile", "segment")
        assert -0.2 < mobile_g.estimate < 0.25, mobile_g
        # the mobile-only guardrail: BBR adds no queueing delay there
        g = one(arm, "queue_delay_us", "p50", "access:mobile", "guardrail")
        assert g.outcome == "non_inferior", g


def test_goodput_by_rtt_class_is_composition(canary):
    """The pooled median goodput is not monotone in the RTT class (0-20 ms >> 20-50 ms < 50-100 ms)
    because the RTT class stands in for the access type: 20-50 ms is mostly mobile. Within each
    client class goodput does not rise with RTT (classes with >= 100 bulk requests)."""
    import csv
    import json
    from collections import defaultdict

    import numpy as np

    truth = json.loads((canary / "truth.json").read_text())
    cols = truth["prefixes"]["columns"]
    prefixes = {r[0]: dict(zip(cols, r)) for r in truth["prefixes"]["rows"]}
    access = {r["network"]: r["access"] for r in csv.DictReader((canary / "networks.csv").open())}
    order = ["0-20", "20-50", "50-100", "100+"]
    by = defaultdict(list)
    mobile_share = defaultdict(list)
    with (canary / "ccab.http.v1.jsonl").open() as f:
        for line in f:
            r = json.loads(line)
            if r["arm"] != "control" or r["body_bytes_sent"] < 1 << 20 or r["request_time_ms"] <= 0:
                continue
            p = prefixes[r["peer_prefix"]]
            rtt = p["rtt_ms"]
            c = order[0] if rtt < 20 else order[1] if rtt < 50 else order[2] if rtt < 100 else order[3]
            gp = r["body_bytes_sent"] * 8 / r["request_time_ms"] / 1e3
            by[("all", c)].append(gp)
            by[(p["class"], c)].append(gp)
            mobile_share[c].append(access.get(r["peer_prefix"]) == "mobile")
    med = {k: float(np.median(v)) for k, v in by.items() if len(v) >= 100}
    assert med[("all", "0-20")] > 5 * med[("all", "20-50")]          # the seed's big drop ...
    assert np.mean(mobile_share["20-50"]) > 0.7                      # ... is the mobile clients
    assert np.mean(mobile_share["0-20"]) < 0.1
    for cls in ("metro-fixed", "mobile", "asia-regional", "overseas"):
        seq = [med[(cls, c)] for c in order[1:] if (cls, c) in med]  # 0-20 ms mobile: too few
        assert all(a >= b * 0.95 for a, b in zip(seq, seq[1:])), (cls, seq)
