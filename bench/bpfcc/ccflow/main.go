// Command ccflow is the traffic side of bench/bpfcc/run.sh (run it with `ip netns exec`):
//
//	ccflow sink -listen IP:PORT
//	ccflow send -dst IP:PORT -flows bbr2,bbr2 -starts 0,2 -seconds 20 -skip 5
//	ccflow sign -seed contracts/vectors/test_ed25519_seed.hex -host H -cc bbr2 -generation 1
//
// send opens one connection per entry of -flows (its congestion control set with
// TCP_CONGESTION), starting each at its -starts offset, writes until -seconds, samples tcp_info
// every -sample-ms and prints one JSON object: per flow the goodput over [skip, seconds]
// (bytes acked, sender side), bytes sent and retransmitted over the whole flow, the RTT samples'
// median, and PROBE_RTT episodes — for ccab's BPF algorithms from their exported model (the
// pinned state map, looked up by the socket cookie), for the kernel's bbr from the window
// dropping to 4 packets (BBRv1's PROBE_RTT window).
// sign prints an assignment/1 signed with the test-only key of contracts/vectors (the bench's
// agent trusts only that key's public half).
package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ccab-dev/ccab/internal/netns"
	"github.com/ccab-dev/ccab/rollout/assignment"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ccflow sink|send|sign [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "", "sink: address")
	dst := fs.String("dst", "", "send: sink address")
	flows := fs.String("flows", "bbr", "send: congestion control per flow, comma separated")
	starts := fs.String("starts", "", "send: start offset per flow in seconds (default all 0)")
	secs := fs.Float64("seconds", 20, "send: end of the run, s")
	skip := fs.Float64("skip", 5, "send: goodput is counted from this second")
	sampleMs := fs.Int("sample-ms", 10, "send: tcp_info sampling period")
	bpfDir := fs.String("bpf-dir", bpfcc.DefaultDir, "send: where ccab's BPF algorithms are pinned")
	trace := fs.String("trace", "", "send: write one line per tcp_info sample (t, flow, cwnd, rtt, retransmitted bytes, model) to this file")
	nsName := fs.String("netns", "", "send: open the connections in this network namespace (run ccflow itself outside: `ip netns exec` hides /sys/fs/bpf)")
	seed := fs.String("seed", "", "sign: hex Ed25519 seed file")
	host := fs.String("host", "", "sign: host")
	cc := fs.String("cc", "", "sign: congestion control")
	gen := fs.Int64("generation", 1, "sign: generation")
	fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "sink":
		err = sink(*listen)
	case "send":
		err = send(*dst, strings.Split(*flows, ","), *starts, *secs, *skip, *sampleMs, *bpfDir, netns.Path(*nsName), *trace)
	case "sign":
		err = sign(*seed, *host, *cc, *gen)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ccflow:", err)
		os.Exit(1)
	}
}

func sink(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() { io.Copy(io.Discard, c); c.Close() }()
	}
}

func sign(seedFile, host, cc string, gen int64) error {
	b, err := os.ReadFile(seedFile)
	if err != nil {
		return err
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return fmt.Errorf("%s: not a hex Ed25519 seed", seedFile)
	}
	rec, _ := json.Marshal(map[string]any{"schema": assignment.Schema, "rollout_id": "bench-bpfcc", "generation": gen,
		"pop": "bench", "host": host, "arm": cc, "cc": cc, "qdisc": nil, "issued_at_ms": time.Now().UnixMilli()})
	signed, err := assignment.Sign(rec, ed25519.NewKeyFromSeed(seed))
	if err != nil {
		return err
	}
	fmt.Println(string(signed))
	return nil
}

type sample struct {
	tS      float64
	rttUs   uint32
	cwnd    uint32
	acked   uint64
	retrans uint64
	mode    string
}

