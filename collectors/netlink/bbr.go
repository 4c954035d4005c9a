package netlink

import "encoding/binary"

// BBRInfo is INET_DIAG_BBRINFO (struct tcp_bbr_info). Mainline BBR (v1) sends 20 bytes;
// Google's BBR v2alpha ("bbr2") and v3 (named "bbr") send 52, with a version byte at 39.
type BBRInfo struct {
	Len        int    // payload length: 20 (v1) or 52 (v2/v3)
	BW         uint64 // bandwidth estimate, bytes per second (bw_hi<<32 | bw_lo)
	MinRTT     uint32 // µs
	PacingGain uint32 // ×256
	CwndGain   uint32 // ×256
	Version    uint8  // bbr_version at offset 39 of a 52-byte payload; 0 when absent

	// Present in the 52-byte layout only.
	BWHi, BWLo             uint64 // bytes per second
	Mode, Phase            uint8
	InflightLo, InflightHi uint32 // packets
	ExtraAcked             uint32 // packets
}

// BBR payload lengths.
const (
	bbrV1Len = 20
	bbrV2Len = 52
)

// parseBBRInfo reads a BBRINFO payload; ok is false when it is too short for even the v1
// fields.
func parseBBRInfo(p []byte) (BBRInfo, bool) {
	if len(p) < bbrV1Len {
		return BBRInfo{}, false
	}
	le := binary.LittleEndian
	b := BBRInfo{
		Len:        len(p),
		BW:         uint64(le.Uint32(p[0:])) | uint64(le.Uint32(p[4:]))<<32,
		MinRTT:     le.Uint32(p[8:]),
		PacingGain: le.Uint32(p[12:]),
		CwndGain:   le.Uint32(p[16:]),
	}
	if len(p) >= bbrV2Len {
		b.BWHi = uint64(le.Uint32(p[20:])) | uint64(le.Uint32(p[24:]))<<32
		b.BWLo = uint64(le.Uint32(p[28:])) | uint64(le.Uint32(p[32:]))<<32
		b.Mode, b.Phase = p[36], p[37]
		b.Version = p[39]
		b.InflightLo = le.Uint32(p[40:])
		b.InflightHi = le.Uint32(p[44:])
		b.ExtraAcked = le.Uint32(p[48:])
	}
	return b, true
}

// bbrVersion tells the BBR variant (docs/reference/ss_tcp_info_bbr.md): the name
// "bbr2" is Google's v2alpha; a 52-byte payload carries its version byte; a 20-byte payload
// is mainline v1. 0: cannot tell.
func bbrVersion(cc string, b *BBRInfo) int64 {
	if cc == "bbr2" {
		return 2
	}
	if b == nil {
		return 0
	}
	switch {
	case b.Len >= bbrV2Len && b.Version != 0:
		return int64(b.Version)
	case b.Len == bbrV1Len:
		return 1
	}
	return 0
}
