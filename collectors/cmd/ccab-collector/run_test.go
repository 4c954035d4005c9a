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
