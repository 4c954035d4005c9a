/* SPDX-License-Identifier: GPL-2.0 */
/* ccab vivace: PCC-Vivace's rate control (Dong et al., NSDI 2018), written from the paper, as
 * plain-integer C shared by the BPF glue (vivace.bpf.c) and the host test (rollout/bpfcc/lawtest).
 * See rollout/bpf/cc/README.md.
 *
 * Monitor intervals (MIs): the sender keeps a rate for one MI (max(srtt, 10 ms)); the ACKs that
 * arrive one srtt later are that MI's feedback, and when they are in the MI is scored:
 *   u(x) = x^0.9 - 900 x dRTT/dt - 11.35 x L          (x in Mbit/s, L the loss rate)
 * (dRTT/dt: the RTT's slope over the MI's ACKs by least squares, 0 when negative (as the
 * authors' PCC-Uspace), when |slope| < 0.01 or when it is not significant: |t| < 2, see
 * vv_rtt_slope_q16; L: the loss rate, lost / (delivered+lost), averaged over the last MIs: an
 * EWMA, 1/8 per scored MI — see vv_loss_q16).
 * STARTING doubles the rate each MI until an MI scores lower than the one before; PROBING sends
 * two pairs of MIs at r(1+e) and r(1-e) (e = 5 %); when both pairs agree, MOVING steps the rate by
 * m(t) * theta0 * gradient, the confidence amplifier m(t) growing with t consecutive steps in one
 * direction, each step bounded by w * r (the dynamic change boundary: w = 5 % + k 10 %, k counting
 * steps that hit the bound, reset when the direction changes); the first MI that scores lower
 * sends the control back to PROBING.
 *
 * Fixed point: utilities and x in 1/65536 (Q16); x^0.9 = exp2(0.9 log2 x) with a bit-by-bit log2
 * and a cubic exp2; no floating point, every divisor checked, the rate clamped.
 */
#ifndef CCAB_VIVACE_LAW_H
#define CCAB_VIVACE_LAW_H

#define VV_Q 16
#define VV_ONE (1LL << VV_Q)
#define VV_MI_SLOTS 8
#define VV_MIN_MI_US 10000ULL
#define VV_RATE_MIN_BPS 12500ULL        /* 100 kbit/s */
#define VV_RATE_MAX_BPS 25000000000ULL  /* 200 Gbit/s */
#define VV_CWND_MIN 4
#define VV_CWND_MAX (1U << 20)
#define VV_EPS_PCT 5                    /* probing: r(1 +- 5 %) */
#define VV_OMEGA0_PCT 5                 /* change boundary w0 */
#define VV_OMEGA_STEP_PCT 10            /* ... + k * 10 % */
#define VV_B 900                        /* latency coefficient */
#define VV_C_Q16 743834                 /* loss coefficient 11.35 in Q16 */
#define VV_GRAD_MIN_Q16 655             /* 0.01: smaller RTT gradients are noise */
#define VV_THETA0_Q16 65536             /* 1 Mbit/s per unit of utility gradient */
#define VV_AMP_MAX 10
#define VV_LOSS_EWMA_SHIFT 3            /* the loss rate in u: EWMA over MIs, gain 1/8 up */
#define VV_LOSS_FALL_SHIFT 1            /* ... and 1/2 down */

enum { VV_STARTING = 0, VV_PROBING = 1, VV_MOVING = 2 };

/* what an MI was for */
enum { VV_MI_FILL = 0, VV_MI_START = 1, VV_MI_PROBE = 2, VV_MI_MOVE = 3 };

struct vv_mi {
	u64 rate_bps;
	u64 t_first_us, t_last_us;
	u64 start_us, sent_end_us;   /* when the MI sent: [start, sent_end) */
	u64 lag_us;                  /* srtt at its start: its feedback arrives that much later */
	u32 delivered, lost;
	u32 rtt_first_us, rtt_last_us;
	/* least-squares sums of the MI's RTT samples: t in 128-us ticks since t_first_us (< 2^16),
	 * r = rtt - rtt_first_us in us (|r| < 2^18), at most VV_REG_MAX samples */
	u64 reg_t, reg_tt, reg_rr;
	s64 reg_r, reg_tr;
	u32 reg_n;
	u8 kind, probe_idx, used, pad;
};

