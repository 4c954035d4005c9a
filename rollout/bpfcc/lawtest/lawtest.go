// Package lawtest compiles the BPF congestion controls' control laws (rollout/bpf/cc/bbr2_law.h and vivace_law.h:
// the same C the BPF objects are built from) for the host, with a small shim for the kernel's
// types, so that Go tests can drive them with generated rate_sample sequences: the property
// and fuzz tests of the safety bounds (law_test.go). The headers are symlinks into
// rollout/bpf/cc/ (files in the package directory, so that the Go build cache sees their
// changes). Built with cgo and UBSan (an undefined
// operation, e.g. a division by zero or a signed overflow, aborts the test).

package lawtest

/*
#cgo CFLAGS: -O1 -Wall -Wno-unknown-pragmas -fsanitize=undefined
#cgo LDFLAGS: -fsanitize=undefined
#include <stdlib.h>
#include "laws.h"
*/
import "C"

import "unsafe"

// BBRIn is one ACK for the BBR law (struct bbr2_in).
type BBRIn struct {
	NowUs, MaxPacingBps, PacingBps                                             uint64
	IntervalUs, RTTUs                                                          int64
	Delivered, Losses                                                          int32
	MSS, Cwnd, CwndClamp, Inflight, SRTTUs, TpDelivered, TpDeliveredCE, TpLost uint32
	PriorDelivered, PriorInFlight, AckedSacked, Rand                           uint32
	CAState                                                                    uint8
	AppLimited, ECNOK                                                          bool
}

// BBRView is what the law decided and its model after the ACK.
type BBRView struct {
	Cwnd                                                uint32
	PacingBps, BW                                       uint64
	MinRTTUs, InflightHi, InflightLo, Rounds, ProbeRTTs uint32
	Mode, Phase                                         uint8
}

// BBR is one socket's state for version 2 or 3.
type BBR struct {
	version int
	state   unsafe.Pointer
}

// NewBBR returns a fresh socket (zeroed state, as socket storage starts).
func NewBBR(version int) *BBR {
	return &BBR{version: version, state: C.calloc(1, C.size_t(C.law_bbr_state_size()))}
}

// Free releases the C state.
func (b *BBR) Free() { C.free(b.state) }

func cbool(v bool) C.u8 {
	if v {
		return 1
	}
	return 0
}

// OnAck runs the law for one ACK.
func (b *BBR) OnAck(in BBRIn) BBRView {
	ci := C.struct_law_bbr_in{now_us: C.u64(in.NowUs), max_pacing_bps: C.u64(in.MaxPacingBps), pacing_bps: C.u64(in.PacingBps),
		interval_us: C.s64(in.IntervalUs), rtt_us: C.s64(in.RTTUs), delivered: C.s32(in.Delivered), losses: C.s32(in.Losses),
		mss: C.u32(in.MSS), cwnd: C.u32(in.Cwnd), cwnd_clamp: C.u32(in.CwndClamp), inflight: C.u32(in.Inflight),
		srtt_us: C.u32(in.SRTTUs), tp_delivered: C.u32(in.TpDelivered), tp_delivered_ce: C.u32(in.TpDeliveredCE),
		tp_lost: C.u32(in.TpLost), prior_delivered: C.u32(in.PriorDelivered), prior_in_flight: C.u32(in.PriorInFlight),
		acked_sacked: C.u32(in.AckedSacked), rand: C.u32(in.Rand), ca_state: C.u8(in.CAState),
		is_app_limited: cbool(in.AppLimited), ecn_ok: cbool(in.ECNOK)}
	var v C.struct_law_bbr_view
	C.law_bbr_on_ack(C.int(b.version), b.state, &ci, &v)
	return BBRView{Cwnd: uint32(v.cwnd), PacingBps: uint64(v.pacing_bps), BW: uint64(v.bw), MinRTTUs: uint32(v.min_rtt_us),
		InflightHi: uint32(v.inflight_hi), InflightLo: uint32(v.inflight_lo), Rounds: uint32(v.round_count),
		ProbeRTTs: uint32(v.probe_rtt_count), Mode: uint8(v.mode), Phase: uint8(v.phase)}
}

// OnLossState is the set_state(TCP_CA_Loss) hook.
func (b *BBR) OnLossState(cwnd uint32) {
	C.law_bbr_on_loss_state(C.int(b.version), b.state, C.u32(cwnd))
}

// OnUndo is the undo_cwnd hook.
func (b *BBR) OnUndo() { C.law_bbr_on_undo(C.int(b.version), b.state) }

