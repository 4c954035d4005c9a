package sockpolicy

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccab-dev/ccab/internal/cgrouptest"
	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/internal/netnstest"
)

// testCgroup is a cgroup of this test's own (never the root one).
func testCgroup(t *testing.T) string { return cgrouptest.Dir(t, "segments-sockpolicy") }

func attach(t *testing.T, opt Options) *Enforcer {
	t.Helper()
	cg := testCgroup(t)
	e, err := Attach(cg, opt)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Detach(); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return e
}

func randPrefix(r *rand.Rand) netip.Prefix {
	if r.IntN(2) == 0 {
		var a [4]byte
		for i := range a {
			a[i] = byte(r.IntN(16)) // a small space, so prefixes nest and overlap
		}
		return netip.PrefixFrom(netip.AddrFrom4(a), 16+r.IntN(17)).Masked()
	}
	var a [16]byte
	a[0] = 0x20
	for i := 1; i < 16; i++ {
		a[i] = byte(r.IntN(16))
	}
	return netip.PrefixFrom(netip.AddrFrom16(a), 16+r.IntN(113)).Masked()
}

func randAddr(r *rand.Rand, near []Rule) netip.Addr {
	p := near[r.IntN(len(near))].Prefix
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ { // random host bits inside a known prefix
		if r.IntN(2) == 1 {
			b[i/8] |= 0x80 >> (i % 8)
		}
	}
	a, _ := netip.AddrFromSlice(b)
	if r.IntN(2) == 0 { // or anywhere in the small space
		a = randPrefix(r).Addr()
	}
	return a
}

// The kernel's LPM trie (the program's own lookup) agrees with an independent longest-
// prefix matcher over net/netip on random nested IPv4 and IPv6 prefixes and addresses.
func TestKernelLookupMatchesNetip(t *testing.T) {
	e := attach(t, Options{})
	r := rand.New(rand.NewPCG(32, 1))
	ccs := []string{"bbr", "cubic", "reno", "ccab_vivace"}
	for round := range 3 {
		p := Policy{Generation: uint64(100 + round)}
		seen := map[netip.Prefix]bool{}
		for len(p.Rules) < 300 {
			pr := randPrefix(r)
			if seen[pr] {
				continue
			}
			seen[pr] = true
			p.Rules = append(p.Rules, Rule{Prefix: pr, CC: ccs[r.IntN(len(ccs))]})
		}
		if err := e.Apply(p); err != nil {
			t.Fatal(err)
		}
		matched := 0
		for range 3000 {
			addr := randAddr(r, p.Rules)
			cc, gen, found, err := e.Lookup(addr)
			if err != nil {
				t.Fatal(err)
			}
			// the independent matcher: every prefix that contains addr, the longest wins
			var want *Rule
			for i, rule := range p.Rules {
				if rule.Prefix.Addr().Is4() == addr.Is4() && rule.Prefix.Contains(addr) &&
					(want == nil || rule.Prefix.Bits() > want.Prefix.Bits()) {
					want = &p.Rules[i]
				}
			}
			if (want != nil) != found || (want != nil && (want.CC != cc || gen != p.Generation)) {
				t.Fatalf("round %d, %s: kernel found=%v cc=%q gen=%d; netip wants %+v", round, addr, found, cc, gen, want)
			}
			if m, ok := p.Match(addr); ok != found || (ok && m.CC != cc) {
				t.Fatalf("%s: Policy.Match %+v %v disagrees with the kernel %q %v", addr, m, ok, cc, found)
			}
			if found {
				matched++
			}
		}
		if matched < 1000 || matched > 2900 {
			t.Fatalf("round %d: %d of 3000 addresses matched: the test does not exercise both outcomes", round, matched)
		}
	}
}