#define VV_REG_MAX 4096
#define VV_REG_TICK_SHIFT 7

struct vivace_state {
	struct vv_mi mi[VV_MI_SLOTS];
	u64 rate_bps;          /* base rate r */
	u64 mi_start_us;
	u64 prev_rate_bps;     /* STARTING/MOVING: the rate of the last scored MI */
	s64 prev_util;
	s64 probe_util[4];
	u64 probe_rate[4];
	u32 cur;               /* slot of the MI being sent */
	u32 meas;              /* slot of the MI being measured (oldest unscored) */
	u32 rounds;            /* MIs scored */
	u32 probes_done;       /* bit i: probe i scored */
	u32 plan_left;         /* probing MIs still to send */
	u32 amp;               /* confidence amplifier t */
	u32 bound_k;           /* change-boundary steps */
	s32 dir;               /* +1 / -1 in MOVING */
	u8 phase;
	u8 have_prev;
	u8 move_pending;       /* a MOVING MI is out, not scored yet */
	u8 initialized;
	u32 probe_order;       /* random bits for the pair orders */
	u64 max_dlv_bps;       /* recent max delivery rate (decays 1/16 per MI): the safety bound */
	u32 start_doublings;   /* STARTING: doublings so far (at most 2 ahead of the scores) */
	u32 loss_q16;          /* the loss rate of the scored MIs, EWMA (Q16) */
	u32 loss_mis;          /* MIs in it so far */
};

struct vivace_in {
	u64 now_us;
	u64 max_pacing_bps;
	s64 rtt_us;            /* rs->rtt_us */
	u32 mss;
	u32 srtt_us;
	u32 cwnd;
	u32 cwnd_clamp;
	u32 acked_sacked;      /* packets delivered by this ACK */
	u32 losses;            /* packets marked lost by this ACK */
	u32 rand;
	u64 dlv_bps;           /* this ACK's delivery-rate sample, bytes/s (0: none) */
};

struct vivace_out {
	u32 cwnd;
	u64 pacing_bps;
};


/* signed division by unsigned operations (BPF before ISA v4 has no signed division) */
static __always_inline s64 vv_sdiv(s64 a, s64 b)
{
	u64 ua = a < 0 ? (u64)-a : (u64)a, ub = b < 0 ? (u64)-b : (u64)b;
	u64 q;

	if (!ub)
		return 0;
	q = ua / ub;
	return ((a < 0) != (b < 0)) ? -(s64)q : (s64)q;
}

/* log2(x) in Q16 for x > 0 given in Q16 (result may be negative). Bit-by-bit: the integer part
 * from the top bit, then 16 squarings of the mantissa. */
static __always_inline s64 vv_log2_q16(u64 x)
{
	s64 ip = 0, r;
	u64 m;
	int i;

	if (!x)
		return -(64LL << VV_Q);
	m = x;
#pragma unroll
	for (i = 32; i >= 1; i >>= 1) {
		if (m >= (1ULL << i)) {
			m >>= i;
			ip += i;
		}
	}
	/* x = 2^ip * (x / 2^ip); mantissa in Q30 in [1, 2) */
	m = ip >= 30 ? x >> (ip - 30) : x << (30 - ip);
	r = (ip - VV_Q) * VV_ONE; /* a multiplication: << of a negative value is undefined */
#pragma unroll
	for (i = 0; i < VV_Q; i++) {
		u64 b;

		m = (m * m) >> 30; /* [1, 4) in Q30: < 2^32 */
		b = m >> 31;       /* 1 when >= 2: branchless, so the verifier sees one path */
		m >>= b;
		r += (s64)(b << (VV_Q - 1 - i));
	}
	return r;
}

