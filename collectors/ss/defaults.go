package ss

import "github.com/ccab-dev/ccab/collectors/record"

// generation is a step in the growth of struct tcp_info (and of what ss prints of it). Each
// step's fields were printed by iproute2 releases no older than the previous step's, so one
// printed token of a step proves that ss would have printed every field of that step and of
// the older ones had it been non-zero.
type generation int

const (
	genBase generation = iota // tcp_info before 4.1: unacked, sacked, lost, retrans, reordering, rcv_space, rto, ...
	gen4_1                    // bytes_acked, bytes_received (iproute2 4.2)
	gen4_2                    // segs_out, segs_in (iproute2 4.2)
	gen4_6                    // data_segs_out/in (4.7), notsent, minrtt
	gen4_9                    // delivery_rate, app_limited (4.10)
	gen4_10                   // busy, rwnd_limited, sndbuf_limited (4.10)
	gen4_18                   // delivered, delivered_ce (4.20)
	gen4_19                   // bytes_sent, bytes_retrans, dsack_dups, reord_seen (4.20)
	gen5_4                    // snd_wnd, rcv_ooopack (5.18)
	gen6_2                    // rcv_wnd, rehash (6.6)
)

// Values ss hides. tcp_stats_print() prints most tokens only when non-zero; a few only when
// not at their default.
const (
	hiddenReordering = 3    // printed only when != 3
	hiddenRTOMs      = 3000 // printed only when != 3 s (TCP_TIMEOUT_FALLBACK); tcpi_rto is never 0
)

// applyDefaults turns "hidden by ss" into values, only where ss's rule makes the value
// certain:
//
//   - counters printed only when non-zero become 0, if the tokens prove a kernel (and an ss)
//     that has the field; otherwise they stay null (old kernel: not reported);
//   - reordering absent is 3 and rto absent is 3000 ms (ss hides exactly those values);
//   - app_limited absent is false on a kernel that has it (4.9+);
//   - fields that are not counters stay null when absent: rtt/rttvar and minrtt (no RTT
//     sample yet), mss, cwnd, ssthresh ("infinite"), pacing_rate (0 or unlimited ~0, ss hides
//     both), lastsnd/lastrcv/lastack (as in the shared vectors), the bbr_* fields, cc_version;
//   - minrtt and BBR's mrtt at ~0U µs (4.29497e+06 ms: no RTT sample yet) become null.
func (b *builder) applyDefaults() {
	s := &b.s
	zero := func(dst **int64, g generation) {
		if *dst == nil && b.gen >= g {
			*dst = record.Int(0)
		}
	}
	zero(&s.Unacked, genBase)
	zero(&s.Sacked, genBase)
	zero(&s.Lost, genBase)
	zero(&s.RetransOut, genBase)
	zero(&s.TotalRetrans, genBase)
	zero(&s.RcvSpace, genBase)
	zero(&s.BytesAcked, gen4_1)
	zero(&s.BytesReceived, gen4_1)
	zero(&s.SegsOut, gen4_2)
	zero(&s.SegsIn, gen4_2)
	zero(&s.DataSegsOut, gen4_6)
	zero(&s.DataSegsIn, gen4_6)
	zero(&s.NotsentBytes, gen4_6)
	zero(&s.DeliveryRateBps, gen4_9)
	zero(&s.BusyMs, gen4_10)
	zero(&s.RwndLimitedMs, gen4_10)
	zero(&s.SndbufLimitedMs, gen4_10)
	zero(&s.Delivered, gen4_18)
	zero(&s.BytesSent, gen4_19)
	zero(&s.BytesRetrans, gen4_19)
	zero(&s.SndWnd, gen5_4)
	if s.AppLimited == nil && b.gen >= gen4_9 {
		s.AppLimited = record.Bool(false)
	}
	if s.Reordering == nil {
		s.Reordering = record.Int(hiddenReordering)
	}
	if s.RTOMs == nil {
		s.RTOMs = record.Int(hiddenRTOMs)
	}
	b.nullSentinels()
}

// nullSentinels turns values that mean "no sample yet" into null.
func (b *builder) nullSentinels() {
	s := &b.s
	// minrtt:4.29497e+06 (4294967.295) is tcpi_min_rtt = ~0U: the kernel has no RTT sample
	// yet; likewise BBR's mrtt.
	if s.MinRTTUs != nil && noRTTSampleUs(*s.MinRTTUs) {
		s.MinRTTUs = nil
	}
	if s.BBRMinRTTUs != nil && noRTTSampleUs(*s.BBRMinRTTUs) {
		s.BBRMinRTTUs = nil
	}
}
