/* SPDX-License-Identifier: GPL-2.0 */
/* ccab bbr2/bbr3: the BBR v2-family control law, written from the IETF CCWG BBR draft
 * (draft-ietf-ccwg-bbr, the v3 pseudocode) and Google's BBRv2 descriptions. See
 * rollout/bpf/cc/README.md.
 *
 * This header is the whole algorithm, on plain integers: bbr2_on_ack() takes what one ACK tells
 * (struct bbr2_in, filled from tcp_sock and rate_sample by the BPF glue in bbr2.bpf.c, or by the
 * host test driver in rollout/bpfcc/lawtest/) and returns the congestion window and pacing rate
 * (struct bbr2_out), always clamped. No kernel types, no floating point, no loops, every divisor
 * checked: the same file compiles for BPF and for the host.
 *
 * Fixed point: gains are in 1/256 (BBR_UNIT); bandwidth is packets per microsecond << 24
 * (BW_UNIT), as in Linux's tcp_bbr.c.
 *
 * Version: compile with -DBBR_V=2 (BBRv2 constants: PROBE_BW DOWN 0.75, STARTUP 2.885, loss
 * events to leave STARTUP 8) or -DBBR_V=3 (the draft's: DOWN 0.90, STARTUP 2.77, UP cwnd gain
 * 2.25, 6 loss events).
 */
#ifndef CCAB_BBR2_LAW_H
#define CCAB_BBR2_LAW_H

#ifndef BBR_V
#define BBR_V 2
#endif

#define BBR_SCALE 8
#define BBR_UNIT (1 << BBR_SCALE)
#define BW_SCALE 24
#define BW_UNIT (1ULL << BW_SCALE)
#define USEC_PER_SEC 1000000ULL
#define U32_INF 0xffffffffU
#define U64_INF 0xffffffffffffffffULL

/* Safety bounds (rollout/bpf/cc/README.md): whatever the model says, the window stays within
 * [BBR_CWND_MIN, BBR_CWND_MAX] packets (and the socket's snd_cwnd_clamp), the pacing rate within
 * [BBR_PACING_MIN_BPS, BBR_PACING_MAX_BPS] bytes per second (and sk_max_pacing_rate). */
#define BBR_CWND_MIN 4
#define BBR_CWND_MAX (1U << 20)
#define BBR_PACING_MIN_BPS 12500ULL          /* 100 kbit/s */
#define BBR_PACING_MAX_BPS 25000000000ULL    /* 200 Gbit/s */
#define BBR_RTT_MAX_US 60000000U             /* samples above 60 s are ignored */
#define BBR_BW_MAX (1ULL << 32)               /* 256 packets/us (3 Tbit/s at 1500 B): samples capped */

/* Modes and PROBE_BW phases (exported as is). */
enum { B2_STARTUP = 0, B2_DRAIN = 1, B2_PROBE_BW = 2, B2_PROBE_RTT = 3 };
enum { B2_DOWN = 0, B2_CRUISE = 1, B2_REFILL = 2, B2_UP = 3 };
enum { ACKS_INIT = 0, ACKS_REFILLING, ACKS_PROBE_STARTING, ACKS_PROBE_FEEDBACK, ACKS_PROBE_STOPPING };

#if BBR_V == 3
#define BBR_STARTUP_PACING_GAIN 709  /* 2.77 */
#define BBR_STARTUP_CWND_GAIN 512    /* 2.0 */
#define BBR_DRAIN_PACING_GAIN 90     /* 0.35 */
#define BBR_DOWN_PACING_GAIN 230     /* 0.90 */
#define BBR_UP_CWND_GAIN 576         /* 2.25 */
#define BBR_STARTUP_LOSS_EVENTS 6
#else
#define BBR_STARTUP_PACING_GAIN 739  /* 2.885 = 2/ln 2 */
#define BBR_STARTUP_CWND_GAIN 512    /* 2.0 (v2 lowered it from v1's 2.885) */
#define BBR_DRAIN_PACING_GAIN 89     /* 1/2.885 */
#define BBR_DOWN_PACING_GAIN 192     /* 0.75 */
#define BBR_UP_CWND_GAIN 512         /* 2.0 */
#define BBR_STARTUP_LOSS_EVENTS 8
#endif
#define BBR_UP_PACING_GAIN 320       /* 1.25 */
#define BBR_UP_PIF_GAIN 320          /* v2: UP ends once a min_rtt has passed and inflight >= 1.25 BDP */
#define BBR_CWND_GAIN 512            /* 2.0 */
#define BBR_PROBE_RTT_CWND_GAIN 128  /* 0.5 BDP */
#define BBR_FULL_BW_THRESH 320       /* 1.25: STARTUP/UP growth that counts */
#define BBR_FULL_BW_ROUNDS 3
#define BBR_LOSS_THRESH_PCT 2        /* inflight too high above 2 % loss */
#define BBR_ECN_THRESH_PCT 50        /* ... or 50 % CE marks */
#define BBR_ECN_FACTOR 85            /* 1/3 of alpha cuts inflight_lo */
#define BBR_ECN_ALPHA_GAIN_SHIFT 4   /* alpha EWMA gain 1/16 */
#define BBR_BETA 179                 /* 0.7: multiplicative decrease of bw_lo/inflight_lo/inflight_hi */
#define BBR_HEADROOM 38              /* 15 % of inflight_hi left free in CRUISE and PROBE_RTT */
#define BBR_PACING_MARGIN_PCT 1
#define BBR_MIN_RTT_WIN_US 10000000ULL    /* min_rtt filter: 10 s */
#define BBR_PROBE_RTT_WIN_US 5000000ULL   /* PROBE_RTT every 5 s (v1: 10 s) */
#define BBR_PROBE_RTT_US 200000ULL        /* 200 ms at the low window */
#define BBR_PROBE_WAIT_BASE_US 2000000ULL /* PROBE_BW probes every 2-3 s of wall time ... */
#define BBR_PROBE_WAIT_RAND_US 1000000U
#define BBR_PROBE_MAX_ROUNDS 63           /* ... or after min(BDP packets, 63) rounds */
#define BBR_INIT_CWND 10

