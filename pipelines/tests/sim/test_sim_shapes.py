"""ccab sim: the generated data has the planted properties.

`canary-tyo1` is generated at a moderate size and measured *from the emitted records*, the way
an analysis would (last sample per sock_id; active samples for bytes in flight; bulk nginx lines
for goodput), against the ranges the scenario configures in `expect` (the Dropbox BBRv2 shapes).
`aa` must show no planted difference; `regression-bbr2-shallow` must move exactly the planted
segment of the planted arm, by the planted factor.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

import numpy as np
import orjson
import pytest
from ccab.cli import main
from ccab_workshop.sim.generator import iter_chunks
from ccab_workshop.sim.scenario import Segment, load_scenario
from ccab_workshop.sim.stats import Summary
from ccab_workshop.sim.truth import build_truth
from ccab_workshop.sim.world import build_world

MIB = 1 << 20
N_CANARY = 150_000


@pytest.fixture(scope="module")
def canary(canary_world) -> dict:
    out = canary_world  # the session's canary-tyo1 world (conftest: 3 h, N_CANARY connections)
    truth = json.loads((out / "truth.json").read_text())
    prefixes = {row[0]: dict(zip(truth["prefixes"]["columns"], row)) for row in truth["prefixes"]["rows"]}
    last: dict[str, dict] = {}
    max_acked: dict[str, int] = defaultdict(int)
    active: dict[str, list[int]] = defaultdict(list)
    with open(out / "ccab.tcp.v1.jsonl", "rb") as f:
        for line in f:
            r = orjson.loads(line)
            sid = r["sock_id"]
            last[sid] = r  # records of a connection are in time order
            max_acked[sid] = max(max_acked[sid], r["bytes_acked"])
            inflight = r["send_q_bytes"] - r["notsent_bytes"]
            if inflight > 0:
                active[sid].append(inflight)
    bulk = {sid: r for sid, r in last.items() if max_acked[sid] >= MIB}
    goodput = []
    with open(out / "ccab.http.v1.jsonl", "rb") as f:
        for line in f:
            r = orjson.loads(line)
            if r["body_bytes_sent"] >= MIB:
                goodput.append((r["arm"], prefixes[r["peer_prefix"]]["bandwidth_mbps"],
                                r["body_bytes_sent"] * 8 / r["request_time_ms"] / 1e3))
    expect = {(e["stat"], e["arm"], e["vs"], json.dumps(e["where"], sort_keys=True)): e["range"]
              for e in truth["scenario"]["expect"]}
    return {"truth": truth, "prefixes": prefixes, "bulk": bulk, "active": active, "goodput": goodput,
            "expect": expect}


def configured(c: dict, stat: str, arm: str, vs: str | None = None, **where) -> tuple[float, float]:
    seg = dataclasses.asdict(Segment(**{k: tuple(v) for k, v in where.items()}))
    seg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in seg.items()}
    return tuple(c["expect"][(stat, arm, vs, json.dumps(seg, sort_keys=True))])


def within(value: float, rng: tuple[float, float], what: str) -> None:
    assert rng[0] <= value <= rng[1], f"{what} = {value:.3f}, configured range {list(rng)}"


def retrans_pct(c: dict, arm: str, buffer_below: float | None = None) -> np.ndarray:
    vals = [100 * r["bytes_retrans"] / r["bytes_sent"] for r in c["bulk"].values() if r["arm"] == arm and
            (buffer_below is None or c["prefixes"][r["peer_prefix"]]["buffer_bdp"] < buffer_below)]
    return np.array(vals)


def test_canary_truth_meets_every_expectation(canary):
    bad = [e for e in canary["truth"]["expectations"] if not e["ok"]]
    assert not bad, bad
    assert canary["truth"]["total_connections"] == N_CANARY


def test_retransmit_ratios_from_the_records(canary):
    cubic, bbr1, bbr2 = (np.median(retrans_pct(canary, a)) for a in ("control", "bbr1", "bbr2"))
    within(cubic, configured(canary, "retrans_pct_p50", "control"), "cubic median retrans %")
    within(bbr1 / cubic, configured(canary, "retrans_pct_p50", "bbr1", "control"), "bbr1/cubic")
    within(bbr2 / cubic, configured(canary, "retrans_pct_p50", "bbr2", "control"), "bbr2/cubic")
    within(bbr1 / bbr2, configured(canary, "retrans_pct_p50", "bbr1", "bbr2"), "bbr1/bbr2")
    shallow = np.median(retrans_pct(canary, "bbr1", 0.5)) / np.median(retrans_pct(canary, "control", 0.5))
    within(shallow, configured(canary, "retrans_pct_p50", "bbr1", "control", buffer_bdp=[0.0, 0.5]),
           "bbr1/cubic on shallow buffers")
    assert shallow > bbr1 / cubic, "BBRv1 is worse with shallow buffers"
    assert np.percentile(retrans_pct(canary, "bbr1"), 99) > 6, "some BBRv1 connections lose > 6%"


def test_bbr2_high_loss_tail(canary):
    shares = {}
    for arm in ("control", "bbr1", "bbr2"):
        r = retrans_pct(canary, arm)
        shares[arm] = float(np.mean(r >= 50))
        if arm == "bbr2":
            tail = r[r >= 50]
            assert len(tail) >= 5 and tail.min() >= 55 and tail.max() <= 92, tail
    lo, hi = configured(canary, "high_loss_share", "bbr2")
    within(shares["bbr2"], (lo * 0.5, hi * 1.5), "bbr2 share of bulk connections >= 50% retrans")
    assert shares["control"] <= configured(canary, "high_loss_share", "control")[1]
    assert shares["bbr2"] > 2 * shares["bbr1"]


FIXED = ["metro-fixed", "asia-regional", "overseas"]  # the Dropbox shapes are fixed-line clients


def _fixed(c: dict, r: dict) -> bool:
    return c["prefixes"][r["peer_prefix"]]["class"] in FIXED


def test_inflight_ordering(canary):
    """One value per connection (median of its busy samples) to avoid length bias."""
    med, med_fixed = {}, {}
    for arm in ("control", "bbr1", "bbr2"):
        per_conn = [(np.median(canary["active"][sid]), _fixed(canary, r)) for sid, r in canary["bulk"].items()
                    if r["arm"] == arm and canary["active"].get(sid)]
        assert len(per_conn) > 500
        med[arm] = np.median([v for v, _ in per_conn])
        med_fixed[arm] = np.median([v for v, f in per_conn if f])
    assert med["bbr1"] > med["control"] > med["bbr2"]
    within(med["bbr1"] / med["bbr2"], configured(canary, "inflight_bytes_p50", "bbr1", "bbr2"), "bbr1/bbr2")
    within(med_fixed["control"] / med_fixed["bbr2"],
           configured(canary, "inflight_bytes_p50", "control", "bbr2", classes=FIXED), "cubic/bbr2 (fixed)")


def test_bbr1_queues_on_deep_buffers(canary):
    def rtt(arm):
        return np.median([r["rtt_us"] for r in canary["bulk"].values() if r["arm"] == arm and _fixed(canary, r) and
                          canary["prefixes"][r["peer_prefix"]]["buffer_bdp"] >= 2.0])
    within(rtt("bbr1") / rtt("control"),
           configured(canary, "rtt_ms_p50", "bbr1", "control", classes=FIXED, buffer_bdp=[2.0, 100.0]),
           "bbr1/cubic RTT, deep fixed-line buffers")
    assert rtt("bbr2") < rtt("control")


def test_mobile_cubic_fills_the_buffer_bbr_does_not(canary):
    """Verizon's LTE pattern from the records: on mobile prefixes Cubic's queueing delay
    (srtt - min RTT) is several times BBR's, at similar goodput."""
    def queue_ms(arm):
        return np.median([(r["rtt_us"] - r["min_rtt_us"]) / 1e3 for r in canary["bulk"].values()
                          if r["arm"] == arm and canary["prefixes"][r["peer_prefix"]]["class"] == "mobile"])
    for arm in ("bbr1", "bbr2"):
        assert queue_ms("control") > 3 * queue_ms(arm), (arm, queue_ms("control"), queue_ms(arm))


