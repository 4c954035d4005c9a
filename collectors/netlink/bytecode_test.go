package netlink

import (
	"context"
	"encoding/binary"
	"net"
	"slices"
	"testing"
)

// bcAudit and bcRun transcribe the kernel's inet_diag_bc_audit, valid_cc and
// inet_diag_bc_run (net/ipv4/inet_diag.c) for the ops portBytecode emits, so the program's
// acceptance by the kernel is checked without a kernel.
func bcAudit(bc []byte) bool {
	le := binary.LittleEndian
	validCC := func(cc int) bool {
		b, l := bc, len(bc)
		for l >= 0 {
			if cc > l {
				return false
			}
			if cc == l {
				return true
			}
			yes := int(b[1])
			if yes < 4 || yes&3 != 0 {
				return false
			}
			l -= yes
			b = b[yes:]
		}
		return false
	}
	b, l := bc, len(bc)
	for l > 0 {
		minLen := bcOpSz
		code, yes, no := b[0], int(b[1]), int(le.Uint16(b[2:]))
		switch code {
		case bcSGE, bcSLE:
			minLen += bcOpSz
			if l < minLen {
				return false
			}
		case bcJmp:
		default:
			return false
		}
		if no < minLen || no > l+4 || no&3 != 0 {
			return false
		}
		if no < l && !validCC(l-no) {
			return false
		}
		if yes < minLen || yes > l+4 || yes&3 != 0 {
			return false
		}
		b = b[min(yes, len(b)):]
		l -= yes
	}
	return l == 0
}

func bcRun(bc []byte, sport uint16) bool {
	le := binary.LittleEndian
	off, l := 0, len(bc)
	for l > 0 {
		code, yes, no := bc[off], int(bc[off+1]), int(le.Uint16(bc[off+2:]))
		ok := true
		switch code {
		case bcJmp:
			ok = false
		case bcSGE:
			ok = sport >= le.Uint16(bc[off+6:])
		case bcSLE:
			ok = sport <= le.Uint16(bc[off+6:])
		}
		if ok {
			off, l = off+yes, l-yes
		} else {
			off, l = off+no, l-no
		}
	}
	return l == 0
}

func TestPortBytecode(t *testing.T) {
	for _, ports := range [][]uint16{{443}, {80, 443}, {1, 22, 443, 8443, 65535}, {443, 443}} {
		bc := portBytecode(ports)
		if !bcAudit(bc) {
			t.Errorf("%v: the kernel's audit would reject % x", ports, bc)
			continue
		}
		for _, p := range []uint16{0, 1, 2, 21, 22, 23, 80, 442, 443, 444, 8443, 65534, 65535} {
			if got, want := bcRun(bc, p), slices.Contains(ports, p); got != want {
				t.Errorf("%v: port %d accepted=%v, want %v", ports, p, got, want)
			}
		}
	}
	if portBytecode(nil) != nil || portBytecode(make([]uint16, maxBytecodePorts+1)) != nil {
		t.Error("no ports, or too many, must mean no kernel filter")
	}
}

// The kernel accepts the bytecode and filters by local port (any namespace, no privilege).
func TestDumpLocalPortsLive(t *testing.T) {
	var lns []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Skipf("no loopback: %v", err)
		}
		defer ln.Close()
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	port := func(i int) uint16 { return uint16(lns[i].Addr().(*net.TCPAddr).Port) }
	want := []uint16{port(0), port(2)}
	conn, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	seen := map[uint16]int{}
	_, err = conn.Dump(context.Background(), Request{Family: AFInet, States: AllStates, Ext: ExtInfo, LocalPorts: want},
		func(msg []byte) error {
			h, err := DecodeHeader(msg)
			if err != nil {
				t.Fatal(err)
			}
			seen[h.Local.Port()]++
			return nil
		})
	if err != nil {
		t.Fatalf("dump with port bytecode: %v", err)
	}
	for p := range seen {
		if !slices.Contains(want, p) {
			t.Errorf("local port %d passed the filter %v", p, want)
		}
	}
	// Each wanted port: its listener and the accepted socket (the client's local port is ephemeral).
	for _, p := range want {
		if seen[p] < 2 {
			t.Errorf("port %d: %d sockets, want the listener and the accepted connection", p, seen[p])
		}
	}
}
