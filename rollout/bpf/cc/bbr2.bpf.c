// SPDX-License-Identifier: GPL-2.0
/* ccab bbr2 / bbr3: BBR v2-family congestion control as a BPF struct_ops tcp_congestion_ops.
 *
 * The control law is bbr2_law.h (plain integers, shared with the host test); this file is the
 * kernel glue: it reads tcp_sock and rate_sample into struct bbr2_in, keeps the per-socket state
 * in socket storage (bbr2_state is larger than the 104-byte CA private area), writes
 * snd_cwnd and sk_pacing_rate (TCP's internal pacing, SK_PACING_NEEDED: no fq needed), and
 * exports the model (bw, min_rtt, mode/phase, inflight_hi/lo) into cc_state, keyed by the
 * socket cookie, for the collector (get_info is not available to BPF algorithms).
 *
 * Built twice by bpf2go: -DBBR_V=2 (name CC_NAME "bbr2") and -DBBR_V=3 ("bbr3"). The loader
 * (rollout/bpfcc) may rename the algorithm before loading (the kernel's own bbr2 would win).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cc_export.h"

#if BBR_V == 3
#define CC_NAME "bbr3"
#define CC_IMPL_ID CC_IMPL_BBR3
#else
#define CC_NAME "bbr2"
#define CC_IMPL_ID CC_IMPL_BBR2
#endif

#include "bbr2_law.h"

#define TCP_CONG_NON_RESTRICTED 0x1
#define TCP_ECN_OK 1

char _license[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct bbr2_state);
} bbr_sk SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CC_STATE_MAX_ENTRIES);
	__type(key, __u64);
	__type(value, struct cc_state);
} cc_state SEC(".maps");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline __u32 packets_in_flight(const struct tcp_sock *tp)
{
	__u32 left = tp->sacked_out + tp->lost_out;
	__u32 out = tp->packets_out > left ? tp->packets_out - left : 0;

	return out + tp->retrans_out;
}

static __always_inline struct bbr2_state *state_of(struct sock *sk, int create)
{
	return bpf_sk_storage_get(&bbr_sk, sk, 0, create ? BPF_SK_STORAGE_GET_F_CREATE : 0);
}

static __always_inline void fill_in(struct sock *sk, struct bbr2_in *in)
{
	struct tcp_sock *tp = tcp_sk(sk);

	__builtin_memset(in, 0, sizeof(*in));
	in->now_us = tp->tcp_mstamp;
	in->max_pacing_bps = sk->sk_max_pacing_rate;
	in->pacing_bps = sk->sk_pacing_rate;
	in->mss = tp->mss_cache;
	in->cwnd = tp->snd_cwnd;
	in->cwnd_clamp = tp->snd_cwnd_clamp;
	in->inflight = packets_in_flight(tp);
	in->srtt_us = tp->srtt_us >> 3;
	in->tp_delivered = tp->delivered;
	in->tp_delivered_ce = tp->delivered_ce;
	in->tp_lost = tp->lost;
	in->ca_state = inet_csk(sk)->icsk_ca_state;
	in->ecn_ok = tp->ecn_flags & TCP_ECN_OK;
	in->rand = bpf_get_prandom_u32();
}

static __always_inline void export_state(struct sock *sk, const struct bbr2_state *s, __u32 cwnd, __u64 pacing)
{
	struct cc_state e = {};
	__u64 cookie = sk->__sk_common.skc_cookie.counter;

	/* The cookie is given on the first inet_diag dump (sock_gen_cookie); until the collector
	 * has seen the socket there is nothing to key the entry by. */
	if (!cookie)
		return;
	e.updated_us = tcp_sk(sk)->tcp_mstamp;
	e.bw_bps = (__u64)bbr_rate_bps_raw(s->bw, tcp_sk(sk)->mss_cache);
	e.pacing_bps = pacing;
	e.min_rtt_us = s->min_rtt_us;
	e.inflight_hi = s->inflight_hi;
	e.inflight_lo = s->inflight_lo;
	e.cwnd = cwnd;
	e.round_count = s->round_count;
	e.probe_rtt_count = s->probe_rtt_count;
	e.probe_rtt_last_us = s->probe_rtt_last_us;
	e.mode = s->mode;
	e.phase = s->phase;
	e.impl = CC_IMPL_ID;
	bpf_map_update_elem(&cc_state, &cookie, &e, BPF_ANY);
}

