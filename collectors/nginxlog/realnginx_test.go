package nginxlog

// Access logs written by a real nginx (Debian's nginx-light, installed by scripts/setup.sh)
// for requests crafted to forge fields: a User-Agent and a request line that hold the
// literals of the log_format around them. Every request is logged by every log_format of
// testdata/realnginx/formats.conf; `truth` (escape=json, every value quoted) says what each
// request really was. A format the parser accepts must give the truth on every line; a
// format where a client could move fields must be refused when the parser is made.
//
// TestRealNginxTestdata checks the committed logs of such a run (testdata/realnginx/*.log).
// TestRealNginx runs nginx itself (root, nginx installed; skipped otherwise) on 127.0.0.1
// and a unix socket, checks the fresh logs the same way, and with -update-real-nginx
// rewrites the committed ones.

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/decimal"
	"github.com/ccab-dev/ccab/collectors/record"
)

var updateRealNginx = flag.Bool("update-real-nginx", false, "rewrite testdata/realnginx/*.log from a real nginx run (root, nginx installed)")

const realDir = "testdata/realnginx"

// realFormats are the formats of formats.conf besides `truth`; ambiguous ones must be
// refused by NewParser.
var realFormats = []struct {
	name      string
	ambiguous bool
}{
	{"edge", false}, {"clb", false}, {"uamid", false}, {"notime", false},
	{"brackets", true}, {"none", true}, {"uatail", true},
}

// realRequests are sent in this order; each is the raw bytes of one connection (several
// requests on a keep-alive connection are one entry). unix marks the unix-socket listener.
var realRequests = []struct {
	unix bool
	raw  string
}{
	{false, "GET /ok HTTP/1.1\r\nHost: a\r\nUser-Agent: curl/8.5.0\r\nConnection: close\r\n\r\n"},
	// a User-Agent that holds the bracket format's literals and fake numbers
	{false, "GET /ua HTTP/1.1\r\nHost: a\r\nUser-Agent: x] [9.999] [424242] [777] [y\r\nConnection: close\r\n\r\n"},
	// the same for space-separated formats
	{false, "GET /ua2 HTTP/1.1\r\nHost: a\r\nUser-Agent: evil 9.999 424242 777\r\nConnection: close\r\n\r\n"},
	// quotes, which default escaping writes as \x22 and escape=none leaves raw
	{false, "GET /ua3 HTTP/1.1\r\nHost: a\r\nUser-Agent: q\" 9.999 424242 777 \"r\r\nReferer: s\" 200 999999 \"t\r\nConnection: close\r\n\r\n"},
	// request lines nginx answers with 400 and logs as sent, forging status 200 and 999999 bytes
	{false, "GET /x] [200] [999999] [y HTTP/1.1\r\nHost: a\r\n\r\n"},
	{false, "GET /x\" 200 999999 \"-\" \"y HTTP/1.1\r\nHost: a\r\n\r\n"},
	{false, "GET /x 200 999999 z HTTP/1.1\r\nHost: a\r\n\r\n"},
	// keep-alive: connection_requests 1 and 2
	{false, "GET /k1 HTTP/1.1\r\nHost: a\r\n\r\nGET /k2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"},
	// a unix-socket client: $remote_addr is "unix:"
	{true, "GET /unix HTTP/1.1\r\nHost: a\r\nUser-Agent: curl/8.5.0\r\nConnection: close\r\n\r\n"},
}

func TestRealNginxTestdata(t *testing.T) {
	checkRealLogs(t, realDir)
}

