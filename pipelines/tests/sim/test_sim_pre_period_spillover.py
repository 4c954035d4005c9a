"""The pre-period has no arm, so nothing is treated: the shared-bottleneck spillover (a planted
effect) must not touch it. Before the fix, hosts whose *drawn* arm was not the first got
``exp(spillover)`` more goodput in the pre-period, which biased the "effect vs treated share"
panel's changes from the pre-period."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from ccab_workshop.sim.generator import multipliers
from ccab_workshop.sim.scenario import SharedBottleneck, load_scenario
from ccab_workshop.sim.timeline import draw_connections
from ccab_workshop.sim.world import build_pre_world


def test_pre_period_goodput_carries_host_effects_only_even_with_a_shared_bottleneck():
    sc = load_scenario("tiny")
    sc = replace(sc, shared_bottleneck=SharedBottleneck(spillover_goodput=0.5))
    pre = build_pre_world(sc, 1.0, total_connections=2000)
    conns = draw_connections(pre.sc, pre.prefixes, pre.hosts, pre.plan.counts[0], pre.plan.serial_offset[0],
                             (0.0, pre.plan.window_s), np.random.default_rng(5))
    assert len(set(sc.arms[a].name for a in pre.hosts.arm_idx.tolist())) > 1   # drawn arms differ: the case
    goodput = multipliers(pre, conns).goodput
    np.testing.assert_allclose(goodput, np.exp(pre.hosts.effect_log["goodput"][conns.host]))