struct bbr2_state {
	u64 bw_hi[2];        /* max delivery rate of the last two probe cycles (BW_UNIT) */
	u64 bw_lo;           /* short-term lower bound (U64_INF: none) */
	u64 bw;              /* model bandwidth: min(max(bw_hi), bw_lo) */
	u64 full_bw;         /* for the plateau check */
	u64 bw_latest;       /* max sample this round */
	u64 min_rtt_stamp_us;
	u64 probe_rtt_min_stamp_us;
	u64 probe_rtt_done_stamp_us;
	u64 cycle_stamp_us;
	u64 probe_rtt_last_us; /* exported: when the last PROBE_RTT began */
	u32 min_rtt_us;        /* U32_INF until the first sample */
	u32 probe_rtt_min_us;
	u32 inflight_hi;       /* long-term upper bound, packets (U32_INF: none) */
	u32 inflight_lo;       /* short-term lower bound (U32_INF: none) */
	u32 inflight_latest;   /* max delivered per sample this round */
	u32 next_rtt_delivered;
	u32 loss_round_delivered; /* the loss round's end (its own, not restarted by phase changes) */
	u32 round_count;
	u32 rounds_since_probe;
	u32 prior_cwnd;
	u32 lost_round_start;  /* tp->lost at the loss round's start */
	u32 lost_rtt_start;    /* tp->lost at BBR's last round start (v2's rs->lost: see bbr_lost_in_round) */
	u32 delivered_round_start;
	u32 ce_round_start;
	u32 loss_events_round; /* ACKs that marked packets lost this round */
	u32 probe_up_cnt;
	u32 probe_up_acks;
	u32 probe_up_rounds;
	u32 bw_probe_wait_us;
	u32 ecn_alpha;         /* BBR_UNIT scaled */
	u32 pacing_gain;
	u32 cwnd_gain;
	u32 probe_rtt_count;
	u32 inflight_round_max; /* max prior_in_flight this round ... */
	u32 inflight_prev_round_max; /* ... and in the previous one (0: none yet): see bbr_tx_in_flight */
	u8 mode;
	u8 phase;
	u8 ack_phase;
	u8 full_bw_reached;
	u8 full_bw_now;
	u8 full_bw_cnt;
	u8 round_start;
	u8 loss_round_start;
	u8 loss_in_round;
	u8 prev_ca_state;
	u8 probe_rtt_round_done;
	u8 bw_probe_samples;
	u8 idle_restart;
	u8 restore_cwnd;
	u8 prev_probe_too_high;  /* the last probe ended in "inflight too high" */
	u8 stopped_risky_probe;  /* this probe stopped at inflight_hi because the last one was too high */
	u8 initialized;
};

/* What one ACK tells: tcp_sock and rate_sample fields (see bbr2.bpf.c). */
struct bbr2_in {
	u64 now_us;          /* tp->tcp_mstamp */
	u64 max_pacing_bps;  /* sk->sk_max_pacing_rate */
	u64 pacing_bps;      /* sk->sk_pacing_rate now */
	s64 interval_us;     /* rs->interval_us (<= 0: no rate sample) */
	s64 rtt_us;          /* rs->rtt_us (< 0: none) */
	s32 delivered;       /* rs->delivered */
	s32 losses;          /* rs->losses: packets marked lost by this ACK */
	u32 mss;
	u32 cwnd;
	u32 cwnd_clamp;
	u32 inflight;        /* tcp_packets_in_flight() after this ACK */
	u32 srtt_us;         /* tp->srtt_us >> 3 */
	u32 tp_delivered;
	u32 tp_delivered_ce;
	u32 tp_lost;
	u32 prior_delivered;
	u32 prior_in_flight; /* stands in for v2's rs->tx_in_flight */
	u32 acked_sacked;
	u32 rand;            /* a random u32 */
	u8 ca_state;         /* TCP_CA_Open 0 ... TCP_CA_Recovery 3, TCP_CA_Loss 4 */
	u8 is_app_limited;
	u8 ecn_ok;
};

struct bbr2_out {
	u32 cwnd;
	u64 pacing_bps;
};

static __always_inline u64 bbr_min64(u64 a, u64 b) { return a < b ? a : b; }
static __always_inline u64 bbr_max64(u64 a, u64 b) { return a > b ? a : b; }
static __always_inline u32 bbr_min32(u32 a, u32 b) { return a < b ? a : b; }
static __always_inline u32 bbr_max32(u32 a, u32 b) { return a > b ? a : b; }

