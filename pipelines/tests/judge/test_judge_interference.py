"""Interference, measured: the "effect vs treated share" panel recovers a spillover planted in the
simulator's shared-bottleneck mode, and finds none when none is planted (issue 18, item 6)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from ccab.judge.interference import UnitValues, effect_vs_share
from ccab_workshop.sim import model as mdl
from ccab_workshop.sim.generator import SNDBUF_MAX_BYTES, multipliers, treated_share
from ccab_workshop.sim.timeline import draw_connections
from ccab_workshop.sim.scenario import SharedBottleneck, load_scenario
from ccab_workshop.sim.world import build_pre_world, build_world

SPILLOVER = 0.5   # log-scale goodput moved per unit treated share (planted)
HOSTS = 10


def _host_goodput(world) -> dict[str, float]:
    """Each host's geometric-mean goodput (bit/s) over its connections, from the simulator's model
    (client paths, cc model, host effects, planted and shared-bottleneck multipliers)."""
    sc, w = world.sc, world.plan.window_s
    rng = np.random.default_rng([sc.seed, sc.chunk_stream, 18])
    logs: dict[int, list[np.ndarray]] = {}
    for i in range(world.plan.counts.shape[0]):
        conns = draw_connections(sc, world.prefixes, world.hosts, world.plan.counts[i], world.plan.serial_offset[i],
                                 (i * w, (i + 1) * w), rng)
        knobs = mdl.Knobs.gather(list(world.models), conns.arm)
        out = mdl.connection_outcomes(conns.paths, knobs, multipliers(world, conns), SNDBUF_MAX_BYTES, rng)
        for h in np.unique(conns.host).tolist():
            logs.setdefault(h, []).append(np.log(out.goodput_bps[conns.host == h]))
    return {world.hosts.names[h]: float(np.exp(np.concatenate(v).mean())) for h, v in logs.items()}


def _unit(base, pop: str, seed: int, treated_hosts: int, spillover: float) -> UnitValues:
    """One simulated PoP: ``treated_hosts`` of ``HOSTS`` on bbr2, a pre-period with the same hosts."""
    arms = (replace(base.arms[0], hosts=HOSTS - treated_hosts), replace(base.arms[1], hosts=treated_hosts))
    sc = replace(base, pop=pop, seed=seed, arms=arms, duration_h=1.0,
                 shared_bottleneck=SharedBottleneck(spillover_goodput=spillover))
    world = build_world(sc, total_connections=6000)
    pre = _host_goodput(build_pre_world(sc, 1.0, total_connections=6000))
    win = _host_goodput(world)
    names = world.hosts.names
    treated = np.array([sc.arms[a].name != sc.arms[0].name for a in world.hosts.arm_idx.tolist()])
    return UnitValues(pop, treated_share(world), treated, np.array([win[h] for h in names]),
                      np.array([pre[h] for h in names]))


@pytest.fixture(scope="module")
def base():
    sc = load_scenario("tiny")
    return replace(sc, arms=sc.arms[:2], hosts=replace(sc.hosts, effect_sd=replace(sc.hosts.effect_sd, goodput=0.3)))


@pytest.mark.parametrize("spillover", [SPILLOVER, 0.0])
def test_effect_vs_treated_share_panel_recovers_the_planted_spillover(base, spillover):
    units = [_unit(base, f"p{i}", 100 + i, t, spillover) for i, t in enumerate((2, 3, 4, 6, 7, 8))]
    panel = effect_vs_share(units)
    lo, hi = panel.control_line.slope_ci()
    print(f"spillover {spillover}: shares {panel.shares}; A/B pooled {panel.ab_pooled[0]:+.3f}; full rollout "
          f"{panel.full_rollout[0]:+.3f} ± {panel.full_rollout[1]:.3f}; {panel.note}; control changes "
          f"{[(round(a, 3), round(b, 3)) for a, b in panel.control_change]}")
    assert lo <= -spillover <= hi  # the control arm loses `spillover` per unit treated share
    assert panel.spillover_detected is (spillover > 0)
    if spillover:
        # the host-level A/B carries the spillover; the extrapolated full rollout does not
        assert panel.ab_pooled[0] - panel.full_rollout[0] > 2 * math.hypot(panel.ab_pooled[1], panel.full_rollout[1])