// A new policy replaces the old one whole; Current reads back what was applied; rollback
// (Clear) empties it.
func TestApplySwapsAndClearEmpties(t *testing.T) {
	e := attach(t, Options{})
	if p, err := e.Current(); err != nil || len(p.Rules) != 0 {
		t.Fatalf("fresh: %+v %v", p, err)
	}
	p1 := Policy{Generation: 5, Rules: []Rule{
		{netip.MustParsePrefix("10.201.0.0/16"), "reno"},
		{netip.MustParsePrefix("2001:db8:201::/48"), "reno"},
	}}
	if err := e.Apply(p1); err != nil {
		t.Fatal(err)
	}
	got, err := e.Current()
	if err != nil || fmt.Sprint(got.Rules) != fmt.Sprint(p1.Sorted()) || got.Generation != 5 {
		t.Fatalf("after apply: %+v %v, want %+v", got, err, p1)
	}
	p2 := Policy{Generation: 6, Rules: []Rule{{netip.MustParsePrefix("10.202.0.0/16"), "bbr"}}}
	if err := e.Apply(p2); err != nil {
		t.Fatal(err)
	}
	if _, _, found, _ := e.Lookup(netip.MustParseAddr("10.201.3.4")); found {
		t.Fatal("a prefix of the previous policy survived the swap")
	}
	if cc, gen, found, _ := e.Lookup(netip.MustParseAddr("10.202.3.4")); !found || cc != "bbr" || gen != 6 {
		t.Fatalf("new policy: %q %d %v", cc, gen, found)
	}
	if err := e.Clear(); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Current(); err != nil || len(got.Rules) != 0 {
		t.Fatalf("after rollback the policy holds %+v (%v)", got, err)
	}
	if _, _, found, _ := e.Lookup(netip.MustParseAddr("10.202.3.4")); found {
		t.Fatal("rollback left a prefix in force")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		p    Policy
		want string
	}{
		{Policy{Rules: []Rule{{netip.MustParsePrefix("10.0.0.1/8"), "bbr"}}}, "bits set past its length"},
		{Policy{Rules: []Rule{{netip.MustParsePrefix("10.0.0.0/8"), "BBR"}}}, "not a kernel name"},
		{Policy{Rules: []Rule{{netip.MustParsePrefix("10.0.0.0/8"), "bbr"}, {netip.MustParsePrefix("::ffff:10.0.0.0/104"), "reno"}}}, "appears twice"},
		{Policy{Rules: []Rule{{netip.Prefix{}, "bbr"}}}, "invalid prefix"},
	} {
		if err := c.p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
}

// serverEnv makes the test binary a server (TestHelperServer) instead of running tests.
const serverEnv = "CCAB_SOCKPOLICY_TEST_SERVER"

// TestHelperServer is not a test: run by TestRealSockets inside the test cgroup and the
// server namespace, it accepts connections and answers each line with the connection's
// congestion control and socket cookie.
func TestHelperServer(t *testing.T) {
	addr := os.Getenv(serverEnv)
	if addr == "" {
		t.Skip("helper process for TestRealSockets")
	}
	ln, err := net.Listen("tcp", addr) // dual stack: IPv4 peers arrive as ::ffff:a.b.c.d
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(0)
		}
		go func(c net.Conn) {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				raw, _ := c.(*net.TCPConn).SyscallConn()
				var cc string
				var cookie uint64
				raw.Control(func(fd uintptr) {
					cc, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
					cookie, _ = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
				})
				fmt.Fprintf(c, "%s %d\n", strings.TrimRight(cc, "\x00"), cookie)
			}
		}(c)
	}
}

type probe struct {
	conn *net.TCPConn
	rd   *bufio.Reader
}

func (p *probe) ask(t *testing.T) (string, uint64) {
	t.Helper()
	p.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.conn.Write([]byte("?\n")); err != nil {
		t.Fatal(err)
	}
	line, err := p.rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(line)
	cookie, _ := strconv.ParseUint(f[1], 10, 64)
	return f[0], cookie
}

