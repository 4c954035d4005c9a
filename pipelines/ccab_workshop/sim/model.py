"""Per-connection congestion-control model: pure numpy functions of arrays and an rng.

The model is deliberately *phenomenological*: a few textbook mechanisms (the Reno/CUBIC
response to loss, under-utilisation of shallow buffers, standing queues, Little's law,
receive-window limits, slow start) with one knob per published effect, so that the shapes of
the Dropbox BBRv2 evaluation come out by default and every effect can be turned off. It is not
a packet simulator. README.md lists the knobs and the calibration.

Every function takes arrays with one entry per connection and returns new arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from ccab_workshop.sim.scenario import CCModel

#: loss *events* per lost packet at a congested bottleneck: drops come in bursts, and a loss-based
#: sender halves once per burst (Mathis et al.'s p is the congestion-event rate).
CONGESTION_BURST_PKTS = 50.0
#: steepness of the fade of loss sensitivity with bandwidth (see :func:`loss_weight`)
LOSS_FADE_EXPONENT = 4.0
#: CUBIC multiplicative decrease (RFC 8312 beta_cubic).
CUBIC_BETA = 0.7

# Mobile (cellular) access paths, on top of their class's medians (Verizon's LTE drive test,
# Netdev 2.1: throughput varies with signal and handovers; deep per-user buffers):
#: extra log-scale SD of a connection's bandwidth (the link rate changes with signal quality)
MOBILE_BANDWIDTH_SIGMA = 0.5
#: extra log-scale SD of a connection's base RTT (scheduling, radio state)
MOBILE_RTT_SIGMA = 0.25
#: mean handovers per connection (Poisson); each adds a burst of loss
MOBILE_HANDOVERS_MEAN = 0.6
#: retransmitted share added per handover (a burst of a few packets of a transfer)
MOBILE_HANDOVER_LOSS = 0.004
#: RTT variance of a mobile path relative to a fixed one with the same queue
MOBILE_RTTVAR_FACTOR = 1.8


def mobile_paths(paths: Paths, rng: np.random.Generator) -> tuple[Paths, np.ndarray]:
    """Mobile paths get variable bandwidth, more variable RTT and handover loss bursts; their
    random loss arrives in bursts too (retransmitted alike, but one loss event per burst).

    Returns the new paths and the handover count per connection (0 off mobile paths)."""
    n = len(paths.bandwidth_bps)
    mobile = paths.mobile if paths.mobile is not None else np.zeros(n, dtype=bool)
    bw = paths.bandwidth_bps * np.exp(MOBILE_BANDWIDTH_SIGMA * rng.standard_normal(n))
    rtt = paths.rtt0_s * np.exp(MOBILE_RTT_SIGMA * rng.standard_normal(n))
    handovers = np.where(mobile, rng.poisson(MOBILE_HANDOVERS_MEAN, n), 0)
    return Paths(
        bandwidth_bps=np.where(mobile, np.clip(bw, 0.25e6, 2e9), paths.bandwidth_bps),
        rtt0_s=np.where(mobile, np.clip(rtt, 0.5e-3, 1.0), paths.rtt0_s),
        buffer_bdp=paths.buffer_bdp,
        # the radio link layer (HARQ/RLC) recovers isolated losses: what a TCP sender on a cellular
        # path sees comes in bursts (handovers, resets), one congestion event per burst
        random_loss=np.where(mobile, 0.0, paths.random_loss),
        congestion_loss=paths.congestion_loss,
        rwnd_bytes=paths.rwnd_bytes,
        mss_bytes=paths.mss_bytes,
        mobile=mobile,
        burst_loss=np.where(mobile, np.minimum(paths.random_loss + handovers * MOBILE_HANDOVER_LOSS, 0.15), 0.0),
    ), handovers


@dataclass(frozen=True)
class Paths:
    """What the network offers each connection (pre-treatment: independent of the arm)."""

    bandwidth_bps: np.ndarray  # bottleneck bandwidth
    rtt0_s: np.ndarray  # base (propagation) RTT
    buffer_bdp: np.ndarray  # bottleneck buffer in bandwidth-delay products
    random_loss: np.ndarray  # non-congestive loss probability (fraction)
    congestion_loss: np.ndarray  # loss a Cubic sender meets at the bottleneck (fraction)
    rwnd_bytes: np.ndarray  # client's maximum receive window
    mss_bytes: np.ndarray
    mobile: np.ndarray | None = None  # bool: a cellular access path (None = none are)
    burst_loss: np.ndarray | None = None  # loss in bursts (handovers): retransmitted, one event per burst


@dataclass(frozen=True)
class Knobs:
    """:class:`~ccab_workshop.sim.scenario.CCModel` fields as per-connection arrays."""

    utilization: np.ndarray
    loss_sensitivity: np.ndarray
    loss_sensitivity_fade_mbps: np.ndarray  # inf = no fade
    retrans_scale: np.ndarray
    shallow_buffer_retrans_pct: np.ndarray
    high_loss_tail_share: np.ndarray
    high_loss_tail_lo_pct: np.ndarray
    high_loss_tail_hi_pct: np.ndarray
    queue_fill: np.ndarray
    queue_cap_bdp: np.ndarray
    inflight_gain: np.ndarray
    cwnd_headroom: np.ndarray
    deep_buffer_fill: np.ndarray

    @staticmethod
    def gather(models: list[CCModel], arm_idx: np.ndarray) -> "Knobs":
        """Per-connection knob arrays from one :class:`CCModel` per arm."""
        def col(get) -> np.ndarray:
            return np.array([get(m) for m in models], dtype=float)[arm_idx]

        return Knobs(
            utilization=col(lambda m: m.utilization),
            loss_sensitivity=col(lambda m: m.loss_sensitivity),
            loss_sensitivity_fade_mbps=col(lambda m: m.loss_sensitivity_fade_mbps or np.inf),
            retrans_scale=col(lambda m: m.retrans_scale),
            shallow_buffer_retrans_pct=col(lambda m: m.shallow_buffer_retrans_pct),
            high_loss_tail_share=col(lambda m: m.high_loss_tail_share),
            high_loss_tail_lo_pct=col(lambda m: m.high_loss_tail_pct[0]),
            high_loss_tail_hi_pct=col(lambda m: m.high_loss_tail_pct[1]),
            queue_fill=col(lambda m: m.queue_fill),
            queue_cap_bdp=col(lambda m: m.queue_cap_bdp),
            inflight_gain=col(lambda m: m.inflight_gain),
            cwnd_headroom=col(lambda m: m.cwnd_headroom),
            deep_buffer_fill=col(lambda m: m.deep_buffer_fill),
        )


@dataclass(frozen=True)
class Multipliers:
    """Per-connection multiplicative effects (host random effect x planted effects); 1 = none."""

    goodput: np.ndarray
    rtt: np.ndarray
    retrans: np.ndarray
    inflight: np.ndarray
    rwnd_limited: np.ndarray

    @staticmethod
    def ones(n: int) -> "Multipliers":
        return Multipliers(*(np.ones(n) for _ in fields(Multipliers)))


@dataclass(frozen=True)
class Outcomes:
    """Whole-connection outcomes of the model (steady state while busy)."""

    rate_bps: np.ndarray  # sending rate while busy, retransmissions included
    goodput_bps: np.ndarray  # new data per second while busy: rate * (1 - retrans_frac)
    retrans_frac: np.ndarray  # bytes_retrans / bytes_sent
    high_loss: np.ndarray  # bool: in the pathological high-loss tail
    queue_bdp: np.ndarray  # standing queue at the bottleneck, in BDPs
    srtt_s: np.ndarray
    rttvar_s: np.ndarray
    min_rtt_s: np.ndarray
    inflight_bytes: np.ndarray  # bytes in flight while busy
    cwnd_pkts: np.ndarray  # int
    rwnd_limited_frac: np.ndarray  # share of busy time limited by the receive window
    sndbuf_limited_frac: np.ndarray  # share of busy time limited by the send buffer


def lossbased_rate_bps(rtt_s: np.ndarray, loss_event_rate: np.ndarray, mss_bytes: np.ndarray) -> np.ndarray:
    """Throughput bound of a loss-based sender: max of the Reno (Mathis) and CUBIC responses.

    Parameters
    ----------
    rtt_s : ndarray
        Round-trip time, seconds.
    loss_event_rate : ndarray
        Congestion events per packet (0 gives an unbounded rate).
    mss_bytes : ndarray
        Segment size.

    Returns
    -------
    ndarray
        Bits per second. Reno: ``1.22 MSS / (RTT sqrt(p))``; CUBIC (RFC 8312 §5.1, C = 0.4,
        beta = 0.7): ``1.054 MSS RTT^-1/4 p^-3/4``.
    """
    p = np.maximum(loss_event_rate, 1e-12)
    bits = mss_bytes * 8.0
    reno = 1.22 * bits / (rtt_s * np.sqrt(p))
    cubic = 1.054 * bits * rtt_s ** -0.25 * p ** -0.75
    return np.maximum(reno, cubic)


def shallow_buffer_utilization(buffer_bdp: np.ndarray) -> np.ndarray:
    """Link utilisation of a loss-based sender that backs off by ``CUBIC_BETA`` on each loss.

    After a loss the window is ``beta (1 + buffer)`` BDPs; the pipe stays full when that is >= 1,
    otherwise it idles for part of the cycle. Averaged over a cycle: ``min(1, (1 + beta (1 + b)) / 2)``.
    """
    return np.minimum(1.0, 0.5 * (1.0 + CUBIC_BETA * (1.0 + buffer_bdp)))


def loss_weight(knobs: Knobs, bandwidth_bps: np.ndarray) -> np.ndarray:
    """How much a sender follows the loss-based bound (1 = Cubic, 0 = BBRv1).

    ``loss_sensitivity / (1 + (B / fade)^4)``: BBRv2 reacts to loss like Cubic on paths slower
    than ``loss_sensitivity_fade_mbps`` and like BBRv1 on faster ones.
    """
    fade = knobs.loss_sensitivity_fade_mbps
    ratio = np.where(np.isinf(fade), 0.0, bandwidth_bps / 1e6 / np.where(np.isinf(fade), 1.0, fade))
    return knobs.loss_sensitivity / (1.0 + ratio**LOSS_FADE_EXPONENT)


def retrans_fraction(paths: Paths, knobs: Knobs, mult: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Share of sent bytes that are retransmissions, and the high-loss-tail flag.

    ``random_loss + congestion_loss * retrans_scale * buffer^-0.3 + shallow_pct * (1 - buffer)^1.5``
    (buffer in BDPs, the last term only below 1 BDP), times ``mult``; a ``high_loss_tail_share`` of
    connections instead retransmit uniformly within ``high_loss_tail_pct``.
    """
    b = paths.buffer_bdp
    buf_factor = np.clip(b ** -0.3, 0.5, 2.0)
    shallow = knobs.shallow_buffer_retrans_pct / 100.0 * np.clip(1.0 - b, 0.0, 1.0) ** 1.5
    burst = paths.burst_loss if paths.burst_loss is not None else 0.0
    r = (paths.random_loss + burst + paths.congestion_loss * knobs.retrans_scale * buf_factor + shallow) * mult
    tail = rng.random(len(b)) < knobs.high_loss_tail_share
    lo, hi = knobs.high_loss_tail_lo_pct / 100.0, knobs.high_loss_tail_hi_pct / 100.0
    r = np.where(tail, lo + (hi - lo) * rng.random(len(b)), r)
    return np.clip(r, 0.0, 0.95), tail