/* 2^y for y in Q16 (|y| < 40), result in Q16. */
static __always_inline u64 vv_exp2_q16(s64 y)
{
	s64 ip = y >> VV_Q;            /* floor */
	u64 f = (u64)(y - ip * VV_ONE); /* [0, 1) in Q16 */
	/* 2^f ~ 1 + f (0.6951 + f (0.2261 + f 0.0781)), |error| < 2e-4 */
	u64 p = 5118;                  /* 0.0781 */
	u64 r;

	p = 14818 + ((p * f) >> VV_Q); /* 0.2261 */
	p = 45554 + ((p * f) >> VV_Q); /* 0.6951 */
	r = VV_ONE + ((p * f) >> VV_Q);
	if (ip >= 0)
		return ip > 40 ? (1ULL << 62) : r << ip;
	return ip < -40 ? 0 : r >> -ip;
}

/* x^0.9, x in Q16 */
static __always_inline u64 vv_pow09_q16(u64 x)
{
	return vv_exp2_q16(vv_sdiv(vv_log2_q16(x) * 9, 10));
}

/* Mbit/s in Q16 of a rate in bytes/s: bps * 8 / 1e6 * 65536 (rate < 2^35: product < 2^55) */
static __always_inline u64 vv_mbps_q16(u64 bps)
{
	return (bps * 8 * 65536) / 1000000;
}

/* The loss rate L of u, after the MI just scored: an EWMA over the scored MIs (gain 1/8; the
 * plain mean while fewer than 8). The paper takes each MI's own rate, but at the rates here an MI
 * holds a few dozen packets (35 at 20 Mbit/s and 20 ms): one random loss more or less in an MI
 * moves its L by ~3 %, its utility by ~3x the difference the +-5 % probes make, so under 1 %
 * random loss the gradient's sign was a coin toss and the rate wandered at 0.8 of the link. The
 * average keeps the loss term's slope (-11.35 L per unit of x: the 5 % tolerance) and loses its
 * noise; a rate that overflows the buffer still raises L within a few MIs, and the latency
 * gradient (per MI) still reacts first to a growing queue. */
static __always_inline u64 vv_loss_q16(struct vivace_state *s, const struct vv_mi *mi)
{
	u64 total = (u64)mi->delivered + mi->lost;
	u64 l = total ? ((u64)mi->lost << VV_Q) / total : 0;
	u32 n = s->loss_mis < (1U << VV_LOSS_EWMA_SHIFT) ? s->loss_mis + 1 : (1U << VV_LOSS_EWMA_SHIFT);

	if (!total)
		return s->loss_q16; /* nothing measured: no news */
	/* EWMA with gain 1/n up (the running mean for the first MIs, then 1/8): one MI's random loss
	 * (3 % at 35 packets per MI for 1 % random loss) moves it little; gain 1/2 down: losses that
	 * have stopped (a queue that overflowed while a second flow started) leave it within a few
	 * MIs. With 1/8 both ways such a burst kept every lower rate scoring higher for ~17 MIs, and
	 * the rate fell to the floor (3.8 -> 0.1 Mbit/s in 1.3 s with no new loss; two flows' Jain
	 * 0.88-0.92 in 3 of 6 lab repeats, 0.97-1.00 in 3 of 3 since). The price: at 1 % random loss
	 * the estimate sits at 0.1-0.5 %, so random loss costs less utility than the paper's per-MI
	 * rate would charge (lab: 0.91-0.92 of the link at 1 %, as before). */
	if (l >= s->loss_q16)
		s->loss_q16 += (u32)((l - s->loss_q16) / n);
	else
		s->loss_q16 -= (u32)((s->loss_q16 - l) >> (n > 1 ? VV_LOSS_FALL_SHIFT : 0));
	s->loss_mis = n;
	return s->loss_q16;
}

