package netlink

import "encoding/binary"

// TCPInfoMaxLen is sizeof(struct tcp_info) as this package knows it (Linux 6.18, with the
// AccECN byte counters). A kernel's INET_DIAG_INFO may be shorter (older kernel: the
// missing tail reads as zero, and Has reports it missing) or longer (newer kernel: the tail
// is ignored), exactly as ss handles it.
const TCPInfoMaxLen = 280

// Offsets and ends of struct tcp_info fields (docs/reference/tcp_info_offsets.txt).
// A field exists in a kernel's struct when the attribute's length reaches the field's end.
const (
	offState       = 0
	offCAState     = 1
	offRetransmits = 2
	offProbes      = 3
	offBackoff     = 4
	offOptions     = 5
	offWscale      = 6 // snd_wscale:4 (low nibble), rcv_wscale:4 (high nibble)
	offAppLimited  = 7 // delivery_rate_app_limited:1 (bit 0), fastopen_client_fail:2
	offRTO         = 8
	offATO         = 12
	offSndMSS      = 16
	offRcvMSS      = 20
	offUnacked     = 24
	offSacked      = 28
	offLost        = 32
	offRetrans     = 36
	offFackets     = 40
	offLastDataSnt = 44
	offLastAckSent = 48
	offLastDataRcv = 52
	offLastAckRecv = 56
	offPMTU        = 60
	offRcvSsthresh = 64
	offRTT         = 68
	offRTTVar      = 72
	offSndSsthresh = 76
	offSndCwnd     = 80
	offAdvMSS      = 84
	offReordering  = 88
	offRcvRTT      = 92
	offRcvSpace    = 96
	offTotalRetr   = 100
	offPacingRate  = 104 // u64, kernel 3.15
	offMaxPacing   = 112 // u64
	offBytesAcked  = 120 // u64, kernel 4.1
	offBytesRecv   = 128 // u64
	offSegsOut     = 136 // kernel 4.2
	offSegsIn      = 140
	offNotsent     = 144 // kernel 4.6
	offMinRTT      = 148
	offDataSegsIn  = 152
	offDataSegsOut = 156
	offDelivRate   = 160 // u64, kernel 4.9 (with app_limited)
	offBusyTime    = 168 // u64 µs, kernel 4.10
	offRwndLimited = 176 // u64 µs
	offSndbufLimit = 184 // u64 µs
	offDelivered   = 192 // kernel 4.18
	offDeliveredCE = 196
	offBytesSent   = 200 // u64, kernel 4.19
	offBytesRetr   = 208 // u64
	offDsackDups   = 216
	offReordSeen   = 220
	offRcvOoopack  = 224 // kernel 5.4
	offSndWnd      = 228
	offRcvWnd      = 232 // kernel 6.2
	offRehash      = 236
	offTotalRTO    = 240 // u16, kernel 6.7
	offTotalRTORec = 242 // u16
	offTotalRTOTim = 244 // u32 ms
)

// TCPInfo is one struct tcp_info as the kernel sent it: Len bytes (the kernel's sizeof),
// zero-padded to TCPInfoMaxLen. Read fields with the accessors; Has tells whether the
// kernel's struct has a field at all (a field past Len reads as 0, like in ss).
type TCPInfo struct {
	Len int // length of the kernel's struct tcp_info (INET_DIAG_INFO payload), before padding
	b   [TCPInfoMaxLen]byte
}

// ParseTCPInfo copies an INET_DIAG_INFO payload of any length.
func ParseTCPInfo(p []byte) TCPInfo {
	var t TCPInfo
	t.Len = len(p)
	copy(t.b[:], p)
	return t
}

// Has reports whether the kernel's struct reaches the end of the field at off of size n.
func (t *TCPInfo) Has(off, n int) bool { return t.Len >= off+n }

func (t *TCPInfo) u8(off int) uint8   { return t.b[off] }
func (t *TCPInfo) u16(off int) uint16 { return binary.LittleEndian.Uint16(t.b[off:]) }
func (t *TCPInfo) u32(off int) uint32 { return binary.LittleEndian.Uint32(t.b[off:]) }
func (t *TCPInfo) u64(off int) uint64 { return binary.LittleEndian.Uint64(t.b[off:]) }

