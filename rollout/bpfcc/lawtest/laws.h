/* Entry points of the host build of the control laws, for the Go test (cgo). */
#ifndef CCAB_LAWS_H
#define CCAB_LAWS_H
#include "shim.h"

/* BBR v2 family: the input and output mirror struct bbr2_in / bbr2_out. */
struct law_bbr_in {
	u64 now_us, max_pacing_bps, pacing_bps;
	s64 interval_us, rtt_us;
	s32 delivered, losses;
	u32 mss, cwnd, cwnd_clamp, inflight, srtt_us, tp_delivered, tp_delivered_ce, tp_lost,
	    prior_delivered, prior_in_flight, acked_sacked, rand;
	u8 ca_state, is_app_limited, ecn_ok;
};
struct law_bbr_view {
	u32 cwnd;
	u64 pacing_bps;
	u64 bw;
	u32 min_rtt_us, inflight_hi, inflight_lo, round_count, probe_rtt_count;
	u8 mode, phase;
};
/* version 2 or 3; state is opaque (law_bbr_state_size bytes, zeroed = fresh socket) */
unsigned law_bbr_state_size(void);
void law_bbr_on_ack(int version, void *state, const struct law_bbr_in *in, struct law_bbr_view *out);
void law_bbr_on_loss_state(int version, void *state, u32 cwnd);
void law_bbr_on_undo(int version, void *state);

struct law_vv_in {
	u64 now_us, max_pacing_bps, dlv_bps;
	s64 rtt_us;
	u32 mss, srtt_us, cwnd, cwnd_clamp, acked_sacked, losses, rand;
};
/* vivace's dRTT/dt (Q16, 0 when not significant) of these RTT samples as one MI's */
s64 law_vv_rtt_slope(u32 n, const u64 *now_us, const s64 *rtt_us);
/* vivace's utility (Q16) of an MI sent at rate_bps with these RTT samples and loss rate (Q16) */
s64 law_vv_utility(u64 rate_bps, u32 loss_q16, u32 n, const u64 *now_us, const s64 *rtt_us);
/* vivace's loss estimate (Q16) after n MIs that delivered and lost these packets, fresh state */
u32 law_vv_loss_after(u32 n, const u32 *delivered, const u32 *lost);
struct law_vv_view {
	u32 cwnd;
	u64 pacing_bps, rate_bps;
	u32 rounds;
	u8 phase;
};
unsigned law_vv_state_size(void);
void law_vv_on_ack(void *state, const struct law_vv_in *in, struct law_vv_view *out);
#endif
