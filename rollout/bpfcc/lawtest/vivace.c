#include "laws.h"
#include "vivace_law.h"

unsigned law_vv_state_size(void) { return sizeof(struct vivace_state); }

void law_vv_on_ack(void *state, const struct law_vv_in *i, struct law_vv_view *v)
{
	struct vivace_state *s = state;
	struct vivace_in in = {
		.now_us = i->now_us, .max_pacing_bps = i->max_pacing_bps, .rtt_us = i->rtt_us, .mss = i->mss,
		.srtt_us = i->srtt_us, .cwnd = i->cwnd, .cwnd_clamp = i->cwnd_clamp, .acked_sacked = i->acked_sacked,
		.losses = i->losses, .rand = i->rand, .dlv_bps = i->dlv_bps,
	};
	struct vivace_out out = {0};

	vivace_on_ack(s, &in, &out);
	v->cwnd = out.cwnd;
	v->pacing_bps = out.pacing_bps;
	v->rate_bps = s->rate_bps;
	v->rounds = s->rounds;
	v->phase = s->phase;
}

s64 law_vv_rtt_slope(u32 n, const u64 *now_us, const s64 *rtt_us)
{
	struct vv_mi mi = {0};
	u32 i;

	for (i = 0; i < n; i++)
		vv_mi_add_rtt(&mi, now_us[i], rtt_us[i]);
	return vv_rtt_slope_q16(&mi);
}

s64 law_vv_utility(u64 rate_bps, u32 loss_q16, u32 n, const u64 *now_us, const s64 *rtt_us)
{
	struct vv_mi mi = {0};
	u32 i;

	mi.rate_bps = rate_bps;
	for (i = 0; i < n; i++)
		vv_mi_add_rtt(&mi, now_us[i], rtt_us[i]);
	return vv_utility(&mi, loss_q16);
}

u32 law_vv_loss_after(u32 n, const u32 *delivered, const u32 *lost)
{
	struct vivace_state s = {0};
	struct vv_mi mi = {0};
	u32 i;

	for (i = 0; i < n; i++) {
		mi.delivered = delivered[i];
		mi.lost = lost[i];
		vv_loss_q16(&s, &mi);
	}
	return s.loss_q16;
}
