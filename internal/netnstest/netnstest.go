// Package netnstest builds throw-away network labs for tests: network namespaces joined by
// veth pairs, a tbf bottleneck, per-namespace sysctls, and sockets created inside a
// namespace. Everything it creates has a name unique to the test run and is removed in
// t.Cleanup, also when the test fails. Tests that use it are skipped, with the reason, when
// not run as root or when ip/tc are missing.
package netnstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/internal/netns"
)

// Require skips the test unless it runs as root with the given commands on PATH, and in
// `go test -short` (make test's unit tier): a test that builds network labs changes the host's
// kernel state, so it runs in make test-system (scripts/test-go.sh --kernel), one package at a
// time.
func Require(t testing.TB, cmds ...string) {
	t.Helper()
	SkipShort(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, veth pairs and qdiscs (runs as root in CI)")
	}
	for _, c := range append([]string{"ip"}, cmds...) {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s on PATH: %v", c, err)
		}
	}
}

// SkipShort skips a kernel test in `go test -short` (make test): kernel tests run in make
// test-system (scripts/test-go.sh --kernel).
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("a kernel test (namespaces, BPF, real packets): runs in make test-system, not with -short")
	}
}

// Tag returns a short random tag for names unique to this run (interface names are at
// most 15 bytes).
func Tag() string { return fmt.Sprintf("%05x", rand.IntN(1<<20)) }

// Cmd runs a command and fails the test with its output if it fails.
func Cmd(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Namespace creates the network namespace name with its loopback up; it is deleted at
// cleanup (its sockets and veth ends go with it).
func Namespace(t testing.TB, name string) string {
	t.Helper()
	Cmd(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("cleanup: ip netns delete %s: %v: %s", name, err, out)
		}
	})
	Cmd(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

// Veth joins namespaces a and b with a veth pair (ends named ifA in a and ifB in b) and
// gives them the addresses cidrA and cidrB (e.g. "10.199.7.1/24").
func Veth(t testing.TB, a, ifA, cidrA, b, ifB, cidrB string) {
	t.Helper()
	Cmd(t, "ip", "-n", a, "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b)
	Cmd(t, "ip", "-n", a, "addr", "add", cidrA, "dev", ifA)
	Cmd(t, "ip", "-n", b, "addr", "add", cidrB, "dev", ifB)
	Cmd(t, "ip", "-n", a, "link", "set", ifA, "up")
	Cmd(t, "ip", "-n", b, "link", "set", ifB, "up")
}

// Sysctl sets key=value in the init namespace and restores the old value at cleanup,
// unless someone else changed it meanwhile.
func Sysctl(t testing.TB, key, value string) {
	t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("sysctl %s: %v", key, err)
	}
	oldV := strings.TrimSpace(string(old))
	if oldV == value {
		return
	}
	Cmd(t, "sysctl", "-q", "-w", key+"="+value)
	t.Cleanup(func() {
		cur, err := os.ReadFile(path)
		if err == nil && strings.TrimSpace(string(cur)) != value {
			t.Logf("cleanup: %s changed meanwhile to %q; leaving it", key, strings.TrimSpace(string(cur)))
			return
		}
		restore := oldV
		if key == allowedCCKey {
			restore = stillAvailable(oldV)
		}
		if out, err := exec.Command("sysctl", "-q", "-w", key+"="+restore).CombinedOutput(); err != nil {
			t.Errorf("cleanup: restore %s=%q: %v: %s", key, restore, err, out)
		}
	})
}

const allowedCCKey = "net.ipv4.tcp_allowed_congestion_control"

// stillAvailable keeps the congestion controls of the space-separated list that the kernel
// still has: one another test registered (a BPF algorithm) may be gone by the time this test
// restores the allowed list, and the kernel refuses the whole list for one unknown name.
func stillAvailable(list string) string {
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return list
	}
	have := map[string]bool{}
	for _, name := range strings.Fields(string(avail)) {
		have[name] = true
	}
	var kept []string
	for _, name := range strings.Fields(list) {
		if have[name] {
			kept = append(kept, name)
		}
	}
	return strings.Join(kept, " ")
}

// Listen opens a TCP listener inside namespace ns.
func Listen(t testing.TB, ns, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := netns.Do(netns.Path(ns), func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Dial connects from inside namespace ns, with the socket's congestion control set to cc
// (TCP_CONGESTION) before connecting when cc is not "".
func Dial(t testing.TB, ns, network, addr, cc string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if cc != "" {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("TCP_CONGESTION %s: %w", cc, serr)
			}
			return nil
		}
	}
	var conn net.Conn
	err := netns.Do(netns.Path(ns), func() error {
		var err error
		conn, err = d.DialContext(context.Background(), network, addr)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %s with %s: %v", addr, ns, cc, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn.(*net.TCPConn)
}
