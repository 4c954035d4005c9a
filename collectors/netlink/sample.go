package netlink

import (
	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
)

// Sample returns the socket's tcp_sample/1 fields; the caller adds peer_prefix, sock_id and
// the host fields (see Record). ok is false when the kernel sent no tcp_info (a TIME-WAIT
// socket, or a dump without ExtInfo): such a socket has no sample, as in the ss parser.
//
// Units are the contract's: tcp_info's µs RTTs stay µs, rto is rounded to ms (ss prints
// rto/1000 with %g and the ss parser rounds half up, so 226666 µs is 227 ms in both), the
// busy/rwnd_limited/sndbuf_limited µs counters are truncated to ms exactly as ss prints them
// (busy_time/1000 in integer arithmetic), rates in bytes/s are ×8 bits/s, BBR gains are
// ×256 fixed point → float.
//
// Null versus 0 follows the ss parser (package ss, defaults.go), so that the same socket
// read through netlink and through `ss -tinHOe | parse-ss` gives the same record:
//   - a field the kernel's struct tcp_info does not have (the struct is shorter than the
//     field's end: an older kernel) is null; a counter it has is its value, 0 included
//     (ss hides zeros; the parser restores 0 where the kernel has the field — netlink knows
//     the kernel's struct length exactly, so it needs no guessing);
//   - fields that ss hides when 0 and the parser then leaves null are null here when 0:
//     rtt_us/rttvar_us (no RTT sample yet), min_rtt_us (also ~0U), mss, cwnd, ssthresh (also
//     ≥ 0xFFFF, "infinite"), lastsnd_ms/lastrcv_ms/lastack_ms, pacing_rate_bps (also ~0,
//     unlimited), bbr_pacing_gain/bbr_cwnd_gain;
//   - bbr_min_rtt_us is null at ~0U (BBR has no min RTT sample yet), as min_rtt_us;
//   - rwnd_limited_ms and sndbuf_limited_ms are 0 when busy is 0 (ss prints them only
//     inside the busy block); sacked is 0 for a listener (ss hides it there).
//
// Where netlink knows more than ss prints: cc_version is 1 for a 20-byte BBRINFO (mainline
// v1), the version byte of a 52-byte one (v2alpha/v3), and 2 for "bbr2"; stock ss prints the
// same bbr:(…) block for v1 and v3, so parse-ss leaves it null. BBR gains are exact
// (2.88671875, where ss's %g prints 2.88672).
func (s *Socket) Sample() (r record.TCPSample, ok bool) {
	// One backing array for the record's integers instead of ~35 small allocations.
	ints := make([]int64, 0, 48)
	num := func(v int64) *int64 {
		ints = append(ints, v)
		return &ints[len(ints)-1]
	}
	r.CC = s.CC
	r.State = s.State.String()
	r.LocalPort = int64(s.Local.Port())
	r.RecvQBytes, r.SendQBytes = int64(s.RQueue), int64(s.WQueue)
	if v := bbrVersion(s.CC, s.BBR); v != 0 {
		r.CCVersion = num(v)
	}
	if b := s.BBR; b != nil {
		r.BBRBwBps = num(bitsPerSecond(b.BW))
		if b.MinRTT != ^uint32(0) { // ~0U: BBR has no min RTT sample yet
			r.BBRMinRTTUs = num(int64(b.MinRTT))
		}
		if b.PacingGain != 0 {
			r.BBRPacingGain = record.F(float64(b.PacingGain) / 256)
		}
		if b.CwndGain != 0 {
			r.BBRCwndGain = record.F(float64(b.CwndGain) / 256)
		}
	}
	t := s.Info
	if t == nil {
		return r, false
	}
	// has32/has64: the kernel's struct has the field: its value, 0 included.
	has32 := func(off int, v uint32) *int64 {
		if !t.Has(off, 4) {
			return nil
		}
		return num(int64(v))
	}
	has64 := func(off int, v uint64) *int64 {
		if !t.Has(off, 8) {
			return nil
		}
		return num(clampInt64(v))
	}
	// nz32: ss hides the field when 0 and the parser leaves it null.
	nz32 := func(off int, v uint32) *int64 {
		if !t.Has(off, 4) || v == 0 {
			return nil
		}
		return num(int64(v))
	}

	if t.Has(offRTT, 4) && t.Has(offRTTVar, 4) && t.RTT() != 0 {
		r.RTTUs, r.RTTVarUs = num(int64(t.RTT())), num(int64(t.RTTVar()))
	}
	if t.Has(offMinRTT, 4) && t.MinRTT() != 0 && t.MinRTT() != ^uint32(0) {
		r.MinRTTUs = num(int64(t.MinRTT()))
	}
	if t.Has(offRTO, 4) {
		r.RTOMs = num((int64(t.RTO()) + 500) / 1000)
	}
	r.MSS = nz32(offSndMSS, t.SndMSS())
	r.Cwnd = nz32(offSndCwnd, t.SndCwnd())
	if t.Has(offSndSsthresh, 4) && t.SndSsthresh() != 0 && t.SndSsthresh() < 0xFFFF {
		r.Ssthresh = num(int64(t.SndSsthresh()))
	}

	r.Unacked = has32(offUnacked, t.Unacked())
	r.Sacked = has32(offSacked, t.Sacked())
	if s.State == StateListen && r.Sacked != nil {
		r.Sacked = num(0) // tcpi_sacked is the accept backlog limit there; ss hides it
	}
	r.Lost = has32(offLost, t.Lost())
	r.RetransOut = has32(offRetrans, t.Retrans())
	r.TotalRetrans = has32(offTotalRetr, t.TotalRetrans())
	r.Reordering = has32(offReordering, t.Reordering())

	r.BytesSent = has64(offBytesSent, t.BytesSent())
	r.BytesAcked = has64(offBytesAcked, t.BytesAcked())
	r.BytesRetrans = has64(offBytesRetr, t.BytesRetrans())
	r.BytesReceived = has64(offBytesRecv, t.BytesReceived())
	r.SegsOut = has32(offSegsOut, t.SegsOut())
	r.SegsIn = has32(offSegsIn, t.SegsIn())
	r.DataSegsOut = has32(offDataSegsOut, t.DataSegsOut())
	r.DataSegsIn = has32(offDataSegsIn, t.DataSegsIn())

	if t.Has(offDelivRate, 8) {
		r.DeliveryRateBps = num(bitsPerSecond(t.DeliveryRate()))
		r.AppLimited = record.Bool(t.AppLimited())
	}
	if t.Has(offPacingRate, 8) {
		if v := t.PacingRate(); v != 0 && v != ^uint64(0) {
			r.PacingRateBps = num(bitsPerSecond(v))
		}
	}
	r.Delivered = has32(offDelivered, t.Delivered())

	if t.Has(offSndbufLimit, 8) {
		busy := t.BusyTime()
		r.BusyMs = num(clampInt64(busy / 1000))
		r.RwndLimitedMs, r.SndbufLimitedMs = num(0), num(0)
		if busy != 0 {
			r.RwndLimitedMs = num(clampInt64(t.RwndLimited() / 1000))
			r.SndbufLimitedMs = num(clampInt64(t.SndbufLimited() / 1000))
		}
	}

	r.NotsentBytes = has32(offNotsent, t.NotsentBytes())
	r.SndWnd = has32(offSndWnd, t.SndWnd())
	r.RcvSpace = has32(offRcvSpace, t.RcvSpace())

	r.LastsndMs = nz32(offLastDataSnt, t.LastDataSentMs())
	r.LastrcvMs = nz32(offLastDataRcv, t.LastDataRecvMs())
	r.LastackMs = nz32(offLastAckRecv, t.LastAckRecvMs())
	r.TotalRTO, r.TotalRTORecoveries, r.TotalRTOTimeMs = totalRTO(t, num)
	return r, true
}