static __always_inline u64 bbr_max_bw(const struct bbr2_state *s)
{
	return bbr_max64(s->bw_hi[0], s->bw_hi[1]);
}

/* packets = bw * min_rtt * gain, rounded up; InitCwnd * gain before the first RTT sample.
 * bw < 2^32 (capped where sampled), rtt < 2^26: bw * rtt < 2^58, then >> 8 and * gain (<= 2^10). */
static __always_inline u32 bbr_bdp(const struct bbr2_state *s, u64 bw, u32 gain)
{
	u64 x;

	if (s->min_rtt_us == U32_INF)
		return (BBR_INIT_CWND * gain) >> BBR_SCALE;
	x = bw * s->min_rtt_us;
	x = (x >> BBR_SCALE) * gain;
	x = (x + BW_UNIT - 1) >> BW_SCALE;
	return (u32)bbr_min64(x, BBR_CWND_MAX);
}

/* Segments per TSO burst the pacing rate allows (tcp_tso_autosize: ~1 ms of data), 2..44. */
static __always_inline u32 bbr_tso_segs(const struct bbr2_in *in)
{
	u64 bytes = in->pacing_bps >> 10;
	u32 segs = in->mss ? (u32)bbr_min64(bytes / in->mss, 44) : 2;

	return bbr_max32(segs, 2);
}

/* bytes per second = bw * mss * gain * 99 %. bw < 2^32, mss < 2^16: bw * mss < 2^48; * gain >> 8
 * < 2^50; >> 8 (bytes/us << 16) < 2^42; * 990000 (< 2^20) < 2^62; >> 16. */
/* BBRInflight(): the BDP at gain plus the quantization budget (3 TSO bursts; 2 more in UP). */
static __always_inline u32 bbr_inflight(const struct bbr2_state *s, const struct bbr2_in *in, u64 bw, u32 gain)
{
	u32 x = bbr_bdp(s, bw, gain) + 3 * bbr_tso_segs(in);

	if (s->mode == B2_PROBE_BW && s->phase == B2_UP)
		x += 2;
	return bbr_min32(x, BBR_CWND_MAX);
}

static __always_inline u64 bbr_rate_bps(const struct bbr2_in *in, u64 bw, u32 gain)
{
	u64 rate = bw * (in->mss ? in->mss : 1);

	rate = (rate * gain) >> BBR_SCALE;
	rate >>= BW_SCALE - 16;
	rate *= USEC_PER_SEC / 100 * (100 - BBR_PACING_MARGIN_PCT);
	return rate >> 16;
}

static __always_inline void bbr_reset_lower_bounds(struct bbr2_state *s)
{
	s->bw_lo = U64_INF;
	s->inflight_lo = U32_INF;
}

static __always_inline void bbr_reset_full_bw(struct bbr2_state *s, u64 bw)
{
	s->full_bw = bw;
	s->full_bw_cnt = 0;
	s->full_bw_now = 0;
}

static __always_inline void bbr_start_round(struct bbr2_state *s, const struct bbr2_in *in)
{
	s->next_rtt_delivered = in->tp_delivered;
}

/* Linux's bbr_save_cwnd (v1/v2/v3), on entering recovery or PROBE_RTT: the window to restore when
 * either ends. Entering either from the other keeps the larger, so that a recovery that starts
 * and ends inside PROBE_RTT (at 1 % loss nearly every PROBE_RTT has one) does not replace the
 * window PROBE_RTT saved with PROBE_RTT's own small one. */
static __always_inline void bbr_save_cwnd(struct bbr2_state *s, const struct bbr2_in *in)
{
	if (s->prev_ca_state < 3 && s->mode != B2_PROBE_RTT)
		s->prior_cwnd = in->cwnd;
	else
		s->prior_cwnd = bbr_max32(s->prior_cwnd, in->cwnd);
}

static __always_inline void bbr_raise_inflight_hi_slope(struct bbr2_state *s, const struct bbr2_in *in)
{
	u32 growth = 1U << (s->probe_up_rounds & 31);

	s->probe_up_rounds = bbr_min32(s->probe_up_rounds + 1, 30);
	s->probe_up_cnt = bbr_max32(in->cwnd / growth, 1);
}

static __always_inline void bbr_start_down(struct bbr2_state *s, const struct bbr2_in *in)
{
	s->loss_in_round = 0;
	s->bw_latest = 0;
	s->inflight_latest = 0;
	s->probe_up_cnt = U32_INF;
	s->rounds_since_probe = in->rand & 1;
	s->bw_probe_wait_us = (u32)BBR_PROBE_WAIT_BASE_US + (in->rand >> 1) % BBR_PROBE_WAIT_RAND_US;
	s->cycle_stamp_us = in->now_us;
	s->ack_phase = ACKS_PROBE_STOPPING;
	bbr_start_round(s, in);
	s->mode = B2_PROBE_BW;
	s->phase = B2_DOWN;
}

static __always_inline void bbr_start_refill(struct bbr2_state *s, const struct bbr2_in *in)
{
	bbr_reset_lower_bounds(s);
	s->probe_up_rounds = 0;
	s->probe_up_acks = 0;
	s->stopped_risky_probe = 0;
	s->ack_phase = ACKS_REFILLING;
	bbr_start_round(s, in);
	s->phase = B2_REFILL;
}

