package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/internal/cli"
)

func testEnv(stdout, stderr *bytes.Buffer) cli.Env {
	return cli.Env{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr,
		Getenv: func(string) string { return "" }, Now: time.Now, ReadFile: os.ReadFile}
}

func writeLog(t *testing.T, path string, n int) {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"msec":1763769601.%03d,"remote_addr":"10.0.0.%d","connection":%d,"connection_requests":1,"request_method":"GET","status":200,"bytes_sent":10,"body_bytes_sent":5,"request_time":0.001}`+"\n", i%1000, i%200, i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func goroutinesSettle(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			t.Fatalf("%d goroutines after the run, %d before:\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunOnceToStdoutAndNoGoroutineLeft(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	writeLog(t, log, 50)
	base := runtime.NumGoroutine()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state"), "--nginx-paths", log, "--metrics-addr", "127.0.0.1:0",
		"--rollout-state-file", filepath.Join(dir, "none.json"), "--host", "h1", "--pop", "p1"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "\n"); n != 50 {
		t.Fatalf("%d records on stdout, want 50", n)
	}
	if !strings.Contains(out.String(), `"host":"h1"`) || !strings.Contains(out.String(), `"peer_prefix":"10.0.0.0/24"`) {
		t.Fatalf("records not stamped: %.300s", out.String())
	}
	goroutinesSettle(t, base)
	// a second run reads nothing new: the checkpoint was written at shutdown
	out.Reset()
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state"), "--nginx-paths", log, "--metrics-addr", "",
		"--rollout-state-file", filepath.Join(dir, "none.json")}); code != 0 || out.Len() != 0 {
		t.Fatalf("second run: exit %d, %d bytes of records", code, out.Len())
	}
}

func TestRunWithUnreachableKafkaSpoolsAndLeavesNoGoroutine(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	writeLog(t, log, 20)
	base := runtime.NumGoroutine()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	code := runMain(ctx, testEnv(&out, &errb), []string{"--kafka-brokers", "127.0.0.1:1",
		"--state-dir", filepath.Join(dir, "state"), "--nginx-paths", log, "--metrics-addr", "",
		"--kafka-stall-timeout", "300ms", "--kafka-shutdown-timeout", "500ms", "--kafka-dial-timeout", "200ms",
		"--rollout-state-file", filepath.Join(dir, "none.json")})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "state", "spool", "*", "seg-*.jsonl"))
	segs2, _ := filepath.Glob(filepath.Join(dir, "state", "spool", "seg-*.jsonl"))
	var n int
	for _, s := range append(segs, segs2...) {
		b, _ := os.ReadFile(s)
		n += bytes.Count(b, []byte("\n"))
	}
	if n != 20 {
		t.Fatalf("%d records spooled, want 20\n%s", n, errb.String())
	}
	goroutinesSettle(t, base)
}

func TestRunUsageErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"--spool-full", "maybe", "--output", "discard"}); code != cli.ExitUsage {
		t.Fatalf("bad spool policy: exit %d", code)
	}
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"--output", "carrier-pigeon"}); code != cli.ExitUsage {
		t.Fatalf("bad output: exit %d", code)
	}
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"-h"}); code != cli.ExitOK {
		t.Fatalf("-h: exit %d", code)
	}
}

// The demo's run: a simulated host's ss snapshots and access log through the real collector
// in one --once run, records on stdout, every snapshot read and the process clean after.
func TestRunOnceReplaysSnapshotsAndLog(t *testing.T) {
	dir := t.TempDir()
	snaps := filepath.Join(dir, "ss")
	if err := os.Mkdir(snaps, 0o755); err != nil {
		t.Fatal(err)
	}
	const line = "0      0      192.0.2.14:443 100.64.%d.%d:%d timer:(on,208ms,0) uid:33 ino:1 sk:1 cgroup:/x <-> ts sack bbr wscale:10,9 rto:204 " +
		"rtt:20/5 mss:1448 cwnd:%d bytes_sent:%d bytes_acked:1000 segs_out:9 segs_in:5 data_segs_out:8 bbr:(bw:2919472bps,mrtt:%s,pacing_gain:1,cwnd_gain:2) " +
		"send 4341401bps pacing_rate 2890280bps delivery_rate 2626216bps busy:10ms rcv_space:14480 minrtt:19.5"
	want := 0
	for k := 0; k < 5; k++ {
		var b strings.Builder
		for i := 0; i <= k; i++ {
			mrtt := "19.5"
			if k == 0 {
				mrtt = "4.29497e+06"
			}
			fmt.Fprintf(&b, line+"\n", k, i+1, 40000+i, 10+i, 5000*(k+1), mrtt)
			want++
		}
		os.WriteFile(filepath.Join(snaps, fmt.Sprintf("%d.txt", 1763640000000+10000*k)), []byte(b.String()), 0o644)
	}
	log := filepath.Join(dir, "access.log")
	writeLog(t, log, 7)
	state := filepath.Join(dir, "state.json")
	os.WriteFile(state, []byte(`{"rollout_id":"r1","arm":"bbr1","cc":"bbr","generation":1}`), 0o644)
	base := runtime.NumGoroutine()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "", "--rollout-state-file", state,
		"--host", "edge-tst1-05", "--pop", "tst1", "--kernel", "6.1.0", "--nginx-paths", log,
		"--ss-replay-dir", snaps, "--ss-replay-source-sample-rate", "0.5", "--tcp-info-salt", "s"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var tcp, http int
	lastTs := int64(0)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		switch {
		case strings.Contains(l, `"schema":"tcp_sample/1"`):
			tcp++
			var ts int64
			fmt.Sscanf(l[strings.Index(l, `"ts_ms":`)+len(`"ts_ms":`):], "%d", &ts)
			if ts < lastTs {
				t.Errorf("ts_ms %d after %d: snapshots out of order", ts, lastTs)
			}
			lastTs = ts
			for _, w := range []string{`"host":"edge-tst1-05"`, `"arm":"bbr1"`, `"rollout_id":"r1"`, `"kernel":"6.1.0"`, `"sample_rate":0.5}`, `"cc":"bbr"`} {
				if !strings.Contains(l, w) {
					t.Errorf("record lacks %s: %s", w, l)
				}
			}
			if ts == 1763640000000 && !strings.Contains(l, `"bbr_min_rtt_us":null`) {
				t.Errorf("mrtt 4.29497e+06 is not null: %s", l)
			}
		case strings.Contains(l, `"schema":"http_request/1"`):
			http++
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	if tcp != want || http != 7 {
		t.Fatalf("%d tcp_sample records (want %d), %d http_request (want 7)\n%s", tcp, want, http, errb.String())
	}
	goroutinesSettle(t, base)

	// ss replay alone (nginx off); a missing directory is a configuration error.
	out.Reset()
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state2"), "--metrics-addr", "", "--rollout-state-file", state,
		"--nginx-enabled=false", "--ss-replay-dir", snaps}); code != 0 || strings.Count(out.String(), "\n") != want {
		t.Fatalf("replay only: exit %d, %d records", code, strings.Count(out.String(), "\n"))
	}
	errb.Reset()
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state3"), "--metrics-addr", "", "--nginx-enabled=false",
		"--ss-replay-dir", filepath.Join(dir, "nope")}); code != cli.ExitFailure || !strings.Contains(errb.String(), "nope") {
		t.Fatalf("missing replay dir: exit %d: %s", code, errb.String())
	}
}

// A log_format the parser refuses (here: one where a client could forge fields) stops the
// access-log tailing only: the TCP side keeps running, and the reason is logged and
// exported as ccab_collector_nginx_format_ok 0.
func TestRunRefusedNginxFormatKeepsTCPSide(t *testing.T) {
	dir := t.TempDir()
	snaps := filepath.Join(dir, "ss")
	os.Mkdir(snaps, 0o755)
	const sock = "0 0 192.0.2.14:443 100.64.1.1:40000 cubic rtt:20/5 mss:1448 cwnd:10 bytes_acked:1000 segs_out:9 segs_in:5 data_segs_out:8 rcv_space:14480 minrtt:19.5\n"
	os.WriteFile(filepath.Join(snaps, "1763640000000.txt"), []byte(sock+strings.Replace(sock, "40000", "40001", 1)), 0o644)
	log := filepath.Join(dir, "access.log")
	os.WriteFile(log, []byte("[1.5] [curl] [200] [-]\n"), 0o644)
	var out, errb bytes.Buffer
	code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "", "--rollout-state-file", filepath.Join(dir, "none.json"),
		"--nginx-paths", log, "--nginx-format", "[$msec] [$http_user_agent] [$status] [$http_referer]",
		"--ss-replay-dir", snaps, "--tcp-info-salt", "s"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), `"schema":"tcp_sample/1"`); n != 2 || strings.Contains(out.String(), "http_request") {
		t.Fatalf("%d tcp records (want 2), output %.300s", n, out.String())
	}
	if !strings.Contains(errb.String(), "nginx log format refused") || !strings.Contains(errb.String(), "ambiguous") {
		t.Fatalf("reason not logged: %s", errb.String())
	}
	// nginx alone: nothing else to run, so the refusal is the collector's error
	errb.Reset()
	if code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state2"), "--metrics-addr", "", "--nginx-paths", log,
		"--nginx-format", "[$msec] [$http_user_agent] [$status] [$http_referer]"}); code != cli.ExitFailure {
		t.Fatalf("nginx only, refused format: exit %d", code)
	}
}

// A format without a time variable: records carry the read time and ts_source "read".
func TestRunReadTimeFormat(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	os.WriteFile(log, []byte("unix: 7 200 \"GET / HTTP/1.1\"\n10.1.2.3 8 404 \"GET /x HTTP/1.1\"\n"), 0o644)
	var out, errb bytes.Buffer
	before := time.Now().UnixMilli()
	code := runMain(context.Background(), testEnv(&out, &errb), []string{"--once", "--output", "stdout",
		"--state-dir", filepath.Join(dir, "state"), "--metrics-addr", "", "--rollout-state-file", filepath.Join(dir, "none.json"),
		"--nginx-paths", log, "--nginx-format", `$remote_addr $connection $status "$request"`})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"peer_prefix":null`) || !strings.Contains(lines[1], `"peer_prefix":"10.1.2.0/24"`) {
		t.Fatalf("records: %s", out.String())
	}
	for _, l := range lines {
		var ts int64
		fmt.Sscanf(l[strings.Index(l, `"ts_ms":`)+len(`"ts_ms":`):], "%d", &ts)
		if !strings.HasSuffix(l, `,"ts_source":"read"}`) || ts < before {
			t.Errorf("record %s: want the read time (>= %d) and ts_source read", l, before)
		}
	}
}
