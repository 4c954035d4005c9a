package link

import (
	"encoding/binary"
)

// The TUN devices are opened with IFF_VNET_HDR: every packet read or written is preceded by
// a struct virtio_net_hdr (10 bytes, little-endian on the architectures we build for). With
// TUNSETOFFLOAD(TUN_F_CSUM|TUN_F_TSO4|TUN_F_TSO6) the kernel hands us TCP segments of up to
// 64 KiB (GSO "super-packets") with a partial checksum, and accepts the same back: one
// read() and one write() move ~44 MTU-sized packets.
const (
	vnetHdrLen = 10

	vnetFlagNeedsCsum = 1

	gsoNone  = 0
	gsoTCPv4 = 1
	gsoTCPv6 = 4
	gsoECN   = 0x80

	tunFCsum = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
)

// vnetHdr is the decoded virtio_net_hdr.
type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

func decodeVnet(b []byte) vnetHdr {
	return vnetHdr{
		flags:      b[0],
		gsoType:    b[1],
		hdrLen:     binary.LittleEndian.Uint16(b[2:]),
		gsoSize:    binary.LittleEndian.Uint16(b[4:]),
		csumStart:  binary.LittleEndian.Uint16(b[6:]),
		csumOffset: binary.LittleEndian.Uint16(b[8:]),
	}
}

func (h vnetHdr) encode(b []byte) {
	b[0] = h.flags
	b[1] = h.gsoType
	binary.LittleEndian.PutUint16(b[2:], h.hdrLen)
	binary.LittleEndian.PutUint16(b[4:], h.gsoSize)
	binary.LittleEndian.PutUint16(b[6:], h.csumStart)
	binary.LittleEndian.PutUint16(b[8:], h.csumOffset)
}

// pktMeta describes one packet as read from the TUN device (vnet header included): how many
// MTU-sized packets ("segments") it stands for, and how to cut it into runs of segments.
type pktMeta struct {
	size    int // IP bytes (without the vnet header)
	nseg    int // segments: 1 for an ordinary packet, ceil(payload/gso) for a GSO packet
	gso     int // payload bytes per segment (GSO packets)
	hdrLen  int // IP + TCP header bytes (GSO packets)
	ipHL    int // IP header bytes
	v6      bool
	payLen  int  // TCP payload bytes (GSO packets)
	split   bool // runs of segments can be written on their own (IPv4/IPv6 TCP GSO)
	vnet    vnetHdr
	lastLen int // bytes of the last segment (opaque multi-segment packets)
}

// parseMeta decodes pkt (vnet header + IP packet). A GSO packet it cannot cut (unknown
// type, IPv6 extension headers, malformed) is still counted as its segments but is kept
// whole (split == false): it leaves when its last segment's time comes.
func parseMeta(pkt []byte) pktMeta {
	m := pktMeta{size: len(pkt) - vnetHdrLen, nseg: 1}
	if m.size <= 0 {
		m.size = 0
		return m
	}
	m.vnet = decodeVnet(pkt)
	if m.vnet.gsoType&^gsoECN == gsoNone || m.vnet.gsoSize == 0 {
		return m
	}
	m.gso = int(m.vnet.gsoSize)
	ip := pkt[vnetHdrLen:]
	ok := false
	switch m.vnet.gsoType &^ gsoECN {
	case gsoTCPv4:
		if len(ip) >= 20 && ip[0]>>4 == 4 && ip[9] == 6 {
			m.ipHL = int(ip[0]&0x0f) * 4
			ok = m.ipHL >= 20
		}
	case gsoTCPv6:
		if len(ip) >= 40 && ip[0]>>4 == 6 && ip[6] == 6 {
			m.ipHL, m.v6, ok = 40, true, true
		}
	}
	if ok && len(ip) >= m.ipHL+20 {
		tcpHL := int(ip[m.ipHL+12]>>4) * 4
		m.hdrLen = m.ipHL + tcpHL
		if tcpHL >= 20 && len(ip) > m.hdrLen {
			m.payLen = len(ip) - m.hdrLen
			m.nseg = (m.payLen + m.gso - 1) / m.gso
			// The header of a later run is written just before its payload, over the
			// already-sent payload of the segment before it: it must fit there.
			m.split = m.nseg > 1 && m.gso >= vnetHdrLen+m.hdrLen
			return m
		}
	}
	// Opaque GSO packet: count its segments from the vnet header's hdr_len.
	m.split = false
	hl := int(m.vnet.hdrLen)
	if hl > 0 && hl < m.size {
		m.hdrLen = hl
		m.payLen = m.size - hl
		m.nseg = (m.payLen + m.gso - 1) / m.gso
	}
	return m
}