static __always_inline void bbr_start_up(struct bbr2_state *s, const struct bbr2_in *in, u64 sample_bw)
{
	s->ack_phase = ACKS_PROBE_STARTING;
	bbr_start_round(s, in);
	bbr_reset_full_bw(s, sample_bw);
	s->cycle_stamp_us = in->now_us;
	s->phase = B2_UP;
	bbr_raise_inflight_hi_slope(s, in);
}

static __always_inline int bbr_time_to_probe(struct bbr2_state *s, const struct bbr2_in *in)
{
	u32 reno_rounds = bbr_min32(bbr_bdp(s, s->bw, BBR_UNIT), BBR_PROBE_MAX_ROUNDS);

	if (in->now_us - s->cycle_stamp_us > s->bw_probe_wait_us || s->rounds_since_probe >= reno_rounds) {
		bbr_start_refill(s, in);
		return 1;
	}
	return 0;
}

static __always_inline u32 bbr_inflight_with_headroom(const struct bbr2_state *s)
{
	u32 headroom;

	if (s->inflight_hi == U32_INF)
		return U32_INF;
	headroom = (u32)(((u64)s->inflight_hi * BBR_HEADROOM) >> BBR_SCALE);
	headroom = bbr_max32(headroom, 1);
	return bbr_max32(s->inflight_hi - headroom, BBR_CWND_MIN);
}

/* v2's rs->tx_in_flight (packets in flight when the ACKed packet was sent) is not in mainline's
 * rate_sample, but follows from what is: every packet in flight when the ACKed one was sent was
 * sent before it, so by its ACK each has been delivered or marked lost (a reordered or not yet
 * marked hole aside): tx_in_flight = rs->delivered (delivered since its send) + the packets lost
 * since (v2's rs->lost, approximated by BBR's round's: bbr_lost_in_round). Not the inflight now:
 * after a probe it has fallen (DOWN) and a loss reported then would set inflight_hi at the lower
 * level, not at the one that lost; before it has risen a round's growth. Without a rate sample:
 * prior_in_flight, bounded by the previous round's largest (the packets ACKed in a round were sent
 * during the one before). */
static __always_inline u32 bbr_lost_in_round(const struct bbr2_state *s, const struct bbr2_in *in)
{
	return in->tp_lost - s->lost_rtt_start;
}

static __always_inline u32 bbr_tx_in_flight(const struct bbr2_state *s, const struct bbr2_in *in)
{
	u32 x = in->prior_in_flight;

	if (in->delivered > 0 && in->interval_us > 0)
		return bbr_min32((u32)in->delivered + bbr_min32(bbr_lost_in_round(s, in), BBR_CWND_MAX), BBR_CWND_MAX);
	if (s->inflight_prev_round_max)
		x = bbr_min32(x, s->inflight_prev_round_max);
	return bbr_max32(x, 1);
}

/* v2's rs->lost > rs->tx_in_flight * 2 %, with mainline's fields: packets lost since the round
 * began (tp->lost now minus at the round start) over the estimated tx_in_flight. */
static __always_inline int bbr_inflight_too_high(const struct bbr2_state *s, const struct bbr2_in *in)
{
	u32 lost = bbr_lost_in_round(s, in);
	u32 delivered = in->tp_delivered - s->delivered_round_start;
	u32 ce = in->tp_delivered_ce - s->ce_round_start;
	u32 tx_in_flight = bbr_tx_in_flight(s, in);

	if (lost > 0 && (u64)lost * 100 > (u64)tx_in_flight * BBR_LOSS_THRESH_PCT)
		return 1;
	if (in->ecn_ok && delivered >= 8 && (u64)ce * 100 > (u64)delivered * BBR_ECN_THRESH_PCT)
		return 1;
	return 0;
}

static __always_inline void bbr_handle_inflight_too_high(struct bbr2_state *s, const struct bbr2_in *in)
{
	u32 target = bbr_bdp(s, s->bw, BBR_UNIT);
	u32 beta_target = (u32)(((u64)target * BBR_BETA) >> BBR_SCALE);

	s->prev_probe_too_high = 1;
	s->bw_probe_samples = 0;
	if (!in->is_app_limited)
		s->inflight_hi = bbr_max32(bbr_max32(bbr_tx_in_flight(s, in), beta_target), BBR_CWND_MIN);
	if (s->mode == B2_PROBE_BW && s->phase == B2_UP)
		bbr_start_down(s, in);
}

/* inflight_hi grows while UP finds no loss: by 1, 2, 4 ... packets per round. */
static __always_inline void bbr_probe_inflight_hi_upward(struct bbr2_state *s, const struct bbr2_in *in)
{
	u32 delta;

	if (in->prior_in_flight + 2 < in->cwnd || in->cwnd < s->inflight_hi)
		return; /* not cwnd-limited, or not at the bound */
	s->probe_up_acks += in->acked_sacked;
	if (s->probe_up_cnt && s->probe_up_acks >= s->probe_up_cnt) {
		delta = s->probe_up_acks / s->probe_up_cnt;
		s->probe_up_acks -= delta * s->probe_up_cnt;
		s->inflight_hi = bbr_min32(s->inflight_hi + delta, BBR_CWND_MAX);
	}
	if (s->round_start)
		bbr_raise_inflight_hi_slope(s, in);
}