def test_goodput_by_client_speed(canary):
    g = np.array([(a == "control", a == "bbr1", a == "bbr2", bw, gp) for a, bw, gp in canary["goodput"]])

    def p50(arm_col: int, lo: float, hi: float) -> float:
        m = (g[:, arm_col] == 1) & (g[:, 3] >= lo) & (g[:, 3] < hi)
        assert m.sum() > 300
        return float(np.median(g[m, 4]))

    slow, fast = (0.0, 10.0), (50.0, 10000.0)
    within(p50(2, *slow) / p50(0, *slow),
           configured(canary, "goodput_mbps_p50", "bbr2", "control", bandwidth_mbps=list(slow)), "slow bbr2/cubic")
    within(p50(2, *fast) / p50(1, *fast),
           configured(canary, "goodput_mbps_p50", "bbr2", "bbr1", bandwidth_mbps=list(fast)), "fast bbr2/bbr1")
    within(p50(1, *fast) / p50(0, *fast),
           configured(canary, "goodput_mbps_p50", "bbr1", "control", bandwidth_mbps=list(fast)), "fast bbr1/cubic")
    assert p50(1, *slow) > p50(2, *slow), "for slow clients BBRv2 follows Cubic, below BBRv1"


def test_rwnd_limited_share_lowest_for_bbr2(canary):
    share = {arm: np.mean([r["rwnd_limited_ms"] > 0 for r in canary["bulk"].values() if r["arm"] == arm])
             for arm in ("control", "bbr1", "bbr2")}
    assert share["bbr2"] < share["control"] < share["bbr1"], share