// totalRTO reads tcpi_total_rto, tcpi_total_rto_recoveries (u16) and tcpi_total_rto_time
// (u32, ms), kernel 6.7: null when the kernel's struct is too short.
func totalRTO(t *TCPInfo, num func(int64) *int64) (n, rec, ms *int64) {
	if !t.Has(offTotalRTOTim, 4) {
		return nil, nil, nil
	}
	return num(int64(t.TotalRTO())), num(int64(t.TotalRTORecoveries())), num(int64(t.TotalRTOTimeMs()))
}

// ConnRecord returns the tcp_conn/1 fields of a destroy event (see docs/collector/close-capture.md,
// "Close-time capture"): the same units and null rules as Sample, plus the counters only a
// connection's end makes interesting (delivered_ce, dsack_dups, reord_seen, rcv_ooopack,
// total_rto*). The caller adds cc, cc_source, sock_id, peer_prefix, the host fields and
// ts_ms. ok is false without tcp_info. cc_version is set only when the message carried
// BBRINFO (a destroy event does not on Linux 6.18).
func (s *Socket) ConnRecord() (c record.TCPConn, ok bool) {
	r, ok := s.Sample()
	if !ok {
		return c, false
	}
	t := s.Info
	ints := make([]int64, 0, 8)
	num := func(v int64) *int64 {
		ints = append(ints, v)
		return &ints[len(ints)-1]
	}
	has32 := func(off int, v uint32) *int64 {
		if !t.Has(off, 4) {
			return nil
		}
		return num(int64(v))
	}
	c = record.TCPConn{
		CC: r.CC, CCVersion: r.CCVersion, LocalPort: r.LocalPort,
		RTTUs: r.RTTUs, RTTVarUs: r.RTTVarUs, MinRTTUs: r.MinRTTUs, RTOMs: r.RTOMs, MSS: r.MSS, Cwnd: r.Cwnd, Ssthresh: r.Ssthresh,
		Unacked: r.Unacked, Sacked: r.Sacked, Lost: r.Lost, RetransOut: r.RetransOut, TotalRetrans: r.TotalRetrans, Reordering: r.Reordering,
		BytesSent: r.BytesSent, BytesAcked: r.BytesAcked, BytesRetrans: r.BytesRetrans, BytesReceived: r.BytesReceived,
		SegsOut: r.SegsOut, SegsIn: r.SegsIn, DataSegsOut: r.DataSegsOut, DataSegsIn: r.DataSegsIn,
		DeliveryRateBps: r.DeliveryRateBps, PacingRateBps: r.PacingRateBps, Delivered: r.Delivered, AppLimited: r.AppLimited,
		BusyMs: r.BusyMs, RwndLimitedMs: r.RwndLimitedMs, SndbufLimitedMs: r.SndbufLimitedMs,
		NotsentBytes: r.NotsentBytes, SndWnd: r.SndWnd, RcvSpace: r.RcvSpace,
		TotalRTO: r.TotalRTO, TotalRTORecoveries: r.TotalRTORecoveries, TotalRTOTimeMs: r.TotalRTOTimeMs,
	}
	c.DeliveredCE = has32(offDeliveredCE, t.DeliveredCE())
	c.DsackDups = has32(offDsackDups, t.DsackDups())
	c.ReordSeen = has32(offReordSeen, t.ReordSeen())
	c.RcvOoopack = has32(offRcvOoopack, t.RcvOoopack())
	return c, true
}

// Record completes the socket's sample into a tcp_sample/1 record: the client's prefix, the
// salted connection id (the same as parse-ss gives the same socket) and the host fields.
// The raw addresses go no further.
func (s *Socket) Record(key anon.SockIDer, meta record.Meta) (record.TCPSample, bool) {
	r, ok := s.Sample()
	if !ok {
		return record.TCPSample{}, false
	}
	meta.StampTCP(&r)
	r.PeerPrefix = anon.PeerPrefix(s.Peer.Addr())
	r.SockID = key.SockIDOf(s.Local, s.Peer, s.Cookie)
	return r, true
}

// bitsPerSecond converts the kernel's bytes per second, saturating.
func bitsPerSecond(bytesPerSec uint64) int64 {
	if bytesPerSec > (1<<63-1)/8 {
		return 1<<63 - 1
	}
	return int64(bytesPerSec * 8)
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