static __always_inline void bbr_adapt_upper_bounds(struct bbr2_state *s, const struct bbr2_in *in)
{
	if (s->ack_phase == ACKS_PROBE_STARTING && s->round_start)
		s->ack_phase = ACKS_PROBE_FEEDBACK;
	if (s->ack_phase == ACKS_PROBE_STOPPING && s->round_start) {
		/* the first round after a probe: its samples are the probe's last; from now on the
		 * cycle's samples go into a fresh slot of the max-bw filter (one slot per cycle) */
		s->bw_probe_samples = 0;
		s->ack_phase = ACKS_INIT;
		if (s->mode == B2_PROBE_BW && !in->is_app_limited) {
			s->bw_hi[0] = s->bw_hi[1];
			s->bw_hi[1] = 0;
		}
		/* the probe stopped at inflight_hi (the one before had been too high) and a round of
		 * its ACKs showed no excess loss: probe again, this time growing past inflight_hi */
		if (s->mode == B2_PROBE_BW && s->stopped_risky_probe && !s->prev_probe_too_high) {
			bbr_start_refill(s, in);
			return;
		}
	}
	if (bbr_inflight_too_high(s, in)) {
		if (s->bw_probe_samples) /* a sample of the probe's packets: the probe found the limit */
			bbr_handle_inflight_too_high(s, in);
		return;
	}
	/* the loss rate is safe: a higher level seen in any phase raises inflight_hi (v2: resilience
	 * to random loss) */
	if (s->inflight_hi == U32_INF)
		return;
	if (bbr_tx_in_flight(s, in) > s->inflight_hi)
		s->inflight_hi = bbr_min32(bbr_tx_in_flight(s, in), BBR_CWND_MAX);
	if (s->mode == B2_PROBE_BW && s->phase == B2_UP)
		bbr_probe_inflight_hi_upward(s, in);
}

/* Once per loss round: loss or CE marks outside probing lower bw_lo/inflight_lo (v2's "short-term
 * model"); ECN alpha. The loss round is the draft's (and Linux v2/v3's loss_round_delivered): its
 * own packet-timed round over valid samples, not the one PROBE_BW's phase changes and recovery
 * restart; the round's "latest" filters then start again from this ACK's sample (draft
 * BBRAdvanceLatestDeliverySignals), not from zero. */
static __always_inline void bbr_update_congestion_signals(struct bbr2_state *s, const struct bbr2_in *in, u64 sample_bw, int valid)
{
	u32 delivered, ce, ratio, ecn_cut;
	int probing;

	if (!s->loss_round_start)
		return;
	delivered = in->tp_delivered - s->delivered_round_start;
	ce = in->tp_delivered_ce - s->ce_round_start;
	if (in->ecn_ok && delivered) {
		ratio = (u32)bbr_min64(((u64)ce << BBR_SCALE) / delivered, BBR_UNIT);
		s->ecn_alpha = s->ecn_alpha - (s->ecn_alpha >> BBR_ECN_ALPHA_GAIN_SHIFT) +
			       (ratio >> BBR_ECN_ALPHA_GAIN_SHIFT);
	}
	probing = s->mode == B2_STARTUP || (s->mode == B2_PROBE_BW && (s->phase == B2_REFILL || s->phase == B2_UP));
	if (!probing && (s->loss_in_round || (in->ecn_ok && ce))) {
		if (s->bw_lo == U64_INF)
			s->bw_lo = bbr_max_bw(s);
		if (s->inflight_lo == U32_INF)
			s->inflight_lo = in->cwnd;
		s->bw_lo = bbr_max64(s->bw_latest, (s->bw_lo * BBR_BETA) >> BBR_SCALE);
		if (s->loss_in_round)
			s->inflight_lo = bbr_max32(s->inflight_latest, (u32)(((u64)s->inflight_lo * BBR_BETA) >> BBR_SCALE));
		if (in->ecn_ok && ce) {
			ecn_cut = BBR_UNIT - bbr_min32((s->ecn_alpha * BBR_ECN_FACTOR) >> BBR_SCALE, BBR_UNIT - BBR_BETA);
			s->inflight_lo = bbr_min32(s->inflight_lo, (u32)(((u64)in->cwnd * ecn_cut) >> BBR_SCALE));
		}
		s->inflight_lo = bbr_max32(s->inflight_lo, BBR_CWND_MIN);
	}
	/* Startup with heavy loss: the pipe is full (v2: 2 % and >= 8 loss events in a round). */
	if (s->mode == B2_STARTUP && s->loss_events_round >= BBR_STARTUP_LOSS_EVENTS) {
		u32 lost = in->tp_lost - s->lost_round_start;

		if ((u64)lost * 100 > (u64)(delivered + lost) * BBR_LOSS_THRESH_PCT) {
			s->full_bw_reached = 1;
			s->inflight_hi = bbr_max32(bbr_bdp(s, bbr_max_bw(s), BBR_UNIT), s->inflight_latest);
		}
	}
	s->loss_in_round = 0;
	s->loss_events_round = 0;
	s->bw_latest = valid ? sample_bw : 0;
	s->inflight_latest = valid ? (u32)in->delivered : 0;
	s->lost_round_start = in->tp_lost;
	s->delivered_round_start = in->tp_delivered;
	s->ce_round_start = in->tp_delivered_ce;
}