func TestRealNginx(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx is not installed (scripts/setup.sh installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: nginx's master opens the logs and the unix socket")
	}
	dir := runRealNginx(t, bin)
	checkRealLogs(t, dir)
	if *updateRealNginx {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		logs = slices.DeleteFunc(logs, func(p string) bool { return filepath.Base(p) == "error.log" })
		for _, l := range logs {
			b, err := os.ReadFile(l)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(realDir, filepath.Base(l)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("rewrote %d logs in %s", len(logs), realDir)
	}
}

// runRealNginx starts nginx (prefix pz14-…), sends realRequests, stops it and returns the
// directory holding one <format>.log per format and syslog_edge.log (the edge format
// shipped over syslog to a UDP socket of the test).
func runRealNginx(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pz14-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	formats, err := os.ReadFile(filepath.Join(realDir, "formats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	var syslogLines []string
	var mu sync.Mutex
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			syslogLines = append(syslogLines, string(buf[:n]))
			mu.Unlock()
		}
	}()
	var logs strings.Builder
	logs.WriteString("    access_log " + filepath.Join(dir, "truth.log") + " truth;\n")
	for _, f := range realFormats {
		fmt.Fprintf(&logs, "    access_log %s %s;\n", filepath.Join(dir, f.name+".log"), f.name)
	}
	fmt.Fprintf(&logs, "    access_log syslog:server=%s,facility=local7,severity=info,tag=nginx edge;\n", udp.LocalAddr())
	sock := filepath.Join(dir, "pz14.sock")
	conf := fmt.Sprintf(`worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy; fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  access_log off;
%[2]s
  server {
    listen 127.0.0.1:%[3]d;
    listen unix:%[4]s;
%[5]s    location / { return 200 "hello\n"; }
  }
}
`, dir, formats, port, sock, logs.String())
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log")).CombinedOutput(); err != nil {
		t.Fatalf("nginx: %v\n%s", err, out)
	}
	pid := 0
	t.Cleanup(func() {
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for i := 0; i < 100 && pid == 0; i++ {
		if b, err := os.ReadFile(filepath.Join(dir, "nginx.pid")); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if pid == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if pid == 0 {
		t.Fatal("nginx wrote no pid file")
	}
	for _, rq := range realRequests {
		network, addr := "tcp", fmt.Sprintf("127.0.0.1:%d", port)
		if rq.unix {
			network, addr = "unix", sock
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, rq.raw); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, c) // nginx closes the connection after the last response
		c.Close()
	}
	// SIGQUIT: graceful stop; the master flushes and closes the logs before exiting.
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		if syscall.Kill(pid, 0) != nil {
			pid = 0
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid != 0 {
		t.Fatal("nginx did not stop")
	}
	want := countLines(t, filepath.Join(dir, "truth.log"))
	for i := 0; i < 100; i++ {
		mu.Lock()
		n := len(syslogLines)
		mu.Unlock()
		if n >= want {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var b strings.Builder
	for _, l := range syslogLines {
		b.WriteString(strings.TrimRight(l, "\n") + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "syslog_edge.log"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func countLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// truthRecord is what a request's `truth` line says, built without the parser under test.
func truthRecord(t *testing.T, line string) record.HTTPRequest {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("truth line %q: %v", line, err)
	}
	num := func(k string) *int64 {
		if m[k] == "" || m[k] == "-" {
			return nil
		}
		v, err := strconv.ParseInt(m[k], 10, 64)
		if err != nil {
			t.Fatalf("truth %s %q: %v", k, m[k], err)
		}
		return &v
	}
	var r record.HTTPRequest
	ms, err := decimal.ScaleInt(m["msec"], 3)
	if err != nil {
		t.Fatal(err)
	}
	r.TsMs = ms
	if m["remote_addr"] == "unix:" {
		r.PeerPrefixNull = true
	} else {
		r.PeerPrefix = anon.PeerPrefix(netip.MustParseAddr(m["remote_addr"]))
	}
	r.ConnSerial, r.ConnRequests, r.Status = num("connection"), num("connection_requests"), num("status")
	r.BytesSent, r.BodyBytesSent = num("bytes_sent"), num("body_bytes_sent")
	r.TcpinfoRTTUs, r.TcpinfoRTTVarUs = num("tcpinfo_rtt"), num("tcpinfo_rttvar")
	r.TcpinfoSndCwnd, r.TcpinfoRcvSpace = num("tcpinfo_snd_cwnd"), num("tcpinfo_rcv_space")
	rt, err := decimal.ScaleFloat(m["request_time"], 3)
	if err != nil {
		t.Fatal(err)
	}
	r.RequestTimeMs = record.F(rt)
	if w, _, _ := strings.Cut(m["request"], " "); isMethodToken([]byte(w)) {
		r.Method = w
	}
	return r
}

// sameAsTruth compares the fields a format logs with the truth. tcpinfo_* are read by a
// separate getsockopt per access_log, so an ACK arriving between two of them may change
// them a little: they must be within 50 ms / a few segments, far from any forged value.
func sameAsTruth(got, want record.HTTPRequest, p *Parser) string {
	var diffs []string
	logs := map[string]bool{}
	for _, v := range p.m.f.Segs {
		logs[v.Var] = true
	}
	eq := func(name string, g, w *int64, tol int64) {
		switch {
		case g == nil && w == nil:
		case g == nil || w == nil:
			diffs = append(diffs, fmt.Sprintf("%s %v, truth %v", name, ptrText(g), ptrText(w)))
		case *g-*w > tol || *w-*g > tol:
			diffs = append(diffs, fmt.Sprintf("%s %d, truth %d", name, *g, *w))
		}
	}
	if logs["msec"] && got.TsMs != want.TsMs {
		diffs = append(diffs, fmt.Sprintf("ts_ms %d, truth %d", got.TsMs, want.TsMs))
	}
	if logs["remote_addr"] && (got.PeerPrefix != want.PeerPrefix || got.PeerPrefixNull != want.PeerPrefixNull) {
		diffs = append(diffs, fmt.Sprintf("peer_prefix %q (null %v), truth %q (null %v)", got.PeerPrefix, got.PeerPrefixNull, want.PeerPrefix, want.PeerPrefixNull))
	}
	if logs["request"] && got.Method != want.Method {
		diffs = append(diffs, fmt.Sprintf("method %q, truth %q", got.Method, want.Method))
	}
	for _, c := range []struct {
		v    string
		g, w *int64
		tol  int64
	}{
		{"connection", got.ConnSerial, want.ConnSerial, 0}, {"connection_requests", got.ConnRequests, want.ConnRequests, 0},
		{"status", got.Status, want.Status, 0}, {"bytes_sent", got.BytesSent, want.BytesSent, 0},
		{"body_bytes_sent", got.BodyBytesSent, want.BodyBytesSent, 0},
		{"tcpinfo_rtt", got.TcpinfoRTTUs, want.TcpinfoRTTUs, 50000}, {"tcpinfo_rttvar", got.TcpinfoRTTVarUs, want.TcpinfoRTTVarUs, 50000},
		{"tcpinfo_snd_cwnd", got.TcpinfoSndCwnd, want.TcpinfoSndCwnd, 10}, {"tcpinfo_rcv_space", got.TcpinfoRcvSpace, want.TcpinfoRcvSpace, 1 << 20},
	} {
		if logs[c.v] {
			eq(c.v, c.g, c.w, c.tol)
		}
	}
	if logs["request_time"] {
		var g, w *int64
		if got.RequestTimeMs != nil {
			g = record.Int(int64(*got.RequestTimeMs))
		}
		w = record.Int(int64(*want.RequestTimeMs))
		eq("request_time", g, w, 0)
	}
	return strings.Join(diffs, "; ")
}

func ptrText(p *int64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatInt(*p, 10)
}

func checkRealLogs(t *testing.T, dir string) {
	conf, err := os.ReadFile(filepath.Join(realDir, "formats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var truth []record.HTTPRequest
	for _, l := range readLines(t, filepath.Join(dir, "truth.log")) {
		truth = append(truth, truthRecord(t, l))
	}
	if len(truth) < len(realRequests)+1 {
		t.Fatalf("%d truth lines for %d connections", len(truth), len(realRequests))
	}
	check := func(t *testing.T, p *Parser, lines []string) {
		if len(lines) != len(truth) {
			t.Fatalf("%d lines, %d in truth.log", len(lines), len(truth))
		}
		for i, l := range lines {
			var r record.HTTPRequest
			var sc Scratch
			if err := p.ParseInto([]byte(l), &r, &sc); err != nil {
				t.Errorf("line %d %q: %v", i+1, l, err)
				continue
			}
			if d := sameAsTruth(r, truth[i], p); d != "" {
				t.Errorf("line %d %q: FORGED: %s", i+1, l, d)
			}
		}
	}
	for _, f := range realFormats {
		t.Run(f.name, func(t *testing.T) {
			p, err := NewParser(string(conf), f.name)
			switch {
			case f.ambiguous && err == nil:
				t.Errorf("ambiguous format accepted")
			case f.ambiguous:
				t.Logf("refused: %v", err)
				if !errors.Is(err, ErrAmbiguous) {
					t.Errorf("refused for another reason: %v", err)
				}
				return
			case err != nil:
				t.Fatalf("refused: %v", err)
			}
			check(t, p, readLines(t, filepath.Join(dir, f.name+".log")))
		})
	}
	t.Run("syslog_edge", func(t *testing.T) {
		p, err := NewParser(string(conf), "edge")
		if err != nil {
			t.Fatal(err)
		}
		check(t, p, readLines(t, filepath.Join(dir, "syslog_edge.log")))
	})
}
