package netlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Netlink and sock_diag constants (include/uapi/linux/netlink.h, sock_diag.h, inet_diag.h).
const (
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY

	nlmsgError = 2 // NLMSG_ERROR
	nlmsgDone  = 3 // NLMSG_DONE

	nlmFRequest  = 0x1   // NLM_F_REQUEST
	nlmFMulti    = 0x2   // NLM_F_MULTI
	nlmFDumpIntr = 0x10  // NLM_F_DUMP_INTR: the dump is inconsistent (tables changed under it)
	nlmFDump     = 0x300 // NLM_F_ROOT | NLM_F_MATCH

	nlmsgHdrLen      = 16
	inetDiagReqV2Len = 56
	inetDiagMsgLen   = 72
	rtattrHdrLen     = 4

	ipprotoTCP = 6
)

// Address families.
const (
	AFInet  = 2  // AF_INET
	AFInet6 = 10 // AF_INET6
)

// Attribute types of an inet_diag_msg (enum inet_diag_attr) and of a request.
const (
	attrInfo     = 2  // INET_DIAG_INFO: struct tcp_info
	attrVegas    = 3  // INET_DIAG_VEGASINFO
	attrCong     = 4  // INET_DIAG_CONG: congestion control name, NUL-terminated
	attrDCTCP    = 9  // INET_DIAG_DCTCPINFO
	attrBBR      = 16 // INET_DIAG_BBRINFO
	reqBytecode  = 1  // INET_DIAG_REQ_BYTECODE
	attrTypeMask = 0x3fff
)

// Ext is the idiag_ext bit set of a request: which attributes the kernel adds. Bit n asks
// for attribute n+1.
type Ext uint8

// Extensions.
const (
	ExtInfo  Ext = 1 << (attrInfo - 1)  // INET_DIAG_INFO
	ExtVegas Ext = 1 << (attrVegas - 1) // INET_DIAG_VEGASINFO; also returns BBRINFO and DCTCPINFO
	ExtCong  Ext = 1 << (attrCong - 1)  // INET_DIAG_CONG

	// ExtTCPSample is what a tcp_sample/1 record needs.
	ExtTCPSample = ExtInfo | ExtVegas | ExtCong
)

// State is a kernel TCP state (include/net/tcp_states.h).
type State uint8

// TCP states.
const (
	StateEstablished State = 1
	StateSynSent     State = 2
	StateSynRecv     State = 3
	StateFinWait1    State = 4
	StateFinWait2    State = 5
	StateTimeWait    State = 6
	StateClose       State = 7
	StateCloseWait   State = 8
	StateLastAck     State = 9
	StateListen      State = 10
	StateClosing     State = 11
	StateNewSynRecv  State = 12
)

// stateNames are the names ss prints (sstate_name[] in misc/ss.c).
var stateNames = [...]string{
	StateEstablished: "ESTAB",
	StateSynSent:     "SYN-SENT",
	StateSynRecv:     "SYN-RECV",
	StateFinWait1:    "FIN-WAIT-1",
	StateFinWait2:    "FIN-WAIT-2",
	StateTimeWait:    "TIME-WAIT",
	StateClose:       "UNCONN",
	StateCloseWait:   "CLOSE-WAIT",
	StateLastAck:     "LAST-ACK",
	StateListen:      "LISTEN",
	StateClosing:     "CLOSING",
	StateNewSynRecv:  "NEW-SYN-RECV",
}

// String returns the state as ss names it ("ESTAB", "CLOSE-WAIT", ...).
func (s State) String() string {
	if int(s) < len(stateNames) && stateNames[s] != "" {
		return stateNames[s]
	}
	return fmt.Sprintf("STATE-%d", uint8(s))
}

// StateSet is a bit set of states, as idiag_states carries it (bit n = state n).
type StateSet uint32

// AllStates selects every state.
const AllStates StateSet = 0xffffffff

// States returns the set of the given states.
func States(states ...State) StateSet {
	var s StateSet
	for _, st := range states {
		s |= 1 << st
	}
	return s
}

// Has reports whether st is in the set.
func (s StateSet) Has(st State) bool { return st < 32 && s&(1<<st) != 0 }

// ErrUnknownState is wrapped by ParseStates for a name it does not know.
var ErrUnknownState = errors.New("unknown TCP state")

