package netlink

import (
	"bytes"
	"encoding/binary"
)

// Socket is one decoded SOCK_DIAG_BY_FAMILY message: the inet_diag_msg header and the
// attributes a tcp_sample/1 record needs.
type Socket struct {
	Header
	Info    *TCPInfo // INET_DIAG_INFO; nil when the kernel sent none (TIME-WAIT, or not asked)
	CC      string   // INET_DIAG_CONG; "" when absent
	BBR     *BBRInfo // INET_DIAG_BBRINFO; nil when absent
	BadAttr string   // an attribute that was present but malformed (ignored), for counting
}

// Decode reads one message of a sock_diag dump: nlmsghdr, inet_diag_msg and its rtattrs.
// Unknown attributes are skipped. A malformed attribute list is an error (*DecodeError);
// a BBRINFO shorter than the v1 layout is ignored and named in BadAttr.
func Decode(msg []byte) (Socket, error) {
	body, err := messageBody(msg)
	if err != nil {
		return Socket{}, err
	}
	var s Socket
	if s.Header, err = decodeInetDiagMsg(body); err != nil {
		return Socket{}, err
	}
	attrs := body[inetDiagMsgLen:]
	le := binary.LittleEndian
	for len(attrs) >= rtattrHdrLen {
		n := int(le.Uint16(attrs[0:]))
		typ := le.Uint16(attrs[2:]) & attrTypeMask
		if n < rtattrHdrLen || n > len(attrs) {
			return Socket{}, decodeErrorf("attribute type %d has length %d with %d bytes left", typ, n, len(attrs))
		}
		p := attrs[rtattrHdrLen:n]
		switch typ {
		case attrInfo:
			info := ParseTCPInfo(p)
			s.Info = &info
		case attrCong:
			if i := bytes.IndexByte(p, 0); i >= 0 {
				p = p[:i]
			}
			s.CC = string(p)
		case attrBBR:
			if b, ok := parseBBRInfo(p); ok {
				s.BBR = &b
			} else {
				s.BadAttr = "bbr_info"
			}
		}
		adv := (n + 3) &^ 3 // RTA_ALIGN
		if adv > len(attrs) {
			adv = len(attrs)
		}
		attrs = attrs[adv:]
	}
	return s, nil
}