type flowResult struct {
	CC             string    `json:"cc"`
	StartS         float64   `json:"start_s"`
	GoodputBps     float64   `json:"goodput_bps"`
	BytesSent      uint64    `json:"bytes_sent"`
	BytesRetrans   uint64    `json:"bytes_retrans"`
	RetransCounted uint64    `json:"bytes_retrans_counted"` // from the goodput window's start on
	RetransShare   float64   `json:"retrans_share"`
	RTTP50Ms       float64   `json:"rtt_p50_ms"`
	RTTP95Ms       float64   `json:"rtt_p95_ms"`
	ProbeRTTStarts []float64 `json:"probe_rtt_starts_s"`
	ProbeRTTFrom   string    `json:"probe_rtt_from"`
	Model          string    `json:"model,omitempty"`
	err            error
}

type flow struct {
	cc      string
	start   float64
	conn    *net.TCPConn
	fd      int
	cookie  uint64
	samples []sample
	mu      sync.Mutex
	state   *bpfcc.StateReader
	lastCnt uint32
	probes  []float64
	lastTI  *unix.TCPInfo
	model   string
}

func send(dst string, ccs []string, startsArg string, secs, skip float64, sampleMs int, bpfDir, nsPath, trace string) error {
	starts := make([]float64, len(ccs))
	if startsArg != "" {
		parts := strings.Split(startsArg, ",")
		if len(parts) != len(ccs) {
			return fmt.Errorf("-starts has %d entries for %d flows", len(parts), len(ccs))
		}
		for i, p := range parts {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				return fmt.Errorf("-starts: %v", err)
			}
			starts[i] = v
		}
	}
	loader := bpfcc.Loader{Dir: bpfDir}
	t0 := time.Now()
	fl := make([]*flow, len(ccs))
	var wg sync.WaitGroup
	errs := make(chan error, len(ccs))
	for i, cc := range ccs {
		f := &flow{cc: cc, start: starts[i]}
		fl[i] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(t0.Add(time.Duration(f.start * float64(time.Second)))))
			if err := f.run(dst, nsPath, t0, secs, loader); err != nil {
				errs <- err
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Duration(sampleMs) * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			now := time.Since(t0).Seconds()
			for _, f := range fl {
				f.sample(now)
			}
		}
	}
	close(errs)
	for err := range errs {
		return err
	}
	out := struct {
		Flows   []flowResult `json:"flows"`
		Seconds float64      `json:"seconds"`
		SkipS   float64      `json:"skip_s"`
	}{Seconds: secs, SkipS: skip}
	for _, f := range fl {
		out.Flows = append(out.Flows, f.result(secs, skip))
	}
	if trace != "" {
		if err := writeTrace(trace, fl); err != nil {
			return err
		}
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func (f *flow) run(dst, nsPath string, t0 time.Time, secs float64, loader bpfcc.Loader) error {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, f.cc) })
		if serr != nil {
			return fmt.Errorf("TCP_CONGESTION %s: %w", f.cc, serr)
		}
		return nil
	}}
	var c net.Conn
	err := netns.Do(nsPath, func() error {
		var err error
		c, err = d.Dial("tcp", dst)
		return err
	})
	if err != nil {
		return err
	}
	conn := c.(*net.TCPConn)
	raw, _ := conn.SyscallConn()
	f.mu.Lock()
	f.conn = conn
	raw.Control(func(fd uintptr) {
		f.fd = int(fd)
		f.cookie, _ = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	})
	if bpfcc.Offers(f.cc) && loader.Loaded(f.cc) {
		f.state, _ = loader.OpenState(f.cc)
	}
	f.mu.Unlock()
	buf := make([]byte, 128<<10)
	end := t0.Add(time.Duration(secs * float64(time.Second)))
	conn.SetWriteDeadline(end)
	for time.Now().Before(end) {
		if _, err := conn.Write(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				break
			}
			return err
		}
	}
	f.sample(time.Since(t0).Seconds())
	f.mu.Lock()
	f.conn = nil
	f.mu.Unlock()
	conn.Close()
	return nil
}