// segBytes is the IP size of segment k: what the rate limiter and a trace's delivery
// opportunities are charged.
func (m *pktMeta) segBytes(k int) int {
	if m.nseg == 1 {
		return m.size
	}
	if k < m.nseg-1 {
		return m.hdrLen + m.gso
	}
	return m.hdrLen + m.payLen - (m.nseg-1)*m.gso
}

// runBytes is the IP size of segments [i, j) as separate packets.
func (m *pktMeta) runBytes(i, j int) int {
	if m.nseg == 1 {
		return m.size
	}
	n := 0
	for k := i; k < j; k++ {
		n += m.segBytes(k)
	}
	return n
}

// buildRun prepares segments [i, j) of the GSO packet in buf (vnet header + packet) for one
// write and returns the bytes to write. hdr is a copy of the packet's original vnet + IP +
// TCP headers. For i > 0 the new headers are written just before the run's payload, over the
// payload of segment i-1 (already written or dropped); for i == 0 the headers are edited in
// place. The TCP checksum stays partial (VIRTIO_NET_HDR_F_NEEDS_CSUM): only the pseudo-header
// sum is recomputed, so no payload byte is read.
func buildRun(buf []byte, hdr []byte, m *pktMeta, i, j int) []byte {
	if i == 0 && j == m.nseg {
		return buf
	}
	payStart := vnetHdrLen + m.hdrLen + i*m.gso
	payEnd := vnetHdrLen + m.hdrLen + m.payLen
	if e := vnetHdrLen + m.hdrLen + j*m.gso; e < payEnd {
		payEnd = e
	}
	start := payStart - vnetHdrLen - m.hdrLen
	out := buf[start:payEnd]
	if i > 0 {
		copy(out, hdr[:vnetHdrLen+m.hdrLen])
	}
	pay := payEnd - payStart
	n := j - i

	vh := m.vnet
	vh.flags |= vnetFlagNeedsCsum
	vh.csumStart = uint16(m.ipHL)
	vh.csumOffset = 16
	vh.hdrLen = uint16(m.hdrLen)
	if n == 1 {
		vh.gsoType, vh.gsoSize = gsoNone, 0
	} else if i > 0 {
		vh.gsoType &^= gsoECN
	}
	vh.encode(out)

	ip := out[vnetHdrLen:]
	tcp := ip[m.ipHL:]
	tcpLen := m.hdrLen - m.ipHL + pay
	origIP := hdr[vnetHdrLen:]
	origTCP := origIP[m.ipHL:]
	if m.v6 {
		binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
	} else {
		binary.BigEndian.PutUint16(ip[2:], uint16(m.ipHL+tcpLen))
		id := binary.BigEndian.Uint16(origIP[4:])
		binary.BigEndian.PutUint16(ip[4:], id+uint16(i))
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], ^foldSum(sum16(ip[:m.ipHL], 0)))
	}
	seq := binary.BigEndian.Uint32(origTCP[4:])
	binary.BigEndian.PutUint32(tcp[4:], seq+uint32(i*m.gso))
	flags := origTCP[13]
	if i > 0 {
		flags &^= 0x80 // CWR: first segment only
	}
	if j < m.nseg {
		flags &^= 0x01 | 0x08 // FIN, PSH: last segment only
	}
	tcp[13] = flags
	// Partial checksum: the folded pseudo-header sum (not complemented), as the kernel
	// leaves it for CHECKSUM_PARTIAL.
	var s uint32
	if m.v6 {
		s = sum16(ip[8:40], 0)
	} else {
		s = sum16(ip[12:20], 0)
	}
	s += 6 + uint32(tcpLen)
	binary.BigEndian.PutUint16(tcp[16:], foldSum(s))
	return out
}

// sum16 adds b as big-endian 16-bit words to s (one's complement sum, unfolded).
func sum16(b []byte, s uint32) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func foldSum(s uint32) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