/* The RTT's slope over the MI (us per us, Q16) by least squares over its samples, as the paper
 * computes dRTT/dt, and 0 unless it is significant (|t| >= 2 for slope = 0). With a millisecond
 * of RTT jitter (this 2-core lab under load) a 20-ms MI's ~17 samples give a slope error of
 * ~0.04, four times the paper's 0.01 floor, and at b = 900 that noise outweighs the throughput
 * term 50-fold: the rate random-walked. (First-minus-last alone was worse still.)
 * num = n sum(t r) - sum(t) sum(r) < 2^12 * 2^46 + 2^28 * 2^30; den = n sum(t^2) - sum(t)^2 < 2^56;
 * ryy = n sum(r^2) - sum(r)^2 < 2^12 * 2^48. t^2 = (n - 2) R / (1 - R), R = num^2 / (den ryy),
 * so |t| >= 2 <=> num^2 (n + 2) >= 4 den ryy; with g = num 2^9 / den (the slope, Q9 us per
 * tick) that is |num| g >= 2^9 Y, Y = 4 ryy / (n + 2): compared as (|num| >> 9) >= Y / |g|,
 * divisions only (no 128-bit products, nothing that multiplies the verifier's paths). */
static __always_inline s64 vv_rtt_slope_q16(const struct vv_mi *mi)
{
	s64 n = (s64)mi->reg_n;
	s64 num = n * mi->reg_tr - (s64)mi->reg_t * mi->reg_r;
	s64 den = n * (s64)mi->reg_tt - (s64)mi->reg_t * (s64)mi->reg_t;
	s64 ryy = n * (s64)mi->reg_rr - mi->reg_r * mi->reg_r;
	u64 anum = num < 0 ? (u64)-num : (u64)num, g;

	if (den <= 0 || num == 0)
		return 0;
	g = anum < (1ULL << 53) ? (anum << (VV_Q - VV_REG_TICK_SHIFT)) / (u64)den : anum / (((u64)den >> (VV_Q - VV_REG_TICK_SHIFT)) | 1);
	if (!g)
		return 0;
	if (ryy > 0 && (anum >> (VV_Q - VV_REG_TICK_SHIFT)) < ((u64)ryy / (u64)(n + 2) * 4) / g)
		return 0; /* |t| < 2 */
	return num < 0 ? -(s64)g : (s64)g;
}

/* One RTT sample (rtt_us > 0) of an MI, at now_us: the least-squares sums. */
static __always_inline void vv_mi_add_rtt(struct vv_mi *mi, u64 now_us, s64 rtt_us)
{
	if (!mi->t_first_us) {
		mi->t_first_us = now_us;
		mi->rtt_first_us = (u32)rtt_us;
	}
	mi->t_last_us = now_us;
	mi->rtt_last_us = (u32)rtt_us;
	if (mi->reg_n < VV_REG_MAX) {
		u64 t = (now_us - mi->t_first_us) >> VV_REG_TICK_SHIFT;
		s64 r = rtt_us - (s64)mi->rtt_first_us;

		t = t < 0xffff ? t : 0xffff;
		r = r > (1 << 18) ? (1 << 18) : r < -(1 << 18) ? -(1 << 18) : r;
		mi->reg_n++;
		mi->reg_t += t;
		mi->reg_tt += t * t;
		mi->reg_r += r;
		mi->reg_tr += (s64)t * r;
		mi->reg_rr += (u64)(r * r);
	}
}

static __always_inline s64 vv_utility(const struct vv_mi *mi, u64 loss_q16)
{
	u64 x = vv_mbps_q16(mi->rate_bps);
	u64 dur = mi->t_last_us > mi->t_first_us ? mi->t_last_us - mi->t_first_us : 0;
	s64 grad = 0, lat_pen, loss_pen;

	if (dur >= 1000 && mi->reg_n >= 3) {
		grad = vv_rtt_slope_q16(mi);
		if (grad < VV_GRAD_MIN_Q16 && grad > -VV_GRAD_MIN_Q16)
			grad = 0; /* |dRTT/dt| below 0.01 is noise */
		if (grad > VV_ONE)
			grad = VV_ONE;
		if (grad < -VV_ONE)
			grad = -VV_ONE;
	}
	/* a falling RTT (a queue draining) is not rewarded: only a growing queue is penalised, as in
	 * the authors' implementation (PCC-Uspace's Vivace utility takes a negative gradient as 0).
	 * Rewarded (the paper's symmetric term), every lower rate scores higher while a queue drains:
	 * at full weight the rate collapsed to 0.1 of 20 Mbit/s in the lab, at a quarter weight the
	 * bounded steps still took it down to 0.6-0.8 of the link after each overshoot */
	lat_pen = grad > 0 ? (s64)((x * VV_B * (u64)grad) >> VV_Q) : 0;
	loss_pen = (s64)((((x * VV_C_Q16) >> VV_Q) * loss_q16) >> VV_Q);
	return (s64)vv_pow09_q16(x) - lat_pen - loss_pen;
}