// VivaceIn is one ACK for the Vivace law (struct vivace_in).
type VivaceIn struct {
	NowUs, MaxPacingBps, DlvBps                             uint64
	RTTUs                                                   int64
	MSS, SRTTUs, Cwnd, CwndClamp, AckedSacked, Losses, Rand uint32
}

// VivaceView is the law's decision and state after the ACK.
type VivaceView struct {
	Cwnd               uint32
	PacingBps, RateBps uint64
	Rounds             uint32
	Phase              uint8
}

// Vivace is one socket's state.
type Vivace struct{ state unsafe.Pointer }

// NewVivace returns a fresh socket.
func NewVivace() *Vivace { return &Vivace{state: C.calloc(1, C.size_t(C.law_vv_state_size()))} }

// Free releases the C state.
func (v *Vivace) Free() { C.free(v.state) }

// OnAck runs the law for one ACK.
func (v *Vivace) OnAck(in VivaceIn) VivaceView {
	ci := C.struct_law_vv_in{now_us: C.u64(in.NowUs), max_pacing_bps: C.u64(in.MaxPacingBps), dlv_bps: C.u64(in.DlvBps),
		rtt_us: C.s64(in.RTTUs), mss: C.u32(in.MSS), srtt_us: C.u32(in.SRTTUs), cwnd: C.u32(in.Cwnd),
		cwnd_clamp: C.u32(in.CwndClamp), acked_sacked: C.u32(in.AckedSacked), losses: C.u32(in.Losses), rand: C.u32(in.Rand)}
	var o C.struct_law_vv_view
	C.law_vv_on_ack(v.state, &ci, &o)
	return VivaceView{Cwnd: uint32(o.cwnd), PacingBps: uint64(o.pacing_bps), RateBps: uint64(o.rate_bps),
		Rounds: uint32(o.rounds), Phase: uint8(o.phase)}
}

// VivaceRTTSlope is vivace's dRTT/dt (Q16: 65536 = 1 us per us) of these RTT samples taken as
// one monitor interval's, 0 when the slope is not significant.
func VivaceRTTSlope(nowUs []uint64, rttUs []int64) int64 {
	return withSamples(nowUs, rttUs, func(n C.u32, t *C.u64, r *C.s64) int64 {
		return int64(C.law_vv_rtt_slope(n, t, r))
	})
}

// withSamples calls law with the RTT samples copied into C memory (cgo may not keep Go pointers),
// 0 when there are none or the two slices differ in length.
func withSamples(nowUs []uint64, rttUs []int64, law func(n C.u32, t *C.u64, r *C.s64) int64) int64 {
	if len(nowUs) == 0 || len(nowUs) != len(rttUs) {
		return 0
	}
	t := C.malloc(C.size_t(8 * len(nowUs)))
	r := C.malloc(C.size_t(8 * len(rttUs)))
	defer C.free(t)
	defer C.free(r)
	copy(unsafe.Slice((*uint64)(t), len(nowUs)), nowUs)
	copy(unsafe.Slice((*int64)(r), len(rttUs)), rttUs)
	return law(C.u32(len(nowUs)), (*C.u64)(t), (*C.s64)(r))
}

// VivaceUtility is vivace's utility (Q16) of one monitor interval sent at rateBps (bytes/s) with
// these RTT samples and the loss rate lossQ16 (Q16: 65536 = all lost).
func VivaceUtility(rateBps uint64, lossQ16 uint32, nowUs []uint64, rttUs []int64) int64 {
	return withSamples(nowUs, rttUs, func(n C.u32, t *C.u64, r *C.s64) int64 {
		return int64(C.law_vv_utility(C.u64(rateBps), C.u32(lossQ16), n, t, r))
	})
}

// VivaceLossAfter is vivace's loss estimate (Q16) after monitor intervals that delivered and lost
// these packets, in order, from a fresh socket.
func VivaceLossAfter(delivered, lost []uint32) uint32 {
	n := len(delivered)
	if n == 0 || len(lost) != n {
		return 0
	}
	d := (*C.u32)(C.malloc(C.size_t(n) * 4))
	l := (*C.u32)(C.malloc(C.size_t(n) * 4))
	defer C.free(unsafe.Pointer(d))
	defer C.free(unsafe.Pointer(l))
	ds := unsafe.Slice(d, n)
	ls := unsafe.Slice(l, n)
	for i := range delivered {
		ds[i], ls[i] = C.u32(delivered[i]), C.u32(lost[i])
	}
	return uint32(C.law_vv_loss_after(C.u32(n), d, l))
}
