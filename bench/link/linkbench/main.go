// Command linkbench is the traffic side of bench/link/run.sh (run it with `ip netns exec`):
//
//	linkbench sink -listen IP:PORT             TCP sink (side B)
//	linkbench tcp  -dst IP:PORT -seconds 15 -skip 5 -cc bbr -streams 1
//	linkbench rtt  -dst IP -count 300 -interval-ms 10
//
// tcp sends for -seconds, the sink counts payload bytes received after -skip seconds and
// returns them; tcp prints {"goodput_bps":...}. rtt sends ICMP echo requests and prints the
// RTT distribution in milliseconds.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: linkbench sink|tcp|rtt [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	listen := fs.String("listen", "", "sink: address")
	dst := fs.String("dst", "", "tcp/rtt: sink address")
	secs := fs.Float64("seconds", 15, "tcp: transfer duration, s")
	skip := fs.Float64("skip", 5, "tcp: seconds not counted at the start (slow start)")
	cc := fs.String("cc", "bbr", "tcp: congestion control")
	streams := fs.Int("streams", 1, "tcp: parallel connections")
	count := fs.Int("count", 300, "rtt: probes")
	interval := fs.Float64("interval-ms", 10, "rtt: gap between probes, ms")
	fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "sink":
		err = sink(*listen)
	case "tcp":
		err = tcp(*dst, *secs, *skip, *cc, *streams)
	case "rtt":
		err = rtt(*dst, *count, *interval)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkbench:", err)
		os.Exit(1)
	}
}

type result struct {
	Bytes int64   `json:"bytes"`
	Span  float64 `json:"span_s"`
}

func sink(addr string) error {
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			var hdr [8]byte // skip seconds (float64 bits)
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			skip := time.Duration(math.Float64frombits(binary.BigEndian.Uint64(hdr[:])) * 1e9)
			buf := make([]byte, 1<<20)
			start := time.Now()
			var from, last time.Time
			var n int64
			for {
				k, err := c.Read(buf)
				now := time.Now()
				if now.Sub(start) >= skip {
					if from.IsZero() {
						from = now
					} else {
						n += int64(k)
						last = now
					}
				}
				if err != nil {
					break
				}
			}
			span := 0.0
			if !from.IsZero() {
				span = last.Sub(from).Seconds()
			}
			json.NewEncoder(c).Encode(result{Bytes: n, Span: span})
		}()
	}
}

func tcp(dst string, secs, skip float64, cc string, streams int) error {
	var wg sync.WaitGroup
	res := make([]result, streams)
	errs := make([]error, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = oneStream(dst, secs, skip, cc)
		}()
	}
	wg.Wait()
	// Several streams: all bytes over the longest window (conservative; summing per-stream
	// rates over slightly different windows can exceed the link).
	var bytes int64
	var span float64
	for i := range res {
		if errs[i] != nil {
			return errs[i]
		}
		bytes += res[i].Bytes
		span = math.Max(span, res[i].Span)
	}
	bps := 0.0
	if span > 0 {
		bps = float64(bytes) * 8 / span
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"goodput_bps": bps, "span_s": span, "streams": streams, "cc": cc})
}

func oneStream(dst string, secs, skip float64, cc string) (result, error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc) })
		return serr
	}}
	c, err := d.Dial("tcp4", dst)
	if err != nil {
		return result{}, err
	}
	defer c.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], math.Float64bits(skip))
	if _, err := c.Write(hdr[:]); err != nil {
		return result{}, err
	}
	buf := make([]byte, 1<<20)
	end := time.Now().Add(time.Duration(secs * 1e9))
	c.SetWriteDeadline(end)
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			break
		}
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var r result
	if err := json.NewDecoder(c).Decode(&r); err != nil {
		return r, fmt.Errorf("result: %w", err)
	}
	return r, nil
}

// rtt sends ICMP echo requests (answered by the far side's kernel, so no process on that
// side adds scheduling delay) every intervalMs without waiting for the previous reply (the
// RTT is much longer than the interval); replies are matched by identifier and sequence.
func rtt(dst string, count int, intervalMs float64) error {
	host, _, err := net.SplitHostPort(dst)
	if err != nil {
		host = dst
	}
	c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return err
	}
	defer c.Close()
	to := &net.IPAddr{IP: net.ParseIP(host)}
	id := uint16(os.Getpid())
	sent := make([]time.Time, count)
	got := make([]float64, count)
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			now := time.Now()
			if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id {
				if i := int(binary.BigEndian.Uint16(buf[6:])); i < count {
					mu.Lock()
					if !sent[i].IsZero() && got[i] == 0 {
						got[i] = float64(now.Sub(sent[i]).Nanoseconds()) / 1e6
					}
					mu.Unlock()
				}
			}
		}
	}()
	msg := make([]byte, 64)
	start := time.Now()
	for i := 0; i < count; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(float64(i) * intervalMs * 1e6))))
		icmpEcho(msg, id, uint16(i))
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		c.WriteTo(msg, to)
	}
	<-done
	var ms []float64
	for _, v := range got {
		if v > 0 {
			ms = append(ms, v)
		}
	}
	lost := count - len(ms)
	if len(ms) == 0 {
		return fmt.Errorf("no probe came back")
	}
	sort.Float64s(ms)
	q := func(p float64) float64 { return ms[int(p*float64(len(ms)-1))] }
	var mean, sd float64
	for _, v := range ms {
		mean += v
	}
	mean /= float64(len(ms))
	for _, v := range ms {
		sd += (v - mean) * (v - mean)
	}
	sd = math.Sqrt(sd / float64(len(ms)))
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"n": len(ms), "lost": lost, "min_ms": ms[0],
		"p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "max_ms": ms[len(ms)-1], "mean_ms": mean, "sd_ms": sd})
}

func icmpEcho(msg []byte, id, seq uint16) {
	clear(msg)
	msg[0] = 8
	binary.BigEndian.PutUint16(msg[4:], id)
	binary.BigEndian.PutUint16(msg[6:], seq)
	var s uint32
	for i := 0; i+1 < len(msg); i += 2 {
		s += uint32(msg[i])<<8 | uint32(msg[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	binary.BigEndian.PutUint16(msg[2:], ^uint16(s))
}