static __always_inline u64 vv_clamp_rate(u64 r)
{
	return r < VV_RATE_MIN_BPS ? VV_RATE_MIN_BPS : r > VV_RATE_MAX_BPS ? VV_RATE_MAX_BPS : r;
}

static __always_inline u64 vv_pct(u64 r, u32 pct) { return r / 100 * pct + (r % 100) * pct / 100; }

static __always_inline void vv_start_probing(struct vivace_state *s, const struct vivace_in *in)
{
	s->phase = VV_PROBING;
	s->plan_left = 4;
	s->probes_done = 0;
	s->probe_order = in->rand;
	s->amp = 0;
	s->bound_k = 0;
	s->move_pending = 0;
}

/* The rate of probe i (0..3): pair 0 = probes 0,1, pair 1 = 2,3, each pair up/down in random order. */
static __always_inline u64 vv_probe_rate(const struct vivace_state *s, u32 i)
{
	u32 up = ((s->probe_order >> (i >> 1)) & 1) ^ (i & 1);
	u64 d = vv_pct(s->rate_bps, VV_EPS_PCT);

	return up ? s->rate_bps + d : s->rate_bps - d;
}

/* A scored MI drives the controller. */
static __always_inline void vv_on_scored(struct vivace_state *s, const struct vivace_in *in, struct vv_mi *mi)
{
	s64 u = vv_utility(mi, vv_loss_q16(s, mi));
	s64 du, dx, gamma, step;
	u64 bound;
	int i, agree;

	s->rounds++;
	if (mi->kind == VV_MI_START && s->phase == VV_STARTING) {
		if (s->have_prev && u < s->prev_util) {
			s->rate_bps = vv_clamp_rate(s->prev_rate_bps); /* the last rate that scored higher */
			vv_start_probing(s, in);
			return;
		}
		s->prev_util = u;
		s->prev_rate_bps = mi->rate_bps;
		s->have_prev = 1;
		return;
	}
	if (mi->kind == VV_MI_PROBE && s->phase == VV_PROBING) {
		i = mi->probe_idx & 3;
		s->probe_util[i] = u;
		s->probe_rate[i] = mi->rate_bps;
		s->probes_done |= 1U << i;
		if (s->probes_done != 0xf)
			return;
		/* each pair's direction: sign of (u(up) - u(down)) */
		agree = 0;
		gamma = 0;
#pragma unroll
		for (i = 0; i < 4; i += 2) {
			dx = (s64)vv_mbps_q16(s->probe_rate[i]) - (s64)vv_mbps_q16(s->probe_rate[i + 1]);
			du = s->probe_util[i] - s->probe_util[i + 1];
			if (dx == 0)
				continue;
			if ((du > 0) == (dx > 0))
				agree += 1;
			else
				agree -= 1;
			gamma += vv_sdiv(vv_sdiv(du * VV_ONE, dx), 2); /* Q16 utility per Mbit/s, averaged */
		}
		if (agree == 2 || agree == -2) {
			s->phase = VV_MOVING;
			s->dir = agree > 0 ? 1 : -1;
			s->amp = 1;
			s->bound_k = 0;
			s->prev_util = (s->probe_util[0] + s->probe_util[1] + s->probe_util[2] + s->probe_util[3]) >> 2;
			s->prev_rate_bps = s->rate_bps;
			s->have_prev = 1;
			goto move;
		}
		vv_start_probing(s, in); /* the pairs disagree: probe again around the same rate */
		return;
	}
	if (mi->kind == VV_MI_MOVE && s->phase == VV_MOVING) {
		s->move_pending = 0;
		dx = (s64)vv_mbps_q16(mi->rate_bps) - (s64)vv_mbps_q16(s->prev_rate_bps);
		du = u - s->prev_util;
		if (dx == 0 || du <= 0) {
			/* the step did not raise the utility: back to probing around the better rate */
			if (du < 0)
				s->rate_bps = vv_clamp_rate(s->prev_rate_bps);
			vv_start_probing(s, in);
			return;
		}
		gamma = vv_sdiv(du * VV_ONE, dx);
		s->prev_util = u;
		s->prev_rate_bps = mi->rate_bps;
		if (s->amp < VV_AMP_MAX)
			s->amp++;
		goto move;
	}
	return;
move:
	/* step = m(t) * theta0 * gamma (Mbit/s, Q16), bounded by w * r */
	if (gamma < 0)
		gamma = -gamma;
	step = (s64)(((u64)gamma * VV_THETA0_Q16) >> VV_Q) * (s64)s->amp;
	{
		u64 step_bps = ((u64)step * 1000000 / 8) >> VV_Q;

		bound = vv_pct(s->rate_bps, VV_OMEGA0_PCT + s->bound_k * VV_OMEGA_STEP_PCT);
		if (step_bps > bound) {
			step_bps = bound;
			if (s->bound_k < 3)
				s->bound_k++; /* at most 35 % of the rate per step */
		}
		if (step_bps < s->rate_bps / 200)
			step_bps = s->rate_bps / 200; /* at least 0.5 % */
		if (s->dir > 0)
			s->rate_bps = vv_clamp_rate(s->rate_bps + step_bps);
		else
			s->rate_bps = vv_clamp_rate(s->rate_bps > step_bps ? s->rate_bps - step_bps : 0);
	}
	s->move_pending = 1;
}

