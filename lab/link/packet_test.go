package link

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// gsoPacket builds a vnet header + TCP GSO packet as the kernel hands it to us: partial
// checksum (pseudo-header sum over the whole TCP length), flags PSH|ACK|FIN|CWR set.
func gsoPacket(t *testing.T, v6 bool, payLen, gso int) ([]byte, []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	pay := make([]byte, payLen)
	for i := range pay {
		pay[i] = byte(rng.IntN(256))
	}
	ipHL := 20
	if v6 {
		ipHL = 40
	}
	tcpHL := 32
	pkt := make([]byte, vnetHdrLen+ipHL+tcpHL+payLen)
	gt := uint8(gsoTCPv4)
	if v6 {
		gt = gsoTCPv6
	}
	vnetHdr{flags: vnetFlagNeedsCsum, gsoType: gt, hdrLen: uint16(ipHL + tcpHL), gsoSize: uint16(gso),
		csumStart: uint16(ipHL), csumOffset: 16}.encode(pkt)
	ip := pkt[vnetHdrLen:]
	tcpLen := tcpHL + payLen
	if v6 {
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(tcpLen))
		ip[6], ip[7] = 6, 64
		copy(ip[8:24], []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
		copy(ip[24:40], []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	} else {
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(ipHL+tcpLen))
		binary.BigEndian.PutUint16(ip[4:], 0x1234)
		ip[6] = 0x40 // DF
		ip[8], ip[9] = 64, 6
		copy(ip[12:16], []byte{10, 0, 0, 1})
		copy(ip[16:20], []byte{10, 0, 0, 2})
		binary.BigEndian.PutUint16(ip[10:], ^foldSum(sum16(ip[:20], 0)))
	}
	tcp := ip[ipHL:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5001)
	binary.BigEndian.PutUint32(tcp[4:], 0xfffff000) // wraps inside the packet
	binary.BigEndian.PutUint32(tcp[8:], 77)
	tcp[12] = byte(tcpHL/4) << 4
	tcp[13] = 0x80 | 0x10 | 0x08 | 0x01 // CWR ACK PSH FIN
	binary.BigEndian.PutUint16(tcp[14:], 512)
	for i := 20; i < tcpHL; i++ {
		tcp[i] = 1 // NOPs
	}
	copy(tcp[tcpHL:], pay)
	var s uint32
	if v6 {
		s = sum16(ip[8:40], 0)
	} else {
		s = sum16(ip[12:20], 0)
	}
	binary.BigEndian.PutUint16(tcp[16:], foldSum(s+6+uint32(tcpLen)))
	return pkt, pay
}

// complete does what the kernel does for CHECKSUM_PARTIAL: sum from csum_start to the end and
// store the complement at csum_start+csum_offset. Then it verifies the TCP checksum the way a
// receiver without offload would.
func complete(t *testing.T, out []byte) []byte {
	t.Helper()
	out = append([]byte(nil), out...)
	vh := decodeVnet(out)
	if vh.flags&vnetFlagNeedsCsum == 0 {
		t.Fatal("NEEDS_CSUM not set")
	}
	ip := out[vnetHdrLen:]
	start, off := int(vh.csumStart), int(vh.csumOffset)
	c := ^foldSum(sum16(ip[start:], 0))
	binary.BigEndian.PutUint16(ip[start+off:], c)
	var ps uint32
	if ip[0]>>4 == 6 {
		ps = sum16(ip[8:40], 0) + 6 + uint32(len(ip)-40)
	} else {
		ps = sum16(ip[12:20], 0) + 6 + uint32(len(ip)-20)
		if foldSum(sum16(ip[:20], 0)) != 0xffff {
			t.Fatalf("bad IPv4 header checksum")
		}
		if int(binary.BigEndian.Uint16(ip[2:])) != len(ip) {
			t.Fatalf("IPv4 total length %d, packet %d", binary.BigEndian.Uint16(ip[2:]), len(ip))
		}
	}
	if foldSum(sum16(ip[start:], ps)) != 0xffff {
		t.Fatalf("bad TCP checksum")
	}
	return out
}

func TestBuildRunSplitsGSO(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		const gso, payLen = 1448, 5*1448 + 100 // 6 segments, the last one short
		pkt, pay := gsoPacket(t, v6, payLen, gso)
		hdr := append([]byte(nil), pkt[:maxHdr]...)
		m := parseMeta(pkt)
		if !m.split || m.nseg != 6 || m.gso != gso {
			t.Fatalf("v6=%v: meta %+v", v6, m)
		}
		if got := m.segBytes(0); got != m.hdrLen+gso {
			t.Fatalf("segBytes(0) = %d", got)
		}
		if got := m.segBytes(5); got != m.hdrLen+100 {
			t.Fatalf("segBytes(5) = %d", got)
		}
		// Runs in order, as the writer releases them: [0,1) [1,4) [4,5) [5,6).
		var gotPay []byte
		for _, r := range [][2]int{{0, 1}, {1, 4}, {4, 5}, {5, 6}} {
			out := complete(t, buildRun(pkt, hdr, &m, r[0], r[1]))
			vh := decodeVnet(out)
			n := r[1] - r[0]
			if (n > 1) != (vh.gsoType&^gsoECN != gsoNone) {
				t.Fatalf("run %v: gso type %d", r, vh.gsoType)
			}
			ip := out[vnetHdrLen:]
			tcp := ip[m.ipHL:]
			seq := binary.BigEndian.Uint32(tcp[4:])
			if want := uint32(0xfffff000) + uint32(r[0]*gso); seq != want {
				t.Fatalf("run %v: seq %#x want %#x", r, seq, want)
			}
			flags := tcp[13]
			if (flags&0x80 != 0) != (r[0] == 0) {
				t.Fatalf("run %v: CWR %v", r, flags&0x80 != 0)
			}
			last := r[1] == m.nseg
			if (flags&0x09 == 0x09) != last || (flags&0x09 != 0 && !last) {
				t.Fatalf("run %v: FIN/PSH %#x", r, flags)
			}
			if !v6 {
				if id := binary.BigEndian.Uint16(ip[4:]); id != 0x1234+uint16(r[0]) {
					t.Fatalf("run %v: IP id %#x", r, id)
				}
			}
			if got := len(ip); got != m.runBytes(r[0], r[1])-(n-1)*m.hdrLen {
				t.Fatalf("run %v: %d IP bytes", r, got)
			}
			gotPay = append(gotPay, tcp[m.hdrLen-m.ipHL:]...)
		}
		if !bytes.Equal(gotPay, pay) {
			t.Fatalf("v6=%v: payload differs after splitting", v6)
		}
	}
}

func TestParseMetaPlainAndOpaque(t *testing.T) {
	plain := make([]byte, vnetHdrLen+84) // an ICMP echo, no GSO
	plain[vnetHdrLen] = 0x45
	m := parseMeta(plain)
	if m.nseg != 1 || m.size != 84 || m.segBytes(0) != 84 {
		t.Fatalf("plain: %+v", m)
	}
	// UDP GSO (not enabled, but if it came): counted by hdr_len, not cut.
	udp := make([]byte, vnetHdrLen+28+3000)
	vnetHdr{gsoType: 5, hdrLen: 28, gsoSize: 1000}.encode(udp)
	udp[vnetHdrLen] = 0x45
	m = parseMeta(udp)
	if m.nseg != 3 || m.split || m.runBytes(0, 3) != 3*1028 {
		t.Fatalf("opaque: %+v", m)
	}
}