def connection_outcomes(paths: Paths, knobs: Knobs, mult: Multipliers, sndbuf_max_bytes: float,
                        rng: np.random.Generator) -> Outcomes:
    """Steady-state outcomes of each connection.

    Parameters
    ----------
    paths : Paths
        The client path of each connection.
    knobs : Knobs
        The congestion control's model parameters per connection.
    mult : Multipliers
        Host random effects and planted effects (multiplicative, 1 = none).
    sndbuf_max_bytes : float
        Largest send buffer the server autotunes to (``tcp_wmem[2]``); bounds bytes in flight.
    rng : numpy.random.Generator
        Source of the per-connection scatter.

    Returns
    -------
    Outcomes
        Queue and RTTs, retransmissions, rates, bytes in flight, cwnd and limited-time shares.

    Notes
    -----
    Order: standing queue -> srtt; retransmissions; throughput = bottleneck x utilisation
    (loss-based bound weighted by :func:`loss_weight`, loss-insensitive ``utilization``
    otherwise); in flight = rate x (srtt + (``inflight_gain`` - 1) x base RTT), i.e. Little's law
    plus the BDPs a sender keeps beyond the bottleneck queue (BBRv1's cwnd_gain of 2: data that
    overflows a shallow buffer is in flight until marked lost), then capped by the client's receive window and the send buffer,
    which also cut the rate and give the rwnd/sndbuf-limited shares.
    """
    n = len(paths.bandwidth_bps)
    b = paths.buffer_bdp
    rtt0 = paths.rtt0_s
    bw = paths.bandwidth_bps
    mss = paths.mss_bytes

    # standing queue and RTTs; on mobile paths a loss-based sender fills the deep buffer
    scatter = np.exp(0.3 * rng.standard_normal(n))
    q = knobs.queue_fill * np.minimum(b, knobs.queue_cap_bdp) * scatter
    mobile = paths.mobile if paths.mobile is not None else np.zeros(n, dtype=bool)
    q = np.where(mobile, np.maximum(q, np.minimum(knobs.deep_buffer_fill * b * scatter, b)), q)
    srtt = rtt0 * (1.0 + q) * mult.rtt
    min_rtt = np.minimum(rtt0 * (1.0 + 0.02 * np.abs(rng.standard_normal(n))), srtt)
    rttvar = srtt * (0.04 + 0.35 * q / (1.0 + q)) * np.exp(0.4 * rng.standard_normal(n))
    rttvar = np.where(mobile, rttvar * MOBILE_RTTVAR_FACTOR, rttvar)

    # retransmissions
    r, tail = retrans_fraction(paths, knobs, mult.retrans, rng)

    # throughput while busy
    buf_factor = np.clip(b ** -0.3, 0.5, 2.0)
    burst = paths.burst_loss if paths.burst_loss is not None else 0.0
    p_event = paths.random_loss + (paths.congestion_loss * buf_factor + burst) / CONGESTION_BURST_PKTS
    u_loss = np.minimum(1.0, lossbased_rate_bps(rtt0, p_event, mss) / bw) * shallow_buffer_utilization(b)
    w = loss_weight(knobs, bw)
    util = w * u_loss + (1.0 - w) * knobs.utilization
    rate = np.maximum(bw * util * mult.goodput, 1e4)

    # bytes in flight, receive window and send buffer. A window below the BDP caps the rate at
    # window / base RTT; a window between the BDP and what the sender wants only shrinks the
    # standing queue. Either way the sender is window-limited for part of its busy time.
    need = rate / 8.0 * (srtt + (knobs.inflight_gain - 1.0) * rtt0) * np.exp(0.2 * rng.standard_normal(n)) * mult.inflight
    limit = np.minimum(paths.rwnd_bytes, sndbuf_max_bytes)
    window = 1.1 * need * knobs.cwnd_headroom  # the window the sender reaches when probing
    rwnd_frac = np.clip((window - paths.rwnd_bytes) / window, 0.0, 0.97)
    snd_frac = np.clip((window - sndbuf_max_bytes) / window, 0.0, 0.97)
    snd_frac = np.where(paths.rwnd_bytes < sndbuf_max_bytes, 0.0, snd_frac)
    bdp = rate / 8.0 * rtt0
    rate = np.minimum(rate, limit * 8.0 / rtt0)
    q_eff = np.where(limit < need, np.minimum(q, np.maximum(limit / bdp - 1.0, 0.0)), q)
    srtt = np.where(limit < need, rtt0 * (1.0 + q_eff) * mult.rtt, srtt)
    min_rtt = np.minimum(min_rtt, srtt)
    inflight = np.minimum(need, limit)
    rwnd_frac = np.clip(rwnd_frac * mult.rwnd_limited, 0.0, 0.97)
    over = rwnd_frac + snd_frac
    scale = np.where(over > 0.98, 0.98 / np.maximum(over, 1e-12), 1.0)
    rwnd_frac, snd_frac = rwnd_frac * scale, snd_frac * scale

    inflight = np.maximum(inflight, 2.0 * mss)
    # the window covers what is in flight (plus the sender's headroom) and is never below what
    # the rate needs per round trip (rate <= cwnd x mss / srtt)
    cwnd = np.maximum(np.ceil(inflight / mss * knobs.cwnd_headroom), np.ceil(rate / 8.0 * srtt / mss))
    cwnd = np.maximum(cwnd, 4).astype(np.int64)
    return Outcomes(
        rate_bps=rate,
        goodput_bps=rate * (1.0 - r),
        retrans_frac=r,
        high_loss=tail,
        queue_bdp=q_eff,
        srtt_s=srtt,
        rttvar_s=rttvar,
        min_rtt_s=min_rtt,
        inflight_bytes=inflight,
        cwnd_pkts=cwnd,
        rwnd_limited_frac=rwnd_frac,
        sndbuf_limited_frac=snd_frac,
    )


