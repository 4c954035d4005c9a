package tailer

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// realNginx runs nginx (as root, on a loopback port) writing its access log in the ccab JSON
// log_format to dir/access.log. Skipped without root or nginx.
type realNginx struct {
	t      *testing.T
	prefix string
	conf   string
	addr   string
}

func startNginx(t *testing.T, dir string) *realNginx {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (nginx runs as root with its files in a temp dir)")
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	prefix := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(prefix, "nginx.conf")
	cfg := fmt.Sprintf(`worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
user root;
events { worker_connections 64; }
http {
    log_format ccab escape=json '{"msec":$msec,"remote_addr":"$remote_addr","connection":$connection,'
      '"connection_requests":$connection_requests,"request_method":"$request_method","status":$status,'
      '"bytes_sent":$bytes_sent,"body_bytes_sent":$body_bytes_sent,"request_time":$request_time}';
    access_log %[2]s ccab;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    keepalive_timeout 0;
    server { listen %[3]s; location / { return 200 "ok\n"; } }
}
`, prefix, filepath.Join(dir, "access.log"), addr)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &realNginx{t: t, prefix: prefix, conf: conf, addr: addr}
	n.cmd() // starts the master (daemon), which returns once it listens
	t.Cleanup(n.stop)
	return n
}

func (n *realNginx) cmd(args ...string) {
	n.t.Helper()
	a := append([]string{"-p", n.prefix, "-c", n.conf, "-e", filepath.Join(n.prefix, "error.log")}, args...)
	if out, err := exec.Command("nginx", a...).CombinedOutput(); err != nil {
		n.t.Fatalf("nginx %v: %v: %s", args, err, out)
	}
}

func (n *realNginx) pid() int {
	b, err := os.ReadFile(filepath.Join(n.prefix, "nginx.pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

func (n *realNginx) stop() {
	pid := n.pid()
	if pid <= 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 500 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// requests makes k requests, each on its own connection (one log line each).
func (n *realNginx) requests(k int) {
	n.t.Helper()
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	for i := 0; i < k; i++ {
		resp, err := cl.Get("http://" + n.addr + "/")
		if err != nil {
			n.t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			n.t.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// waitFor waits (up to a generous bound: this is not a timing assertion) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("gave up waiting for %s", what)
}

func countLines(paths ...string) int {
	n := 0
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		n += bytes.Count(b, []byte{'\n'})
	}
	return n
}

// A real nginx and two `nginx -s reopen` rotations between two polls: the lines of the file
// that lived only between them are delivered, every line exactly once.
func TestRealNginxTwoReopensBetweenTwoPolls(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "access.log")
	n := startNginx(t, dir)
	n.requests(10)
	waitFor(t, "10 lines", func() bool { return countLines(log) == 10 })
	o := &out{}
	tl, _ := newTailer(t, dir, o, log)
	poll(t, tl, 1)

	mv(t, log, log+".1")
	n.cmd("-s", "reopen")
	waitFor(t, "the reopened log", func() bool { _, err := os.Stat(log); return err == nil })
	n.requests(5)
	waitFor(t, "15 lines", func() bool { return countLines(log, log+".1") == 15 })
	mv(t, log+".1", log+".2")
	mv(t, log, log+".1")
	n.cmd("-s", "reopen")
	waitFor(t, "the reopened log", func() bool { _, err := os.Stat(log); return err == nil })
	n.requests(7)
	waitFor(t, "22 lines", func() bool { return countLines(log, log+".1", log+".2") == 22 })
	poll(t, tl, 3)

	got := o.conns(t)
	if len(got) != 22 {
		t.Fatalf("got %d records, want 22: %v", len(got), got)
	}
	seen := map[int64]bool{}
	for _, c := range got {
		if seen[c] {
			t.Fatalf("connection %d delivered twice: %v", c, got)
		}
		seen[c] = true
	}
	tl.Close()
}