func (f *flow) sample(now float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn == nil {
		return
	}
	raw, err := f.conn.SyscallConn()
	if err != nil {
		return
	}
	var ti *unix.TCPInfo
	raw.Control(func(fd uintptr) { ti, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if ti == nil {
		return
	}
	smp := sample{tS: now, rttUs: ti.Rtt, cwnd: ti.Snd_cwnd, acked: ti.Bytes_acked, retrans: ti.Bytes_retrans}
	if f.state != nil {
		if st, ok, _ := f.state.Lookup(f.cookie); ok {
			smp.mode = fmt.Sprintf("%s bw=%.2f hi=%s lo=%s", st.ModeName(), float64(st.BwBps)*8/1e6, bound(st.InflightHi), bound(st.InflightLo))
			f.model = fmt.Sprintf("%s bw %.1f Mbit/s min_rtt %d us inflight_hi %s", st.ModeName(), float64(st.BwBps)*8/1e6, st.MinRTTUs, bound(st.InflightHi))
			if st.ProbeRTTCount > f.lastCnt {
				f.probes = append(f.probes, now)
				f.lastCnt = st.ProbeRTTCount
			}
		}
	}
	f.samples = append(f.samples, smp)
	f.lastTI = ti
}

// writeTrace writes every sample of every flow: seconds, flow index, cc, cwnd, RTT ms,
// retransmitted bytes so far, the BPF model's mode and bounds (if any).
func writeTrace(path string, fl []*flow) error {
	var b strings.Builder
	for i, f := range fl {
		for _, x := range f.samples {
			fmt.Fprintf(&b, "%.3f %d %s cwnd=%d rtt=%.1f retrans=%d %s\n", x.tS, i, f.cc, x.cwnd, float64(x.rttUs)/1000, x.retrans, x.mode)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func (f *flow) result(secs, skip float64) flowResult {
	r := flowResult{CC: f.cc, StartS: f.start}
	s := f.samples
	if len(s) == 0 || f.lastTI == nil {
		return r
	}
	// goodput: bytes acked between the first sample at/after skip (or the flow's start) and the last
	from := skip
	if f.start > from {
		from = f.start
	}
	i := sort.Search(len(s), func(i int) bool { return s[i].tS >= from })
	if i < len(s)-1 {
		a, b := s[i], s[len(s)-1]
		r.GoodputBps = float64(b.acked-a.acked) * 8 / (b.tS - a.tS)
	}
	r.BytesSent = f.lastTI.Bytes_sent
	r.BytesRetrans = f.lastTI.Bytes_retrans
	if i < len(s) {
		r.RetransCounted = r.BytesRetrans - s[i].retrans
	}
	if r.BytesSent > 0 {
		r.RetransShare = float64(r.BytesRetrans) / float64(r.BytesSent)
	}
	var rtts []float64
	for _, x := range s[i:] {
		rtts = append(rtts, float64(x.rttUs)/1000)
	}
	sort.Float64s(rtts)
	if len(rtts) > 0 {
		r.RTTP50Ms = rtts[len(rtts)/2]
		r.RTTP95Ms = rtts[len(rtts)*95/100]
	}
	if f.state != nil {
		r.ProbeRTTFrom = "model"
		r.ProbeRTTStarts = f.probes
		r.Model = f.model // the last one seen: the entry goes when the socket closes
	} else {
		// BBRv1's PROBE_RTT holds the window at 4 packets
		r.ProbeRTTFrom = "cwnd=4"
		in := false
		for _, x := range s {
			if x.cwnd <= 4 && !in && x.tS > f.start+1 {
				r.ProbeRTTStarts = append(r.ProbeRTTStarts, x.tS)
			}
			in = x.cwnd <= 4
		}
	}
	if r.ProbeRTTStarts == nil {
		r.ProbeRTTStarts = []float64{}
	}
	return r
}

func bound(v uint32) string {
	if v == bpfcc.Unbounded {
		return "none"
	}
	return strconv.Itoa(int(v))
}