// ParseStates reads state names as ss prints them ("ESTAB", "CLOSE-WAIT"), case-insensitive,
// also accepting ss's filter names ("established", "close-wait", "all"). An empty list is
// ESTAB alone.
func ParseStates(names []string) (StateSet, error) {
	if len(names) == 0 {
		return States(StateEstablished), nil
	}
	var set StateSet
	for _, n := range names {
		n = strings.ToUpper(strings.TrimSpace(n))
		switch n {
		case "ALL":
			set |= AllStates
			continue
		case "ESTABLISHED":
			n = "ESTAB"
		case "SYN-RECEIVED":
			n = "SYN-RECV"
		case "CLOSE", "CLOSED":
			n = "UNCONN"
		}
		found := false
		for st, name := range stateNames {
			if name != "" && name == n {
				set |= 1 << st
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("%w %q", ErrUnknownState, n)
		}
	}
	return set, nil
}

// Request is one SOCK_DIAG_BY_FAMILY dump request for TCP sockets.
type Request struct {
	Family     uint8    // AFInet or AFInet6
	States     StateSet // kernel-side state filter
	Ext        Ext      // attributes to return
	LocalPorts []uint16 // kernel-side filter on the local port (bytecode); empty: any
}

// FamilyName is "IPv4", "IPv6" or the number, for messages.
func FamilyName(f uint8) string {
	switch f {
	case AFInet:
		return "IPv4"
	case AFInet6:
		return "IPv6"
	}
	return fmt.Sprintf("family %d", f)
}

// Marshal returns the request as a netlink message with sequence number seq:
// nlmsghdr, inet_diag_req_v2 and, with LocalPorts, an INET_DIAG_REQ_BYTECODE attribute.
func (r Request) Marshal(seq uint32) []byte {
	bc := portBytecode(r.LocalPorts)
	n := nlmsgHdrLen + inetDiagReqV2Len
	if len(bc) > 0 {
		n += rtattrHdrLen + len(bc)
	}
	b := make([]byte, n)
	le := binary.LittleEndian // netlink headers are in host order; Linux/amd64 and arm64 are little-endian
	le.PutUint32(b[0:], uint32(n))
	le.PutUint16(b[4:], sockDiagByFamily)
	le.PutUint16(b[6:], nlmFRequest|nlmFDump)
	le.PutUint32(b[8:], seq)
	q := b[nlmsgHdrLen:]
	q[0] = r.Family
	q[1] = ipprotoTCP
	q[2] = uint8(r.Ext)
	le.PutUint32(q[4:], uint32(r.States))
	// q[8:56]: inet_diag_sockid, zero: no exact-socket match for a dump.
	if len(bc) > 0 {
		a := b[nlmsgHdrLen+inetDiagReqV2Len:]
		le.PutUint16(a[0:], uint16(rtattrHdrLen+len(bc)))
		le.PutUint16(a[2:], reqBytecode)
		copy(a[rtattrHdrLen:], bc)
	}
	return b
}

// inet_diag bytecode operations (enum in inet_diag.h).
const (
	bcJmp  = 1 // INET_DIAG_BC_JMP
	bcSGE  = 2 // INET_DIAG_BC_S_GE: local port >= the next op's "no"
	bcSLE  = 3 // INET_DIAG_BC_S_LE
	bcOpSz = 4 // struct inet_diag_bc_op {u8 code; u8 yes; u16 no}
)

// maxBytecodePorts bounds the filter so that every jump fits the op's u16 (and u8 yes).
const maxBytecodePorts = 1000

// portBytecode compiles "local port is one of ports" the way ss compiles an OR of
// conditions, because the kernel's audit (inet_diag_bc_audit) only accepts jumps that land
// on the path of "yes" branches from the start:
//
//	for each port p:  S_GE p (yes → S_LE, no → next alternative)
//	                  S_LE p (yes → JMP,  no → next alternative)
//	                  JMP (always "no": to the end = accept)   — not after the last port
//
// Running off the end (len == 0) accepts; jumping 4 bytes past it rejects. S_GE/S_LE exist
// in every kernel with inet_diag (S_EQ came later). More than maxBytecodePorts ports: no
// kernel filter (the sampler filters in user space anyway).
func portBytecode(ports []uint16) []byte {
	if len(ports) == 0 || len(ports) > maxBytecodePorts {
		return nil
	}
	const pred = 4 * bcOpSz // S_GE + port, S_LE + port
	n := len(ports)*pred + (len(ports)-1)*bcOpSz
	b := make([]byte, n)
	le := binary.LittleEndian
	op := func(off int, code, yes uint8, no uint16) {
		b[off], b[off+1] = code, yes
		le.PutUint16(b[off+2:], no)
	}
	off := 0
	for i, p := range ports {
		last := i == len(ports)-1
		// "no" from S_GE/S_LE skips the rest of this predicate and its JMP (or, for the last
		// predicate, overshoots the end by 4: reject).
		op(off, bcSGE, 2*bcOpSz, uint16(pred+bcOpSz))
		op(off+bcOpSz, 0, 0, p)
		op(off+2*bcOpSz, bcSLE, 2*bcOpSz, uint16(2*bcOpSz+bcOpSz))
		op(off+3*bcOpSz, 0, 0, p)
		off += pred
		if !last {
			rest := n - off - bcOpSz // bytes after the JMP
			op(off, bcJmp, bcOpSz, uint16(bcOpSz+rest))
			off += bcOpSz
		}
	}
	return b
}

// Header is what inet_diag_msg says about a socket, without its attributes.
type Header struct {
	Family    uint8
	State     State
	Timer     uint8
	Retrans   uint8
	Local     netip.AddrPort
	Peer      netip.AddrPort
	Interface uint32
	Cookie    uint64 // socket cookie: unique while the socket lives (not reused for a new socket)
	Expires   uint32 // ms
	RQueue    uint32 // ss Recv-Q (bytes not yet read; accept backlog for a listener)
	WQueue    uint32 // ss Send-Q (bytes not yet acked; max backlog for a listener)
	UID       uint32
	Inode     uint32
}

// DecodeError reports a message that is not a well-formed inet_diag_msg.
type DecodeError struct {
	What string
}

func (e *DecodeError) Error() string { return "netlink: decode: " + e.What }

func decodeErrorf(format string, args ...any) error {
	return &DecodeError{What: fmt.Sprintf(format, args...)}
}

// DecodeHeader reads the nlmsghdr and inet_diag_msg of one message; it is the cheap part
// of Decode, for filtering before the attributes are read.
func DecodeHeader(msg []byte) (Header, error) {
	body, err := messageBody(msg)
	if err != nil {
		return Header{}, err
	}
	return decodeInetDiagMsg(body)
}

// messageBody checks a SOCK_DIAG_BY_FAMILY message and returns its payload.
func messageBody(msg []byte) ([]byte, error) {
	if len(msg) < nlmsgHdrLen {
		return nil, decodeErrorf("message of %d bytes is shorter than nlmsghdr", len(msg))
	}
	le := binary.LittleEndian
	n := int(le.Uint32(msg[0:]))
	if n < nlmsgHdrLen || n > len(msg) {
		return nil, decodeErrorf("nlmsg_len %d does not fit a message of %d bytes", n, len(msg))
	}
	if t := le.Uint16(msg[4:]); t != sockDiagByFamily {
		return nil, decodeErrorf("message type %d is not SOCK_DIAG_BY_FAMILY", t)
	}
	return msg[nlmsgHdrLen:n], nil
}

func decodeInetDiagMsg(b []byte) (Header, error) {
	if len(b) < inetDiagMsgLen {
		return Header{}, decodeErrorf("inet_diag_msg of %d bytes, want %d", len(b), inetDiagMsgLen)
	}
	le := binary.LittleEndian
	h := Header{
		Family:  b[0],
		State:   State(b[1]),
		Timer:   b[2],
		Retrans: b[3],
	}
	id := b[4:52]
	sport := binary.BigEndian.Uint16(id[0:])
	dport := binary.BigEndian.Uint16(id[2:])
	switch h.Family {
	case AFInet:
		h.Local = netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[4:8])), sport)
		h.Peer = netip.AddrPortFrom(netip.AddrFrom4([4]byte(id[20:24])), dport)
	case AFInet6:
		h.Local = netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[4:20])), sport)
		h.Peer = netip.AddrPortFrom(netip.AddrFrom16([16]byte(id[20:36])), dport)
	default:
		return Header{}, decodeErrorf("address family %d is neither AF_INET nor AF_INET6", h.Family)
	}
	h.Interface = le.Uint32(id[36:])
	h.Cookie = uint64(le.Uint32(id[40:])) | uint64(le.Uint32(id[44:]))<<32
	h.Expires = le.Uint32(b[52:])
	h.RQueue = le.Uint32(b[56:])
	h.WQueue = le.Uint32(b[60:])
	h.UID = le.Uint32(b[64:])
	h.Inode = le.Uint32(b[68:])
	return h, nil
}
