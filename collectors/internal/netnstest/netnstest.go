// Package netnstest forwards to github.com/ccab-dev/ccab/internal/netnstest (throw-away
// network labs for tests), which the rollout agent's tests share; see there.
package netnstest

import (
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	shared "github.com/ccab-dev/ccab/internal/netnstest"
)

// Require skips the test unless it runs as root with the given commands on PATH.
func Require(t testing.TB, cmds ...string) { t.Helper(); shared.Require(t, cmds...) }

// Tag returns a short random tag for names unique to this run.
func Tag() string { return shared.Tag() }

// Cmd runs a command and fails the test with its output if it fails.
func Cmd(t testing.TB, name string, args ...string) string {
	t.Helper()
	return shared.Cmd(t, name, args...)
}

// Namespace creates the network namespace name with its loopback up; deleted at cleanup.
func Namespace(t testing.TB, name string) string { t.Helper(); return shared.Namespace(t, name) }

// Veth joins namespaces a and b with a veth pair.
func Veth(t testing.TB, a, ifA, cidrA, b, ifB, cidrB string) {
	t.Helper()
	shared.Veth(t, a, ifA, cidrA, b, ifB, cidrB)
}

// Sysctl sets key=value in the init namespace and restores the old value at cleanup.
func Sysctl(t testing.TB, key, value string) { t.Helper(); shared.Sysctl(t, key, value) }

// Listen opens a TCP listener inside namespace ns.
func Listen(t testing.TB, ns, network, addr string) net.Listener {
	t.Helper()
	return shared.Listen(t, ns, network, addr)
}

// Dial connects from inside namespace ns, with the socket's congestion control set to cc.
func Dial(t testing.TB, ns, network, addr, cc string) *net.TCPConn {
	t.Helper()
	return shared.Dial(t, ns, network, addr, cc)
}

// Cookie returns the kernel's socket cookie of c (SO_COOKIE): what sock_diag reports as
// idiag_cookie and what keys sock_id together with the network namespace.
func Cookie(t testing.TB, c syscall.Conn) uint64 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatalf("SO_COOKIE: %v", serr)
	}
	return v
}