SEC("struct_ops")
void BPF_PROG(bbr2_init, struct sock *sk)
{
	struct bbr2_state *s = state_of(sk, 1);

	if (s)
		s->initialized = 0; /* the first ACK initialises it from the socket */
	sk->sk_pacing_status = SK_PACING_NEEDED;
}

SEC("struct_ops")
void BPF_PROG(bbr2_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct bbr2_state *s = state_of(sk, 1);
	struct bbr2_in in;
	struct bbr2_out out = {};
	__u8 mode, phase;
	__u32 rounds;

	if (!s)
		return; /* no memory for the state: the window stays as it is */
	fill_in(sk, &in);
	in.interval_us = rs->interval_us;
	in.rtt_us = rs->rtt_us;
	in.delivered = rs->delivered;
	in.losses = rs->losses;
	in.prior_delivered = rs->prior_delivered;
	in.prior_in_flight = rs->prior_in_flight;
	in.acked_sacked = rs->acked_sacked;
	in.is_app_limited = rs->is_app_limited;
	mode = s->mode;
	phase = s->phase;
	rounds = s->round_count;
	bbr2_on_ack(s, &in, &out);
	tp->snd_cwnd = out.cwnd;
	sk->sk_pacing_rate = out.pacing_bps;
	if (s->round_count != rounds || s->mode != mode || s->phase != phase)
		export_state(sk, s, out.cwnd, out.pacing_bps);
}

SEC("struct_ops")
__u32 BPF_PROG(bbr2_ssthresh, struct sock *sk)
{
	struct bbr2_state *s = state_of(sk, 0);

	if (s)
		s->prior_cwnd = bbr_max32(s->prior_cwnd, tcp_sk(sk)->snd_cwnd);
	return tcp_sk(sk)->snd_ssthresh;
}

SEC("struct_ops")
__u32 BPF_PROG(bbr2_undo_cwnd, struct sock *sk)
{
	struct bbr2_state *s = state_of(sk, 0);

	if (s)
		bbr2_on_undo(s);
	return tcp_sk(sk)->snd_cwnd;
}

SEC("struct_ops")
void BPF_PROG(bbr2_set_state, struct sock *sk, __u8 new_state)
{
	struct bbr2_state *s;

	if (new_state != 4 /* TCP_CA_Loss */)
		return;
	s = state_of(sk, 0);
	if (s)
		bbr2_on_loss_state(s, tcp_sk(sk)->snd_cwnd);
}

SEC("struct_ops")
void BPF_PROG(bbr2_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct bbr2_state *s;

	if (event != CA_EVENT_TX_START)
		return;
	s = state_of(sk, 0);
	/* restarting after idle with nothing in flight: do not enter PROBE_RTT for it */
	if (s && tcp_sk(sk)->app_limited)
		s->idle_restart = 1;
}

SEC("struct_ops")
void BPF_PROG(bbr2_release, struct sock *sk)
{
	__u64 cookie = sk->__sk_common.skc_cookie.counter;

	if (cookie)
		bpf_map_delete_elem(&cc_state, &cookie);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops bbr2 = {
	.init = (void *)bbr2_init,
	.release = (void *)bbr2_release,
	.cong_control = (void *)bbr2_cong_control,
	.ssthresh = (void *)bbr2_ssthresh,
	.undo_cwnd = (void *)bbr2_undo_cwnd,
	.set_state = (void *)bbr2_set_state,
	.cwnd_event = (void *)bbr2_cwnd_event,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = CC_NAME,
};
