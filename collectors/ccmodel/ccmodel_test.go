package ccmodel

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/closecap"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
	"github.com/ccab-dev/ccab/internal/netnstest"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
	"golang.org/x/sys/unix"
)

// The poller's records of real sockets: a connection running ccab's BPF bbr2 (registered under
// a unique name, pinned in a directory of its own) is recorded as cc_impl ccab-bpf with its
// exported model in bbr_bw_bps / bbr_min_rtt_us and cc_version 2; a cubic one as kernel, with no
// BBR fields; the policy generation comes from the policy lookup when it set the cc. Encoded,
// the record carries both optional fields.
func TestSamplesOfBPFAndKernelCC(t *testing.T) {
	netnstest.SkipShort(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (bpf, network namespaces)")
	}
	netnstest.Require(t, "tc")
	tag := netnstest.Tag()
	l := bpfcc.Loader{Dir: "/sys/fs/bpf/ccab-cc-test-" + tag, UsersDir: t.TempDir(), As: map[string]string{"bbr2": "bbr2t" + tag}}
	if err := l.Check(); err != nil {
		t.Fatalf("this kernel should run BPF congestion controls: %v", err)
	}
	if loaded, err := l.Use("bbr2", "ccmodel-test"); err != nil || !loaded {
		t.Fatalf("Use: loaded=%v err=%v", loaded, err)
	}
	t.Cleanup(func() {
		if err := l.Unload("bbr2"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		os.Remove(l.Dir)
	})
	kn := "bbr2t" + tag

	snd := netnstest.Namespace(t, "ccm-s-"+tag)
	rcv := netnstest.Namespace(t, "ccm-r-"+tag)
	subnet := fmt.Sprintf("10.197.%d", 1+rand.IntN(254))
	netnstest.Veth(t, snd, "ms"+tag, subnet+".1/24", rcv, "mr"+tag, subnet+".2/24")
	netnstest.Cmd(t, "tc", "-n", snd, "qdisc", "add", "dev", "ms"+tag, "root", "tbf", "rate", "40mbit", "burst", "16k", "limit", "60000")

	ccs := []string{kn, "cubic"}
	var conns []*net.TCPConn
	var received sync.WaitGroup
	for i, cc := range ccs {
		addr := fmt.Sprintf("%s.2:%d", subnet, 5101+i)
		ln := netnstest.Listen(t, rcv, "tcp4", addr)
		received.Add(1)
		go func() {
			defer received.Done()
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.Copy(io.Discard, c)
		}()
		conns = append(conns, netnstest.Dial(t, snd, "tcp4", addr, cc))
	}
	var stop atomic.Bool
	var sent sync.WaitGroup
	chunk := make([]byte, 64<<10)
	for _, c := range conns {
		sent.Add(1)
		go func() {
			defer sent.Done()
			for !stop.Load() {
				c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				c.Write(chunk)
			}
		}()
	}
	defer func() {
		stop.Store(true)
		sent.Wait()
		for _, c := range conns {
			c.Close()
		}
		received.Wait()
	}()
	bpfCookie := socketCookie(t, conns[0])

	e := &Enricher{Impl: closecap.NewImplCache(l.Dir), Loader: l,
		Policy: func(cookie uint64) (uint64, bool, bool) { return 7, true, cookie == bpfCookie }}
	defer e.Close()
	got := map[string]record.TCPSample{}
	smp, err := sampler.New(sampler.Config{Salt: "ccm-" + tag, Namespaces: []string{snd}, KeepClosed: -1,
		Observe: func(_, cookie uint64, r *record.TCPSample) { e.Sample(cookie, r, time.Now()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	// past STARTUP's first rounds (their rate samples may be bursts), then: the model is exported
	// at round starts once the socket has a cookie (the dump gives it one): tick until the bbr2
	// record carries it, 5 s at most
	time.Sleep(time.Second)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		recs, _, err := smp.Tick(context.Background(), record.Meta{Pop: "t", Host: "h", Kernel: "k"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			got[r.CC] = r
		}
		if r, ok := got[kn]; ok && r.BBRBwBps != nil {
			break
		}
	}
	b, c := got[kn], got["cubic"]
	if b.CCImpl != record.CCImplBPF || b.CCVersion == nil || *b.CCVersion != 2 || b.BBRBwBps == nil || *b.BBRBwBps <= 0 ||
		*b.BBRBwBps > 200e9 || b.BBRMinRTTUs == nil || *b.BBRMinRTTUs <= 0 || b.BBRPacingGain != nil ||
		b.PolicyGeneration == nil || *b.PolicyGeneration != 7 {
		t.Errorf("%s record: impl %q version %v bw %v min_rtt %v pacing_gain %v policy_generation %v", kn, b.CCImpl,
			deref(b.CCVersion), deref(b.BBRBwBps), deref(b.BBRMinRTTUs), b.BBRPacingGain, deref(b.PolicyGeneration))
	}
	if c.CCImpl != record.CCImplKernel || c.BBRBwBps != nil || c.CCVersion != nil || c.PolicyGeneration != nil {
		t.Errorf("cubic record: impl %q bw %v version %v policy_generation %v", c.CCImpl, deref(c.BBRBwBps), deref(c.CCVersion), deref(c.PolicyGeneration))
	}
	enc, err := record.AppendTCP(nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"cc_impl":"ccab-bpf"`, `"policy_generation":7}`, `"cc_version":2,`} {
		if !contains(enc, want) {
			t.Errorf("encoded record lacks %s: %s", want, enc)
		}
	}
}

func socketCookie(t *testing.T, c *net.TCPConn) uint64 {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v uint64
	var serr error
	raw.Control(func(fd uintptr) { v, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE) })
	if serr != nil {
		t.Fatal(serr)
	}
	return v
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