def transfer_time_s(size_bytes: np.ndarray, rate_bps: np.ndarray, rtt_s: np.ndarray, ramp_rtt_s: np.ndarray,
                    window0_bytes: np.ndarray, window_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Time from a request's arrival until its last byte is acknowledged, and the slow-start part.

    Slow start doubles the window every ``ramp_rtt_s`` (the queue is not built yet) from
    ``window0_bytes`` up to ``window_bytes`` (the path's BDP); the rest flows at ``rate_bps``; the
    last byte needs one more ``rtt_s`` to be acknowledged.

    Returns
    -------
    (total_s, ramp_s) : tuple of ndarray
    """
    w0 = np.maximum(window0_bytes, 1.0)
    rounds = np.ceil(np.log2(np.maximum(window_bytes / w0, 1.0)))
    ss_bytes = w0 * (2.0**rounds - 1.0)
    in_ss = size_bytes <= ss_bytes
    rounds_needed = np.maximum(np.ceil(np.log2(size_bytes / w0 + 1.0)), 1.0)
    serial = size_bytes * 8.0 / rate_bps  # never faster than the rate, even within one window
    total = np.where(in_ss, np.maximum((rounds_needed - 1.0) * ramp_rtt_s, serial) + rtt_s,
                     rounds * ramp_rtt_s + (size_bytes - ss_bytes) * 8.0 / rate_bps + rtt_s)
    ramp = np.where(in_ss, total, rounds * ramp_rtt_s)
    return total, ramp
