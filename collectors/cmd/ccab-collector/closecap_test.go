package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/internal/cli"
	"github.com/ccab-dev/ccab/collectors/internal/netnstest"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRunCapturesClosedConnections runs `run` with the netlink sampler (and so the
// close-time capture) on a network namespace and --output stdout: five short connections
// give five tcp_conn/1 records, stamped with the host fields, and no goroutine is left.
func TestRunCapturesClosedConnections(t *testing.T) {
	netnstest.Require(t, "ss")
	ns := netnstest.Namespace(t, "cc14r-"+netnstest.Tag())
	ln := netnstest.Listen(t, ns, "tcp4", "127.0.0.1:8443")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write(make([]byte, 5000))
			c.Close()
		}
	}()
	dir := t.TempDir()
	base := runtime.NumGoroutine()
	var out, errb syncBuf
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" }, Now: time.Now, ReadFile: os.ReadFile}
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() {
		code <- runMain(ctx, env, []string{"--output", "stdout", "--nginx-enabled=false", "--tcp-info-enabled",
			"--tcp-info-namespaces", ns, "--tcp-info-local-ports", "8443", "--tcp-info-interval", "200ms",
			"--tcp-info-salt", "s", "--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "",
			"--rollout-state-file", filepath.Join(dir, "none.json"), "--host", "h1", "--pop", "p1"})
	}()
	for !strings.Contains(errb.String(), "close-time capture") {
		select {
		case c := <-code:
			t.Fatalf("run exited %d: %s", c, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := 0; i < 5; i++ {
		c := netnstest.Dial(t, ns, "tcp4", "127.0.0.1:8443", "")
		if n, _ := io.Copy(io.Discard, c); n != 5000 {
			t.Fatalf("read %d", n)
		}
		c.Close()
	}
	// The server closed first: its sockets are destroyed once nothing but TIME-WAIT is left;
	// then a moment for the events to pass the capture's 50 ms coalescing and the sink.
	for i := 0; i < 100; i++ {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-tanH", "exclude", "time-wait", "exclude", "listening").Output()
		if err != nil {
			t.Fatal(err)
		}
		if len(out) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, errb.String())
	}
	var conns []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, `"schema":"tcp_conn/1"`) {
			conns = append(conns, l)
		}
	}
	if len(conns) != 5 {
		t.Fatalf("%d tcp_conn/1 records, want 5:\n%s\n%s", len(conns), out.String(), errb.String())
	}
	for _, l := range conns {
		if !strings.Contains(l, `"host":"h1"`) || !strings.Contains(l, `"pop":"p1"`) || !strings.Contains(l, `"bytes_acked":5001`) ||
			!strings.Contains(l, `"local_port":8443`) {
			t.Errorf("record: %s", l)
		}
	}
	goroutinesSettle(t, base)
}

// TestCloseCaptureLossesCountedAndLogged: a destroy listener with the smallest receive buffer,
// read once per 3 s, while 300 connections close: the kernel drops events. Every lost
// connection is in records_dropped_total{reason="close_rcvbuf"} (equal to close_dropped_total),
// and one warning line says how many were lost and what to change — not one line per event.
func TestCloseCaptureLossesCountedAndLogged(t *testing.T) {
	netnstest.Require(t, "ss")
	ns := netnstest.Namespace(t, "cc29l-"+netnstest.Tag())
	ln := netnstest.Listen(t, ns, "tcp4", "127.0.0.1:8444")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dir := t.TempDir()
	var out, errb syncBuf
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(string) string { return "" }, Now: time.Now, ReadFile: os.ReadFile}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- runMain(ctx, env, []string{"--output", "stdout", "--nginx-enabled=false", "--tcp-info-enabled",
			"--tcp-info-namespaces", ns, "--tcp-info-local-ports", "8444", "--tcp-info-interval", "1s",
			"--close-capture-rcvbuf", "1", "--close-capture-coalesce", "3s",
			"--tcp-info-salt", "s", "--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "127.0.0.1:0",
			"--rollout-state-file", filepath.Join(dir, "none.json"), "--host", "h1", "--pop", "p1"})
	}()
	addrRe := regexp.MustCompile(`msg=metrics addr=(\S+)`)
	for !strings.Contains(errb.String(), "close-time capture") || addrRe.FindStringSubmatch(errb.String()) == nil {
		select {
		case c := <-code:
			t.Fatalf("run exited %d: %s", c, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	addr := addrRe.FindStringSubmatch(errb.String())[1]
	// one connection, read at once; the reader then sleeps 3 s while 300 more close
	c := netnstest.Dial(t, ns, "tcp4", "127.0.0.1:8444", "")
	io.Copy(io.Discard, c)
	c.Close()
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 300; i++ {
		c := netnstest.Dial(t, ns, "tcp4", "127.0.0.1:8444", "")
		io.Copy(io.Discard, c)
		c.Close()
	}
	scrape := func() map[string]float64 {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := map[string]float64{}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && !strings.HasPrefix(l, "#") {
				v, _ := strconv.ParseFloat(f[1], 64)
				m[f[0]] = v
			}
		}
		return m
	}
	var m map[string]float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		m = scrape()
		if m["ccab_collector_close_dropped_total"] > 0 && m["ccab_collector_close_emitted_total"]+m["ccab_collector_close_dropped_total"] >= 301 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no drops seen: %v", m)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, errb.String())
	}
	dropped := m["ccab_collector_close_dropped_total"]
	if got := m[`ccab_collector_records_dropped_total{reason="close_rcvbuf"}`]; got != dropped {
		t.Errorf(`records_dropped_total{reason="close_rcvbuf"} = %v, close_dropped_total = %v`, got, dropped)
	}
	logs := errb.String()
	if n := strings.Count(logs, "close-time capture lost connections"); n < 1 || n > 2 {
		t.Errorf("%d loss warnings, want 1 or 2 (rate-limited; the last at shutdown):\n%s", n, logs)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "close_capture.rcvbuf") {
		t.Errorf("warning does not name the cause:\n%s", logs)
	}
	t.Logf("%v of 301 close events dropped by the kernel; records emitted %v", dropped, m["ccab_collector_close_emitted_total"])
}