static __always_inline void vv_init(struct vivace_state *s, const struct vivace_in *in)
{
	u64 rtt = in->srtt_us ? in->srtt_us : 10000;
	volatile u64 *w = (volatile u64 *)s;
	int i;

	/* zero it word by word (volatile: clang would turn the loop back into a memset, which its
	 * BPF target does not expand at this size) */
#pragma unroll
	for (i = 0; i < (int)(sizeof(*s) / 8); i++)
		w[i] = 0;
	/* start at the initial window per RTT */
	s->rate_bps = vv_clamp_rate((u64)(in->cwnd ? in->cwnd : 10) * (in->mss ? in->mss : 1460) * 1000000ULL / rtt);
	s->phase = VV_STARTING;
	s->mi_start_us = in->now_us;
	s->mi[0].used = 1;
	s->mi[0].kind = VV_MI_START;
	s->mi[0].rate_bps = s->rate_bps;
	s->mi[0].start_us = in->now_us;
	s->mi[0].lag_us = rtt;
	s->cur = 0;
	s->initialized = 1;
}

static __always_inline void vivace_on_ack(struct vivace_state *s, const struct vivace_in *in, struct vivace_out *out)
{
	u64 mi_len, rate;
	u32 next;
	struct vv_mi *mi;

	if (!s->initialized)
		vv_init(s, in);

	/* 1. ACKs are the feedback of the MI that was sending one RTT earlier: an MI sent during
	 *    [start, end) is measured by the ACKs arriving in [start + lag, end + lag), lag = its srtt
	 *    when it started (time, not sequence ranges: under loss the cumulative ACK stalls while
	 *    SACKs keep coming). At the window's end it is scored. */
	mi = &s->mi[s->meas & (VV_MI_SLOTS - 1)];
	if (mi->used && s->meas != s->cur && in->now_us >= mi->start_us + mi->lag_us) {
		if (in->rtt_us > 0) {
			vv_mi_add_rtt(mi, in->now_us, in->rtt_us);
		}
		mi->delivered += in->acked_sacked;
		mi->lost += in->losses;
		if (in->now_us >= mi->sent_end_us + mi->lag_us) {
			if (mi->kind != VV_MI_FILL)
				vv_on_scored(s, in, mi);
			mi->used = 0;
			s->meas = (s->meas + 1) & (VV_MI_SLOTS - 1);
		}
	} else if (!mi->used && s->meas != s->cur) {
		s->meas = (s->meas + 1) & (VV_MI_SLOTS - 1);
	}

	/* 2. the MI being sent ends after max(srtt, 10 ms): the next one gets its rate */
	mi_len = in->srtt_us > VV_MIN_MI_US ? in->srtt_us : VV_MIN_MI_US;
	if (in->now_us - s->mi_start_us >= mi_len) {
		s->mi[s->cur & (VV_MI_SLOTS - 1)].sent_end_us = in->now_us;
		s->max_dlv_bps -= s->max_dlv_bps >> 4;
		next = (s->cur + 1) & (VV_MI_SLOTS - 1);
		mi = &s->mi[next];
		__builtin_memset(mi, 0, sizeof(*mi));
		mi->used = 1;
		mi->start_us = in->now_us;
		mi->lag_us = in->srtt_us ? in->srtt_us : 10000;
		mi->kind = VV_MI_FILL;
		mi->rate_bps = s->rate_bps;
		if (s->phase == VV_STARTING && s->rounds + 2 > s->start_doublings) {
			/* double, but never more than two doublings ahead of the scores */
			s->rate_bps = vv_clamp_rate(s->rate_bps * 2);
			mi->rate_bps = s->rate_bps;
			mi->kind = VV_MI_START;
			s->start_doublings++;
		} else if (s->phase == VV_PROBING && s->plan_left) {
			mi->probe_idx = (u8)(4 - s->plan_left);
			mi->rate_bps = vv_clamp_rate(vv_probe_rate(s, mi->probe_idx));
			mi->kind = VV_MI_PROBE;
			s->plan_left--;
		} else if (s->phase == VV_MOVING && s->move_pending == 1) {
			mi->kind = VV_MI_MOVE;
			s->move_pending = 2; /* sent, waiting for its score */
		}
		if (next == (s->meas & (VV_MI_SLOTS - 1)))
			s->meas = (s->meas + 1) & (VV_MI_SLOTS - 1); /* ring full: the oldest goes unscored */
		s->cur = next;
		s->mi_start_us = in->now_us;
	}

	/* 3. pace at the current MI's rate, never above 4x the recent delivery rate (safety: a
	 *    controller gone wrong cannot flood the path); the window only keeps ACK clocking from
	 *    limiting the rate */
	if (in->dlv_bps > s->max_dlv_bps)
		s->max_dlv_bps = in->dlv_bps;
	rate = vv_clamp_rate(s->mi[s->cur & (VV_MI_SLOTS - 1)].rate_bps);
	if (s->max_dlv_bps && rate > 4 * s->max_dlv_bps) {
		rate = vv_clamp_rate(4 * s->max_dlv_bps);
		if (s->rate_bps > rate)
			s->rate_bps = rate;
	}
	if (in->max_pacing_bps && rate > in->max_pacing_bps)
		rate = in->max_pacing_bps;
	out->pacing_bps = rate;
	{
		u64 rtt = in->srtt_us ? in->srtt_us : 10000;
		u64 cwnd = rate * rtt * 2 / 1000000 / (in->mss ? in->mss : 1460) + 10;
		u32 clamp = in->cwnd_clamp ? in->cwnd_clamp : VV_CWND_MAX;

		if (cwnd > VV_CWND_MAX)
			cwnd = VV_CWND_MAX;
		if (cwnd > clamp)
			cwnd = clamp;
		out->cwnd = cwnd < VV_CWND_MIN ? VV_CWND_MIN : (u32)cwnd;
	}
}

#endif
