package ss

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// columns are the fixed columns at the start of a socket line.
type columns struct {
	netid        string // "" when ss printed no Netid column
	state        string // "" when ss printed no State column
	recvQ, sendQ int64
	local, peer  netip.AddrPort
	rest         []string // tokens after the peer address
}

// parseColumns reads [Netid] [State] Recv-Q Send-Q Local:Port Peer:Port from the tokens.
func parseColumns(tok []string) (columns, error) {
	var c columns
	i := 0
	if i < len(tok) && isNetid(tok[i]) {
		c.netid = tok[i]
		if c.netid != "tcp" {
			return c, errorf(ReasonNotTCP, "netid %q is not tcp", c.netid)
		}
		i++
	}
	if i < len(tok) && isState(tok[i]) {
		c.state = tok[i]
		i++
	}
	if len(tok)-i < 4 {
		return c, errorf(ReasonSocketLine, "%d columns where Recv-Q, Send-Q, local and peer address should be", len(tok)-i)
	}
	var err error
	if c.recvQ, err = parseCount(tok[i]); err != nil {
		return c, errorf(ReasonSocketLine, "Recv-Q: %w", err)
	}
	if c.sendQ, err = parseCount(tok[i+1]); err != nil {
		return c, errorf(ReasonSocketLine, "Send-Q: %w", err)
	}
	if c.local, err = parseAddrPort(tok[i+2]); err != nil {
		return c, errorf(ReasonAddress, "local address: %w", err)
	}
	if strings.HasSuffix(tok[i+3], ":*") {
		return c, errorf(ReasonListening, "peer %q is a wildcard: a listening socket, not a connection", tok[i+3])
	}
	if c.peer, err = parseAddrPort(tok[i+3]); err != nil {
		return c, errorf(ReasonAddress, "peer address: %w", err)
	}
	c.rest = tok[i+4:]
	return c, nil
}

// isNetid reports the Netid column ss prints when several socket kinds are listed.
func isNetid(s string) bool {
	switch s {
	case "tcp", "udp", "raw", "mptcp", "sctp", "dccp", "u_str", "u_dgr", "u_seq", "nl", "p_raw", "p_dgr", "v_str", "v_dgr", "xdp", "tipc":
		return true
	}
	return false
}

// isState reports a State column value: ss prints upper-case names such as ESTAB, SYN-SENT,
// FIN-WAIT-1, TIME-WAIT, UNCONN, CLOSE-WAIT, LAST-ACK, LISTEN, CLOSING.
func isState(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// parseAddrPort reads the forms ss prints: 10.77.0.1:9002, [2001:db8::1]:443,
// [::ffff:1.2.3.4]:443, [fe80::1]%eth0:22, 0.0.0.0%lo:53 and, before iproute2 4.x,
// unbracketed IPv6 such as face:face::1:22.
func parseAddrPort(s string) (netip.AddrPort, error) {
	colon := strings.LastIndexByte(s, ':')
	if colon < 0 {
		return netip.AddrPort{}, fmt.Errorf("%q has no port", s)
	}
	host, portText := s[:colon], s[colon+1:]
	if host == "*" || portText == "*" {
		return netip.AddrPort{}, fmt.Errorf("%q is a wildcard", s)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		// ss without -n prints a service name (https, http-alt, ...) for a known port
		p, ok := serviceNames[portText]
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("port of %q is neither a number nor a known service name (run ss with -n)", s)
		}
		port = uint64(p)
	}
	var zone string
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return netip.AddrPort{}, fmt.Errorf("%q lacks ']'", s)
		}
		after := host[end+1:]
		host = host[1:end]
		if after != "" {
			if after[0] != '%' {
				return netip.AddrPort{}, fmt.Errorf("unexpected %q after ']' in %q", after, s)
			}
			zone = after[1:]
		}
	}
	if h, z, ok := strings.Cut(host, "%"); ok {
		host, zone = h, z
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address of %q: %w", s, err)
	}
	if zone != "" && addr.Is6() {
		addr = addr.WithZone(zone)
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