def test_host_effects_and_the_odd_host(canary):
    hosts = canary["truth"]["hosts"]
    assert len(hosts) == 21 and {h["arm"] for h in hosts} == {"control", "bbr1", "bbr2"}
    odd = next(h for h in hosts if h["host"] == "edge-tyo1-05")
    normal = next(h for h in hosts if h["host"] == "edge-tyo1-06")
    assert odd["client_mix"]["overseas"] > 2 * normal["client_mix"]["overseas"]
    effects = np.array([h["effect_multiplier"]["retrans"] for h in hosts])
    assert effects.std() > 0.03, "host random effects are planted"


# ---- A/A and a planted regression, from the generator's summaries -------------------------------

def realised(sc, n: int) -> dict:
    world = build_world(sc, total_connections=n)
    summary = Summary(len(sc.arms), len(world.segments))
    for chunk in iter_chunks(world, workers=1):
        summary.merge(chunk.summary)
    return build_truth(world, summary, seed=sc.seed, total_connections=n)


def test_aa_shows_no_planted_difference():
    sc = load_scenario("aa")
    assert sc.arm_model(sc.arms[0]) == sc.arm_model(sc.arms[1]) and not any(a.effects for a in sc.arms)
    truth = realised(sc, 60_000)
    assert all(e["ok"] for e in truth["expectations"]), truth["expectations"]
    a, b = (arm["realised"]["all"] for arm in truth["arms"])
    for stat in ("retrans_pct_p50", "inflight_bytes_p50", "rtt_ms_p50", "goodput_mbps_p50"):
        assert 0.85 < b[stat] / a[stat] < 1.18, stat


def test_regression_moves_only_the_planted_segment():
    sc = load_scenario("regression-bbr2-shallow")
    clean = dataclasses.replace(sc, arms=tuple(dataclasses.replace(a, effects=()) for a in sc.arms),
                                expect=tuple(e for e in sc.expect))
    with_effect, without = realised(sc, 60_000), realised(clean, 60_000)
    assert all(e["ok"] for e in with_effect["expectations"]), with_effect["expectations"]
    shallow, other = "buffer_bdp:[0,0.5)", "buffer_bdp:[0.5,1000)"
    ctrl_a, bbr2_a = (a["realised"] for a in with_effect["arms"])
    ctrl_b, bbr2_b = (a["realised"] for a in without["arms"])
    assert ctrl_a == ctrl_b, "the control arm is untouched"
    # +30% RTT from hour 2 of 24 on: p90 moves by a bit less than 1.3
    within(bbr2_a[shallow]["rtt_ms_p90"] / bbr2_b[shallow]["rtt_ms_p90"], (1.2, 1.32), "planted RTT p90 factor")
    within(bbr2_a[shallow]["retrans_pct_p50"] / bbr2_b[shallow]["retrans_pct_p50"], (1.35, 1.55), "retrans")
    within(bbr2_a[other]["rtt_ms_p90"] / bbr2_b[other]["rtt_ms_p90"], (0.99, 1.01), "unplanted segment")
