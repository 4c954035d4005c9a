// SPDX-License-Identifier: GPL-2.0
/* ccab vivace: PCC-Vivace as a BPF struct_ops tcp_congestion_ops. The rate control is
 * vivace_law.h (plain integers, shared with the host test); this is the kernel glue: per-socket
 * state in socket storage, pacing through sk_pacing_rate (SK_PACING_NEEDED: TCP's own pacing),
 * a window large enough (2 x rate x srtt) never to be what limits the rate, and the rate and
 * phase exported into cc_state by socket cookie. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "cc_export.h"
#include "vivace_law.h"

#define TCP_CONG_NON_RESTRICTED 0x1

char _license[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct vivace_state);
} vivace_sk SEC(".maps");

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

SEC("struct_ops")
void BPF_PROG(vivace_init, struct sock *sk)
{
	struct vivace_state *s = bpf_sk_storage_get(&vivace_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);

	if (s)
		s->initialized = 0;
	sk->sk_pacing_status = SK_PACING_NEEDED;
}

SEC("struct_ops")
void BPF_PROG(vivace_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct vivace_state *s = bpf_sk_storage_get(&vivace_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	struct vivace_in in = {};
	struct vivace_out out = {};
	__u32 rounds;
	__u8 phase;
	__u64 cookie;

	if (!s)
		return;
	in.now_us = tp->tcp_mstamp;
	in.max_pacing_bps = sk->sk_max_pacing_rate;
	in.rtt_us = rs->rtt_us;
	in.mss = tp->mss_cache;
	in.srtt_us = tp->srtt_us >> 3;
	in.cwnd = tp->snd_cwnd;
	in.cwnd_clamp = tp->snd_cwnd_clamp;
	in.acked_sacked = rs->acked_sacked;
	in.losses = rs->losses > 0 ? rs->losses : 0;
	in.rand = bpf_get_prandom_u32();
	if (rs->delivered > 0 && rs->interval_us > 0)
		in.dlv_bps = (__u64)rs->delivered * in.mss * 1000000ULL / (__u64)rs->interval_us;
	rounds = s->rounds;
	phase = s->phase;
	vivace_on_ack(s, &in, &out);
	tp->snd_cwnd = out.cwnd;
	sk->sk_pacing_rate = out.pacing_bps;
	cookie = sk->__sk_common.skc_cookie.counter;
	if (cookie && (s->rounds != rounds || s->phase != phase)) {
		struct cc_state e = {};

		e.updated_us = in.now_us;
		e.bw_bps = s->rate_bps;
		e.pacing_bps = out.pacing_bps;
		e.min_rtt_us = tp->rtt_min.s[0].v;
		e.cwnd = out.cwnd;
		e.round_count = s->rounds;
		e.mode = s->phase;
		e.impl = CC_IMPL_VIVACE;
		bpf_map_update_elem(&cc_state, &cookie, &e, BPF_ANY);
	}
}

SEC("struct_ops")
__u32 BPF_PROG(vivace_ssthresh, struct sock *sk)
{
	return tcp_sk(sk)->snd_ssthresh;
}

SEC("struct_ops")
__u32 BPF_PROG(vivace_undo_cwnd, struct sock *sk)
{
	return tcp_sk(sk)->snd_cwnd;
}

SEC("struct_ops")
void BPF_PROG(vivace_release, struct sock *sk)
{
	__u64 cookie = sk->__sk_common.skc_cookie.counter;

	if (cookie)
		bpf_map_delete_elem(&cc_state, &cookie);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops vivace = {
	.init = (void *)vivace_init,
	.release = (void *)vivace_release,
	.cong_control = (void *)vivace_cong_control,
	.ssthresh = (void *)vivace_ssthresh,
	.undo_cwnd = (void *)vivace_undo_cwnd,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "vivace",
};