// Field accessors, named after tcpi_* without the prefix. Units are the kernel's: times in
// µs unless named Ms, rates in bytes per second.
func (t *TCPInfo) State() uint8               { return t.u8(offState) }
func (t *TCPInfo) CAState() uint8             { return t.u8(offCAState) }
func (t *TCPInfo) Retransmits() uint8         { return t.u8(offRetransmits) }
func (t *TCPInfo) Probes() uint8              { return t.u8(offProbes) }
func (t *TCPInfo) Backoff() uint8             { return t.u8(offBackoff) }
func (t *TCPInfo) Options() uint8             { return t.u8(offOptions) }
func (t *TCPInfo) SndWscale() uint8           { return t.u8(offWscale) & 0xf }
func (t *TCPInfo) RcvWscale() uint8           { return t.u8(offWscale) >> 4 }
func (t *TCPInfo) AppLimited() bool           { return t.u8(offAppLimited)&1 != 0 }
func (t *TCPInfo) RTO() uint32                { return t.u32(offRTO) }
func (t *TCPInfo) ATO() uint32                { return t.u32(offATO) }
func (t *TCPInfo) SndMSS() uint32             { return t.u32(offSndMSS) }
func (t *TCPInfo) RcvMSS() uint32             { return t.u32(offRcvMSS) }
func (t *TCPInfo) Unacked() uint32            { return t.u32(offUnacked) }
func (t *TCPInfo) Sacked() uint32             { return t.u32(offSacked) }
func (t *TCPInfo) Lost() uint32               { return t.u32(offLost) }
func (t *TCPInfo) Retrans() uint32            { return t.u32(offRetrans) }
func (t *TCPInfo) Fackets() uint32            { return t.u32(offFackets) }
func (t *TCPInfo) LastDataSentMs() uint32     { return t.u32(offLastDataSnt) }
func (t *TCPInfo) LastAckSentMs() uint32      { return t.u32(offLastAckSent) }
func (t *TCPInfo) LastDataRecvMs() uint32     { return t.u32(offLastDataRcv) }
func (t *TCPInfo) LastAckRecvMs() uint32      { return t.u32(offLastAckRecv) }
func (t *TCPInfo) PMTU() uint32               { return t.u32(offPMTU) }
func (t *TCPInfo) RcvSsthresh() uint32        { return t.u32(offRcvSsthresh) }
func (t *TCPInfo) RTT() uint32                { return t.u32(offRTT) }
func (t *TCPInfo) RTTVar() uint32             { return t.u32(offRTTVar) }
func (t *TCPInfo) SndSsthresh() uint32        { return t.u32(offSndSsthresh) }
func (t *TCPInfo) SndCwnd() uint32            { return t.u32(offSndCwnd) }
func (t *TCPInfo) AdvMSS() uint32             { return t.u32(offAdvMSS) }
func (t *TCPInfo) Reordering() uint32         { return t.u32(offReordering) }
func (t *TCPInfo) RcvRTT() uint32             { return t.u32(offRcvRTT) }
func (t *TCPInfo) RcvSpace() uint32           { return t.u32(offRcvSpace) }
func (t *TCPInfo) TotalRetrans() uint32       { return t.u32(offTotalRetr) }
func (t *TCPInfo) PacingRate() uint64         { return t.u64(offPacingRate) }
func (t *TCPInfo) MaxPacingRate() uint64      { return t.u64(offMaxPacing) }
func (t *TCPInfo) BytesAcked() uint64         { return t.u64(offBytesAcked) }
func (t *TCPInfo) BytesReceived() uint64      { return t.u64(offBytesRecv) }
func (t *TCPInfo) SegsOut() uint32            { return t.u32(offSegsOut) }
func (t *TCPInfo) SegsIn() uint32             { return t.u32(offSegsIn) }
func (t *TCPInfo) NotsentBytes() uint32       { return t.u32(offNotsent) }
func (t *TCPInfo) MinRTT() uint32             { return t.u32(offMinRTT) }
func (t *TCPInfo) DataSegsIn() uint32         { return t.u32(offDataSegsIn) }
func (t *TCPInfo) DataSegsOut() uint32        { return t.u32(offDataSegsOut) }
func (t *TCPInfo) DeliveryRate() uint64       { return t.u64(offDelivRate) }
func (t *TCPInfo) BusyTime() uint64           { return t.u64(offBusyTime) }
func (t *TCPInfo) RwndLimited() uint64        { return t.u64(offRwndLimited) }
func (t *TCPInfo) SndbufLimited() uint64      { return t.u64(offSndbufLimit) }
func (t *TCPInfo) Delivered() uint32          { return t.u32(offDelivered) }
func (t *TCPInfo) DeliveredCE() uint32        { return t.u32(offDeliveredCE) }
func (t *TCPInfo) BytesSent() uint64          { return t.u64(offBytesSent) }
func (t *TCPInfo) BytesRetrans() uint64       { return t.u64(offBytesRetr) }
func (t *TCPInfo) DsackDups() uint32          { return t.u32(offDsackDups) }
func (t *TCPInfo) ReordSeen() uint32          { return t.u32(offReordSeen) }
func (t *TCPInfo) RcvOoopack() uint32         { return t.u32(offRcvOoopack) }
func (t *TCPInfo) SndWnd() uint32             { return t.u32(offSndWnd) }
func (t *TCPInfo) RcvWnd() uint32             { return t.u32(offRcvWnd) }
func (t *TCPInfo) Rehash() uint32             { return t.u32(offRehash) }
func (t *TCPInfo) TotalRTO() uint16           { return t.u16(offTotalRTO) }
func (t *TCPInfo) TotalRTORecoveries() uint16 { return t.u16(offTotalRTORec) }
func (t *TCPInfo) TotalRTOTimeMs() uint32     { return t.u32(offTotalRTOTim) }
