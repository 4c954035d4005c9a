/* SPDX-License-Identifier: GPL-2.0 */
/* The model state ccab's BPF congestion controls export for the collector: one entry per socket
 * in the LRU hash map cc_state, keyed by the socket cookie (inet_diag's idiag_cookie), updated at
 * each round start and mode/phase change, deleted when the socket releases the algorithm. The
 * Go reader is rollout/bpfcc (State). Keep both in step. */
#ifndef CCAB_CC_EXPORT_H
#define CCAB_CC_EXPORT_H

#define CC_STATE_MAX_ENTRIES 65536

/* impl: which implementation wrote the entry */
#define CC_IMPL_BBR2 2
#define CC_IMPL_BBR3 3
#define CC_IMPL_VIVACE 10

struct cc_state {
	__u64 updated_us;        /* tp->tcp_mstamp of the update */
	__u64 bw_bps;            /* model bandwidth, bytes per second (vivace: its rate) */
	__u64 pacing_bps;        /* sk_pacing_rate set */
	__u64 probe_rtt_last_us; /* when the last PROBE_RTT began (tcp_mstamp clock); 0: never */
	__u32 min_rtt_us;        /* 0xffffffff: no sample yet */
	__u32 inflight_hi;       /* packets; 0xffffffff: no bound (vivace: 0) */
	__u32 inflight_lo;       /* packets; 0xffffffff: no bound */
	__u32 cwnd;              /* packets */
	__u32 round_count;       /* rounds (vivace: monitor intervals) */
	__u32 probe_rtt_count;   /* PROBE_RTT episodes so far */
	__u8 mode;               /* bbr: 0 STARTUP 1 DRAIN 2 PROBE_BW 3 PROBE_RTT; vivace: 0 STARTING 1 PROBING 2 MOVING */
	__u8 phase;              /* bbr PROBE_BW: 0 DOWN 1 CRUISE 2 REFILL 3 UP */
	__u8 impl;               /* CC_IMPL_* */
	__u8 pad[5];
};

/* bytes per second of a BW_UNIT-scaled packets/us rate, no gain */
static __always_inline __u64 bbr_rate_bps_raw(__u64 bw, __u32 mss)
{
	__u64 rate = bw * (mss ? mss : 1); /* < 2^48 */

	rate >>= 24 - 16;                  /* bytes/us << 16, < 2^40 */
	return (rate * 1000000ULL) >> 16;  /* < 2^60 */
}

#endif