// Real sockets: a server process in the test cgroup accepts connections from a client
// namespace whose addresses fall in a "mobile" and a "fixed" prefix (IPv4 and IPv6). With
// mobile → reno in force, mobile connections run reno and carry the policy generation; fixed
// ones keep the namespace's default. After rollback new mobile connections keep the default
// and the connection opened before it keeps reno.
func TestRealSockets(t *testing.T) {
	netnstest.Require(t)
	dir := t.TempDir() // the pins live on a private bpffs mounted here
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Skipf("cannot mount a bpffs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	pin := filepath.Join(dir, "ccab")
	cg := testCgroup(t)
	e, err := Attach(cg, Options{PinDir: pin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Detach() })

	tag := netnstest.Tag()
	srv := netnstest.Namespace(t, "segments-s"+tag)
	cli := netnstest.Namespace(t, "segments-c"+tag)
	netnstest.Veth(t, srv, "s"+tag, "10.200.0.1/8", cli, "c"+tag, "10.201.0.2/8")
	netnstest.Cmd(t, "ip", "-n", cli, "addr", "add", "10.202.0.2/8", "dev", "c"+tag)
	netnstest.Cmd(t, "ip", "-n", srv, "addr", "add", "fd00:200::1/16", "dev", "s"+tag, "nodad")
	netnstest.Cmd(t, "ip", "-n", cli, "addr", "add", "fd00:201::2/16", "dev", "c"+tag, "nodad")
	netnstest.Cmd(t, "ip", "-n", cli, "addr", "add", "fd00:202::2/16", "dev", "c"+tag, "nodad")
	def := strings.TrimSpace(netnstest.Cmd(t, "ip", "netns", "exec", srv, "sysctl", "-n", "net.ipv4.tcp_congestion_control"))
	treat := "reno" // always allowed; the default here is bbr, but never assume it
	if def == "reno" {
		treat = "bbr"
	}

	// the server: this test binary, started inside the cgroup (clone3 CLONE_INTO_CGROUP)
	cgfd, err := unix.Open(cg, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cgfd)
	cmd := exec.Command("ip", "netns", "exec", srv, os.Args[0], "-test.run=^TestHelperServer$")
	cmd.Env = append(os.Environ(), serverEnv+"=:7901")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(line, "ready") {
		t.Fatalf("server: %q", line)
	}

	dial := func(from, to string) *probe {
		t.Helper()
		d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		var c net.Conn
		if err := netns.Do(netns.Path(cli), func() error {
			var err error
			c, err = d.Dial("tcp", net.JoinHostPort(to, "7901"))
			return err
		}); err != nil {
			t.Fatalf("dial from %s: %v", from, err)
		}
		t.Cleanup(func() { c.Close() })
		return &probe{conn: c.(*net.TCPConn), rd: bufio.NewReader(c)}
	}
	const gen = 41
	if err := e.Apply(Policy{Generation: gen, Rules: []Rule{
		{netip.MustParsePrefix("10.201.0.0/16"), treat},
		{netip.MustParsePrefix("fd00:201::/32"), treat},
	}}); err != nil {
		t.Fatal(err)
	}
	conns, err := OpenConns(pin) // the collector's view
	if err != nil {
		t.Fatal(err)
	}
	defer conns.Close()
	cases := []struct {
		from, to string
		mobile   bool
	}{
		{"10.201.0.2", "10.200.0.1", true},
		{"10.202.0.2", "10.200.0.1", false},
		{"fd00:201::2", "fd00:200::1", true},
		{"fd00:202::2", "fd00:200::1", false},
	}
	var keep *probe
	for _, c := range cases {
		p := dial(c.from, c.to)
		cc, cookie := p.ask(t)
		rec, found, err := conns.Lookup(cookie)
		if err != nil {
			t.Fatal(err)
		}
		if c.mobile {
			if cc != treat || !found || rec.Generation != gen || rec.Result != 0 {
				t.Errorf("mobile %s: cc %s (want %s), record %+v found=%v", c.from, cc, treat, rec, found)
			}
			if keep == nil {
				keep = p
			}
		} else if cc != def || found {
			t.Errorf("fixed %s: cc %s (want the default %s), record %+v found=%v", c.from, cc, def, rec, found)
		}
	}
	if err := e.Clear(); err != nil {
		t.Fatal(err)
	}
	if cc, _ := dial("10.201.0.2", "10.200.0.1").ask(t); cc != def {
		t.Errorf("after rollback a new mobile connection runs %s, want the default %s", cc, def)
	}
	if cc, _ := keep.ask(t); cc != treat {
		t.Errorf("after rollback the existing mobile connection runs %s, want it to keep %s", cc, treat)
	}
	st, err := e.Stats()
	if err != nil || st.Matched != 2 || st.SetOK != 2 || st.SetFailed != 0 {
		t.Errorf("stats %+v %v, want 2 matched and set", st, err)
	}
}

// A program pinned by an older agent (its trie 1000 entries, where this build's is 2^20): the
// new agent reuses it, its policies get tries of the old size (the kernel takes no other), and
// a policy larger than that is refused with the fix, the policy in force left as it was.
func TestPinnedOlderProgramKeepsItsTrieSize(t *testing.T) {
	netnstest.Require(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Skipf("cannot mount a bpffs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	pin, cg := filepath.Join(dir, "ccab"), testCgroup(t)
	old, err := attachSized(cg, Options{PinDir: pin}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Apply(Policy{Generation: 1, Rules: []Rule{{netip.MustParsePrefix("10.1.0.0/16"), "reno"}}}); err != nil {
		t.Fatal(err)
	}
	old.Close() // the old agent exits; the program stays pinned
	e, err := Attach(cg, Options{PinDir: pin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Detach() })
	policy := func(n int) Policy {
		p := Policy{Generation: uint64(n)}
		for i := range n {
			p.Rules = append(p.Rules, Rule{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24), "reno"})
		}
		return p
	}
	if err := e.Apply(policy(900)); err != nil {
		t.Fatalf("900 prefixes in the old program's trie: %v", err)
	}
	if err := e.Apply(policy(1500)); err == nil || !strings.Contains(err.Error(), "holds 1000") ||
		!strings.Contains(err.Error(), "older agent") {
		t.Fatalf("1500 prefixes: %v", err)
	}
	if cur, err := e.Current(); err != nil || cur.Generation != 900 || len(cur.Rules) != 900 {
		t.Fatalf("after the refusal: generation %d, %d rules, %v", cur.Generation, len(cur.Rules), err)
	}
}