static __always_inline void bbr_check_full_bw(struct bbr2_state *s, const struct bbr2_in *in, u64 sample_bw)
{
	if (!s->round_start || in->is_app_limited || s->full_bw_now)
		return;
	if (sample_bw >= ((s->full_bw * BBR_FULL_BW_THRESH) >> BBR_SCALE)) {
		s->full_bw = sample_bw;
		s->full_bw_cnt = 0;
		return;
	}
	if (++s->full_bw_cnt >= BBR_FULL_BW_ROUNDS) {
		s->full_bw_now = 1;
		s->full_bw_reached = 1;
	}
}

static __always_inline void bbr_init_state(struct bbr2_state *s, const struct bbr2_in *in)
{
	__builtin_memset(s, 0, sizeof(*s));
	s->min_rtt_us = U32_INF;
	s->probe_rtt_min_us = U32_INF;
	s->min_rtt_stamp_us = in->now_us;
	s->probe_rtt_min_stamp_us = in->now_us;
	s->inflight_hi = U32_INF;
	bbr_reset_lower_bounds(s);
	s->next_rtt_delivered = in->tp_delivered;
	s->loss_round_delivered = in->tp_delivered;
	s->lost_round_start = in->tp_lost;
	s->lost_rtt_start = in->tp_lost;
	s->delivered_round_start = in->tp_delivered;
	s->ce_round_start = in->tp_delivered_ce;
	s->prior_cwnd = in->cwnd;
	s->probe_up_cnt = U32_INF;
	s->mode = B2_STARTUP;
	s->pacing_gain = BBR_STARTUP_PACING_GAIN;
	s->cwnd_gain = BBR_STARTUP_CWND_GAIN;
	s->initialized = 1;
}

/* The first pacing rate: InitCwnd per srtt (or 1 ms) at the startup gain. */
static __always_inline u64 bbr_initial_pacing_bps(const struct bbr2_in *in)
{
	u64 rtt = in->srtt_us ? in->srtt_us : 1000;
	u64 rate = (u64)bbr_max32(in->cwnd, 1) * (in->mss ? in->mss : 1) * USEC_PER_SEC / rtt;

	rate = (rate * BBR_STARTUP_PACING_GAIN) >> BBR_SCALE;
	return bbr_max64(bbr_min64(rate, BBR_PACING_MAX_BPS), BBR_PACING_MIN_BPS);
}

