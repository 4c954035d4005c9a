// Command closebench is the client and the judge of bench/collector/close_capture.sh.
//
//	closebench -mode fetch -targets 10.1.0.1:80,10.2.0.1:80 -weights 19,1 -n 10000 > conns.jsonl
//	closebench -mode judge -conns conns.jsonl -records out.jsonl -salt S -rate 0.1
//
// fetch (run in the client namespace) makes n HTTP/1.1 requests with `Connection: close`,
// one per connection, for files of mixed sizes (1 KiB … 1 MiB) from nginx, spread over the
// targets by weight (one target goes through a tbf bottleneck), and writes one JSON line per
// finished connection: the server's and the client's address and the bytes read.
//
// judge computes each connection's sampling decision the way the collector does (the salted
// 4-tuple hash) and compares with the collector's tcp_conn/1 (close capture) and
// tcp_sample/1 (poller) records.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ccab-dev/ccab/collectors/sampler"
)

// Sizes of the files nginx serves, and how often each is asked for.
var sizes = []struct{ n, weight int }{
	{1 << 10, 30}, {4 << 10, 15}, {16 << 10, 15}, {64 << 10, 15}, {256 << 10, 15}, {1 << 20, 10},
}

type conn struct {
	Server string `json:"server"`
	Client string `json:"client"`
	Size   int    `json:"size"`
	Read   int64  `json:"read"`
	Target int    `json:"target"`
}

func main() {
	mode := flag.String("mode", "fetch", "fetch or judge")
	targets := flag.String("targets", "", "fetch: comma-separated host:port of nginx")
	weights := flag.String("weights", "", "fetch: comma-separated weights of the targets (default equal)")
	n := flag.Int("n", 10000, "fetch: connections")
	workers := flag.Int("workers", 8, "fetch: concurrent connections")
	seconds := flag.Float64("seconds", 0, "fetch: spread the connections over this many seconds (0: as fast as they go)")
	conns := flag.String("conns", "", "judge: fetch's output")
	records := flag.String("records", "", "judge: the collector's JSON lines")
	salt := flag.String("salt", "", "judge: tcp_info salt")
	rate := flag.Float64("rate", 1, "judge: sample rate")
	flag.Parse()
	var err error
	switch *mode {
	case "fetch":
		err = fetch(strings.Split(*targets, ","), *weights, *n, *workers, *seconds)
	case "judge":
		err = judge(*conns, *records, *salt, *rate)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "closebench:", err)
		os.Exit(1)
	}
}

func fetch(targets []string, weights string, n, workers int, seconds float64) error {
	w := make([]int, len(targets))
	for i := range w {
		w[i] = 1
	}
	if weights != "" {
		for i, s := range strings.Split(weights, ",") {
			v, err := strconv.Atoi(s)
			if err != nil || i >= len(w) {
				return fmt.Errorf("bad -weights %q", weights)
			}
			w[i] = v
		}
	}
	pick := func(r *rand.Rand, ws []int) int {
		t := 0
		for _, v := range ws {
			t += v
		}
		x := r.IntN(t)
		for i, v := range ws {
			if x < v {
				return i
			}
			x -= v
		}
		return len(ws) - 1
	}
	sw := make([]int, len(sizes))
	for i, s := range sizes {
		sw[i] = s.weight
	}
	jobs := make(chan int)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed int
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for range jobs {
				ti := pick(r, w)
				size := sizes[pick(r, sw)].n
				if ti > 0 && size > 64<<10 { // keep the bottleneck's share small
					size = 64 << 10
				}
				c, err := get(targets[ti], size)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					c.Target = ti
					b, _ := json.Marshal(c)
					out.Write(append(b, '\n'))
				}
				mu.Unlock()
			}
		}(uint64(k))
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if seconds > 0 {
			if d := time.Until(start.Add(time.Duration(float64(i) / float64(n) * seconds * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "closebench: %d connections failed\n", failed)
	}
	return nil
}

func get(target string, size int) (conn, error) {
	c, err := net.DialTimeout("tcp4", target, 10*time.Second)
	if err != nil {
		return conn{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(120 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n", size); err != nil {
		return conn{}, err
	}
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		return conn{}, err
	}
	return conn{Server: c.RemoteAddr().String(), Client: c.LocalAddr().String(), Size: size, Read: n}, nil
}

type rec struct {
	Schema     string `json:"schema"`
	SockID     string `json:"sock_id"`
	BytesAcked *int64 `json:"bytes_acked"`
	CCSource   string `json:"cc_source"`
}

// judge: sock_id is keyed by nginx's socket cookie, which the client cannot know, so the
// close records are matched to the connections by count and by their final bytes (the
// multiset of bytes_acked against the multiset of client bytes + 1), and the poller's
// records to the close records by sock_id (one connection has one sock_id in both).
func judge(connsPath, recordsPath, salt string, rate float64) error {
	sel := sampler.NewSelection(salt, rate)
	total, sampled, sampledTbf := 0, 0, 0
	wantBytes := map[int64]int{}
	wantTbf := map[int64]int{}
	cf, err := os.Open(connsPath)
	if err != nil {
		return err
	}
	defer cf.Close()
	sc := bufio.NewScanner(cf)
	for sc.Scan() {
		var c conn
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return err
		}
		total++
		s, err1 := netip.ParseAddrPort(c.Server)
		cl, err2 := netip.ParseAddrPort(c.Client)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("bad address in %s", sc.Text())
		}
		if sel.Keep(s, cl) {
			sampled++
			wantBytes[c.Read+1]++
			if c.Target > 0 {
				sampledTbf++
				wantTbf[c.Read+1]++
			}
		}
	}
	closeIDs := map[string]int{}
	gotBytes := map[int64]int{}
	polled := map[string]bool{}
	ccSource := map[string]int{}
	rf, err := os.Open(recordsPath)
	if err != nil {
		return err
	}
	defer rf.Close()
	sc = bufio.NewScanner(rf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r rec
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		switch r.Schema {
		case "tcp_conn/1":
			closeIDs[r.SockID]++
			ccSource[r.CCSource]++
			if r.BytesAcked != nil {
				gotBytes[*r.BytesAcked]++
			}
		case "tcp_sample/1":
			polled[r.SockID] = true
		}
	}
	records, dups := 0, 0
	for _, k := range closeIDs {
		records += k
		dups += k - 1
	}
	matched, matchedTbf := 0, 0
	for v, k := range wantBytes {
		matched += min(k, gotBytes[v])
	}
	for v, k := range wantTbf {
		matchedTbf += min(k, gotBytes[v])
	}
	polledClosed := 0
	for id := range polled {
		if closeIDs[id] > 0 {
			polledClosed++
		}
	}
	fmt.Printf("  rate %.2g: %d connections closed, %d sampled by the hash (%d through the tbf bottleneck)\n", rate, total, sampled, sampledTbf)
	fmt.Printf("    close capture: captured %d of %d sampled connections (%d records, %d duplicate sock_ids); bytes matched (bytes_acked = client bytes + FIN) %d of %d (bottleneck sizes: %d of %d); cc_source %v\n",
		len(closeIDs), sampled, records, dups, matched, sampled, matchedTbf, sampledTbf, ccSource)
	fmt.Printf("    poller (same run, default interval): saw %d of the %d sampled connections (%d of them also in tcp_conn/1 under the same sock_id)\n",
		len(polled), sampled, polledClosed)
	return nil
}
