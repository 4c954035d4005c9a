"""``truth.json``: what was planted and what came out.

Planted: the scenario (as validated), the resolved cc model and effects of every arm, every
host's arm, random effects, traffic weight and client mix, and the client prefixes with their
pre-treatment attributes. Realised: per arm (and per segment named by an expectation or an
effect) the summary statistics of the generated connections, computed from the generator's
arrays (whole connections, before sampling), and each expectation with its realised value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ccab_workshop.sim.scenario import Expectation, to_plain
from ccab_workshop.sim.stats import HIGH_LOSS_PCT, Summary
from ccab_workshop.sim.world import World

TRUTH_VERSION = 1


def expectation_value(world: World, summary: Summary, e: Expectation) -> float | None:
    """The realised value of an expectation: the statistic, or its ratio to arm ``vs``."""
    names = [a.name for a in world.sc.arms]
    g = world.segments.index(e.where)
    v = summary.stats(names.index(e.arm), g)[e.stat]
    if e.vs is None or v is None:
        return v
    w = summary.stats(names.index(e.vs), g)[e.stat]
    if w is None or w == 0:
        return None
    return v / w


def build_truth(world: World, summary: Summary, *, seed: int, total_connections: int) -> dict[str, Any]:
    sc = world.sc
    h = world.hosts
    arms = []
    for a, arm in enumerate(sc.arms):
        per_seg = {world.segments[g].label(): summary.stats(a, g) for g in range(len(world.segments))}
        arms.append({
            "name": arm.name, "cc": arm.cc, "cc_version": world.cc_versions[a], "kernel": arm.kernel,
            "hosts": [h.names[i] for i in np.flatnonzero(h.arm_idx == a).tolist()],
            "cc_model": to_plain(world.models[a]),
            "planted_effects": to_plain(arm.effects),
            "connections": int(summary.connections[a]),
            "realised": per_seg,
        })
    class_names = [c.name for c in sc.clients.classes]
    hosts = []
    for i, name in enumerate(h.names):
        mix = np.diff(np.r_[0.0, h.class_cum[i]])
        hosts.append({
            "host": name, "arm": sc.arms[int(h.arm_idx[i])].name, "kernel": sc.arms[int(h.arm_idx[i])].kernel,
            "traffic_weight": round(float(h.traffic[i]), 6),
            "effect_multiplier": {m: round(float(np.exp(v[i])), 6) for m, v in h.effect_log.items()},
            "client_mix": {c: round(float(x), 6) for c, x in zip(class_names, mix)},
            "connections": int(summary.host_connections.get(i, 0)),
        })
    p = world.prefixes
    prefixes = {
        "columns": ["prefix", "class", "bandwidth_mbps", "rtt_ms", "buffer_bdp", "random_loss_zero_share",
                    "random_loss_pct", "popularity_in_class"],
        "rows": [[lab, class_names[int(k)], round(float(bw), 4), round(float(rt), 4), round(float(bf), 4),
                  round(float(lz), 4), round(float(lp), 5), round(float(pp), 8)]
                 for lab, k, bw, rt, bf, lz, lp, pp in zip(p.label.tolist(), p.class_idx.tolist(),
                                                           p.bandwidth_mbps, p.rtt_ms, p.buffer_bdp,
                                                           p.loss_zero_share, p.loss_pct, p.popularity)],
    }
    expectations = []
    for e in sc.expect:
        v = expectation_value(world, summary, e)
        expectations.append({**to_plain(e), "realised": v,
                             "ok": None if v is None else bool(e.range[0] <= v <= e.range[1])})
    return {
        "truth_version": TRUTH_VERSION,
        "scenario": to_plain(sc),
        "seed": seed,
        "total_connections": total_connections,
        "records": dict(summary.records),
        "definitions": {
            "population": "bulk connections: at least one response body >= 1 MiB; whole-connection "
                          "values from the generator, before sampling",
            "retrans_pct": "100 * bytes_retrans / bytes_sent at the end of the connection",
            "high_loss_share": f"share of bulk connections with retrans_pct >= {HIGH_LOSS_PCT:g}",
            "inflight_bytes": "bytes in flight while the connection is busy (steady state), one value per connection",
            "inflight_bytes_busy": "the same weighted by busy time: what snapshots of busy sockets show",
            "rtt_ms": "smoothed RTT while busy", "min_rtt_ms": "kernel min RTT",
            "goodput_mbps": "body_bytes_sent * 8 / request_time over bulk requests (nginx view)",
            "rwnd_limited_share": "share of bulk connections with rwnd_limited_ms > 0",
            "rwnd_limited_pct": "100 * sum(rwnd_limited_ms) / sum(busy_ms)",
            "segments": "client prefixes by pre-treatment attributes (see prefixes)",
        },
        "arms": arms,
        "hosts": hosts,
        "expectations": expectations,
        "prefixes": prefixes,
    }