static __always_inline void bbr2_on_ack(struct bbr2_state *s, const struct bbr2_in *in, struct bbr2_out *out)
{
	u64 sample_bw = 0, max_bw, rate, cap64;
	u32 max_inflight, cwnd, cap, probe_rtt_cwnd;
	int valid = in->delivered > 0 && in->interval_us > 0;
	int probe_rtt_expired;

	if (!s->initialized)
		bbr_init_state(s, in);

	/* 1. rounds and delivery rate */
	s->round_start = 0;
	if (in->delivered >= 0 && in->interval_us > 0 && in->prior_delivered - s->next_rtt_delivered < 0x80000000U) {
		s->next_rtt_delivered = in->tp_delivered;
		s->round_count++;
		s->rounds_since_probe++;
		s->round_start = 1;
		s->inflight_prev_round_max = s->inflight_round_max;
		s->inflight_round_max = 0;
	}
	s->inflight_round_max = bbr_max32(s->inflight_round_max, in->prior_in_flight);
	if (valid) {
		u64 iv = (u64)in->interval_us;

		sample_bw = (u64)in->delivered * BW_UNIT / iv; /* delivered < 2^31: < 2^55 */
		sample_bw = bbr_min64(sample_bw, BBR_BW_MAX);
		if (!in->is_app_limited || sample_bw >= bbr_max_bw(s))
			s->bw_hi[1] = bbr_max64(s->bw_hi[1], sample_bw);
		s->bw_latest = bbr_max64(s->bw_latest, sample_bw);
		s->inflight_latest = bbr_max32(s->inflight_latest, (u32)in->delivered);
		s->idle_restart = 0;
	}
	/* draft BBRNoteLoss: the first loss of a loss round restarts it, so that the round whose
	 * delivery signals set bw_lo/inflight_lo is the one after the loss (its samples span the
	 * loss's recovery), not the rest of the round in which it was found (each of whose samples
	 * lacks the lost packet: at 34 packets per round, 3 % per lossy round) */
	if (in->losses > 0) {
		if (!s->loss_in_round)
			s->loss_round_delivered = in->tp_delivered;
		s->loss_in_round = 1;
		s->loss_events_round++;
	}
	s->loss_round_start = 0;
	if (valid && in->acked_sacked && in->prior_delivered - s->loss_round_delivered < 0x80000000U) {
		s->loss_round_delivered = in->tp_delivered;
		s->loss_round_start = 1;
	}

	/* 2. min_rtt, and the 5 s PROBE_RTT window */
	/* the draft's probe_rtt_expired: taken before the sample refreshes the filter, and what
	 * sends the flow to PROBE_RTT below */
	probe_rtt_expired = in->now_us - s->probe_rtt_min_stamp_us > BBR_PROBE_RTT_WIN_US;
	if (in->rtt_us >= 0 && in->rtt_us < BBR_RTT_MAX_US) {
		u32 rtt = (u32)in->rtt_us;

		if (rtt < s->probe_rtt_min_us || probe_rtt_expired) {
			s->probe_rtt_min_us = rtt;
			s->probe_rtt_min_stamp_us = in->now_us;
		}
		if (s->probe_rtt_min_us < s->min_rtt_us || in->now_us - s->min_rtt_stamp_us > BBR_MIN_RTT_WIN_US) {
			s->min_rtt_us = s->probe_rtt_min_us;
			s->min_rtt_stamp_us = s->probe_rtt_min_stamp_us;
		}
	}

	/* 3. model bandwidth */
	max_bw = bbr_max_bw(s);
	s->bw = bbr_min64(max_bw, s->bw_lo);

	/* 4. state machine */
	if (s->mode == B2_STARTUP) {
		bbr_check_full_bw(s, in, max_bw);
		if (s->bw_probe_samples == 0)
			s->bw_probe_samples = 1;
		if (bbr_inflight_too_high(s, in) && s->loss_events_round >= BBR_STARTUP_LOSS_EVENTS) {
			s->full_bw_reached = 1;
			s->inflight_hi = bbr_max32(bbr_bdp(s, max_bw, BBR_UNIT), s->inflight_latest);
		}
		if (s->full_bw_reached) {
			s->mode = B2_DRAIN;
			s->ack_phase = ACKS_INIT;
		}
	}
	if (s->mode == B2_DRAIN && in->inflight <= bbr_inflight(s, in, max_bw, BBR_UNIT))
		bbr_start_down(s, in);
	if (s->mode == B2_PROBE_RTT && s->full_bw_reached)
		bbr_adapt_upper_bounds(s, in); /* v3's bbr_update_cycle_phase: PROBE_RTT too */
	if (s->mode == B2_PROBE_BW) {
		bbr_adapt_upper_bounds(s, in);
		if (s->mode == B2_PROBE_BW && s->phase == B2_UP) {
			int done = 0;

			bbr_check_full_bw(s, in, sample_bw);
			if (s->prev_probe_too_high && in->inflight >= s->inflight_hi) {
				/* the last probe lost at inflight_hi: stop there this time */
				s->stopped_risky_probe = 1;
				done = 1;
			} else if (BBR_V == 2) {
				/* v2: a min_rtt into the probe, 1.25 BDP in flight is enough to measure
				 * more bandwidth if there is any; more only builds a queue */
				done = in->now_us - s->cycle_stamp_us > s->min_rtt_us &&
				       in->inflight >= bbr_inflight(s, in, max_bw, BBR_UP_PIF_GAIN);
			} else if (in->prior_in_flight + 2 >= in->cwnd && in->cwnd >= s->inflight_hi) {
				bbr_reset_full_bw(s, sample_bw); /* still cwnd-limited at inflight_hi: keep probing */
			} else {
				done = s->full_bw_now; /* v3 (the draft): the bandwidth stopped growing */
			}
			if (done) {
				s->prev_probe_too_high = 0; /* no excess loss (yet) */
				bbr_start_down(s, in);
			}
		} else if (s->phase == B2_DOWN) {
			if (!bbr_time_to_probe(s, in) && in->inflight <= bbr_inflight_with_headroom(s) &&
			    in->inflight <= bbr_inflight(s, in, max_bw, BBR_UNIT))
				s->phase = B2_CRUISE;
		} else if (s->phase == B2_CRUISE) {
			bbr_time_to_probe(s, in);
		} else if (s->phase == B2_REFILL && s->round_start) {
			s->bw_probe_samples = 1;
			bbr_start_up(s, in, sample_bw);
		}
	}
	bbr_update_congestion_signals(s, in, sample_bw, valid);
	if (s->round_start)
		s->lost_rtt_start = in->tp_lost;
	s->bw = bbr_min64(bbr_max_bw(s), s->bw_lo);
	max_bw = s->bw;

	/* PROBE_RTT: every 5 s without a new low, the window drops to half a BDP for 200 ms and a round */
	probe_rtt_cwnd = bbr_max32(bbr_bdp(s, max_bw, BBR_PROBE_RTT_CWND_GAIN), BBR_CWND_MIN);
	if (s->mode != B2_PROBE_RTT && !s->idle_restart && probe_rtt_expired) {
		bbr_save_cwnd(s, in);
		s->mode = B2_PROBE_RTT;
		s->probe_rtt_done_stamp_us = 0;
		s->probe_rtt_count++;
		s->probe_rtt_last_us = in->now_us;
		/* v2/v3: the probe's feedback stops here; a round later bw_probe_samples is cleared
		 * (bbr_adapt_upper_bounds runs in PROBE_RTT too), so a loss reported after PROBE_RTT
		 * is not taken for a probe's (it cut inflight_hi to 0.7 BDP) */
		s->ack_phase = ACKS_PROBE_STOPPING;
		bbr_start_round(s, in);
	}
	if (s->mode == B2_PROBE_RTT) {
		if (!s->probe_rtt_done_stamp_us && in->inflight <= probe_rtt_cwnd) {
			s->probe_rtt_done_stamp_us = in->now_us + BBR_PROBE_RTT_US;
			s->probe_rtt_round_done = 0;
			bbr_start_round(s, in);
		} else if (s->probe_rtt_done_stamp_us) {
			if (s->round_start)
				s->probe_rtt_round_done = 1;
			if (s->probe_rtt_round_done && in->now_us > s->probe_rtt_done_stamp_us) {
				s->probe_rtt_min_stamp_us = in->now_us;
				bbr_reset_lower_bounds(s);
				if (s->full_bw_reached) {
					bbr_start_down(s, in);
					s->phase = B2_CRUISE;
				} else {
					s->mode = B2_STARTUP;
				}
				s->probe_rtt_done_stamp_us = 0;
				s->restore_cwnd = 1; /* cwnd = max(cwnd, prior_cwnd) below */
			}
		}
	}

	/* 5. gains */
	switch (s->mode) {
	case B2_STARTUP:
		s->pacing_gain = BBR_STARTUP_PACING_GAIN;
		s->cwnd_gain = BBR_STARTUP_CWND_GAIN;
		break;
	case B2_DRAIN:
		s->pacing_gain = BBR_DRAIN_PACING_GAIN;
		s->cwnd_gain = BBR_CWND_GAIN;
		break;
	case B2_PROBE_RTT:
		s->pacing_gain = BBR_UNIT;
		s->cwnd_gain = BBR_PROBE_RTT_CWND_GAIN;
		break;
	default:
		s->pacing_gain = s->phase == B2_UP ? BBR_UP_PACING_GAIN :
				 s->phase == B2_DOWN ? BBR_DOWN_PACING_GAIN : BBR_UNIT;
		s->cwnd_gain = s->phase == B2_UP ? BBR_UP_CWND_GAIN : BBR_CWND_GAIN;
	}

	/* 6. pacing rate: bw * gain * (1 - 1 %); in STARTUP only upward */
	if (max_bw) {
		rate = bbr_rate_bps(in, max_bw, s->pacing_gain);
		if (s->full_bw_reached || rate > in->pacing_bps)
			out->pacing_bps = rate;
		else
			out->pacing_bps = in->pacing_bps;
	} else {
		out->pacing_bps = in->pacing_bps ? in->pacing_bps : bbr_initial_pacing_bps(in);
	}

	/* 7. cwnd (Linux v2/v3 bbr_set_cwnd). Fast recovery leaves the window alone: no v1 packet
	 * conservation and no cut by the packets lost (v2/v3 dropped both: the loss response is
	 * bw_lo/inflight_lo). With it, a recovery entered while inflight was below cwnd (after
	 * PROBE_RTT, or pacing-limited) set cwnd to that inflight, and the next loss round took it as
	 * inflight_lo's starting point (bench at 100 ms, 1 % loss: cwnd 328 -> 86 a round after
	 * PROBE_RTT, bw 19 -> 10 Mbit/s until the next probe). Entering recovery still saves the
	 * window (v2/v3 bbr_ssthresh), restored after an RTO's loss state ends and after PROBE_RTT. */
	max_inflight = bbr_inflight(s, in, max_bw, s->cwnd_gain);
	cwnd = in->cwnd;
	if (in->ca_state >= 3 && s->prev_ca_state < 3)
		bbr_save_cwnd(s, in);
	if ((in->ca_state < 4 && s->prev_ca_state == 4) || s->restore_cwnd) {
		/* leaving the RTO's loss state (v3 bbr_exit_loss_recovery), or PROBE_RTT: restore */
		cwnd = bbr_max32(cwnd, s->prior_cwnd);
		s->restore_cwnd = 0;
	}
	s->prev_ca_state = in->ca_state;
	if (s->full_bw_reached) {
		cwnd = bbr_min32(cwnd + in->acked_sacked, max_inflight);
	} else if (cwnd < max_inflight || in->tp_delivered < BBR_INIT_CWND) {
		cwnd = cwnd + in->acked_sacked;
	}
	cwnd = bbr_max32(cwnd, BBR_CWND_MIN);
	if (s->mode == B2_PROBE_RTT)
		cwnd = bbr_min32(cwnd, probe_rtt_cwnd);
	/* bound by the model: inflight_hi while probing/DOWN, with 15 % headroom in CRUISE and
	 * PROBE_RTT; inflight_lo always */
	cap = U32_INF;
	if (s->mode == B2_PROBE_BW && s->phase != B2_CRUISE)
		cap = s->inflight_hi;
	else if (s->mode == B2_PROBE_RTT || (s->mode == B2_PROBE_BW && s->phase == B2_CRUISE))
		cap = bbr_inflight_with_headroom(s);
	cap = bbr_min32(cap, s->inflight_lo);
	cap = bbr_max32(cap, BBR_CWND_MIN);
	cwnd = bbr_min32(cwnd, cap);

	/* 8. safety clamps */
	cwnd = bbr_min32(cwnd, bbr_min32(in->cwnd_clamp ? in->cwnd_clamp : U32_INF, BBR_CWND_MAX));
	out->cwnd = bbr_max32(cwnd, BBR_CWND_MIN);
	cap64 = in->max_pacing_bps ? bbr_min64(in->max_pacing_bps, BBR_PACING_MAX_BPS) : BBR_PACING_MAX_BPS;
	out->pacing_bps = bbr_max64(bbr_min64(out->pacing_bps, cap64), BBR_PACING_MIN_BPS);
}

/* An RTO or undo resets the plateau detector (v1/v2 do the same). */
static __always_inline void bbr2_on_loss_state(struct bbr2_state *s, u32 cwnd)
{
	s->prior_cwnd = bbr_max32(s->prior_cwnd, cwnd);
	bbr_reset_full_bw(s, 0);
	s->loss_in_round = 1;
}

static __always_inline void bbr2_on_undo(struct bbr2_state *s)
{
	bbr_reset_full_bw(s, 0);
	bbr_reset_lower_bounds(s);
}

#endif
