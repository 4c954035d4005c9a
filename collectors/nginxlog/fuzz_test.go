package nginxlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

// FuzzParseNginx fuzzes the log_format compiler and the line parser together: no panic,
// errors are *ParseError, accepted lines encode as valid JSON and carry only a prefix of the
// client address, and records and errors are the reference parser's (reference_test.go).
// formatText writes a Format back as bare format text (escape=default) or one quoted
// directive, so that a fuzz seed names one format.
func formatText(f Format) string {
	var b strings.Builder
	for _, s := range f.Segs {
		if s.Var != "" {
			b.WriteString("${" + s.Var + "}")
		} else {
			b.WriteString(strings.ReplaceAll(strings.ReplaceAll(s.Lit, `\`, `\\`), "'", `\'`))
		}
	}
	return "log_format x escape=" + string(f.Escape) + " '" + b.String() + "';"
}

func FuzzParseNginx(f *testing.F) {
	vec, err := os.ReadFile(filepath.Join(testvectors.Dir(f), "nginx_ccab_json.log"))
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(vec)), "\n") {
		f.Add(FormatJSON, line)
		f.Add("ccab", line)
	}
	for _, pair := range [][2]string{
		{"testdata/combined_tcpinfo.conf", "testdata/combined_tcpinfo.log"},
		{"testdata/gcore_quoted.conf", "testdata/gcore_quoted.log"},
	} {
		spec, err1 := os.ReadFile(pair[0])
		lines, err2 := os.ReadFile(pair[1])
		if err := errors.Join(err1, err2); err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(lines), "\n") {
			f.Add(string(spec), line)
		}
	}
	f.Add("combined", `198.51.100.9 - - [26/Apr/2019:09:47:40 +0300] "POST /api HTTP/1.1" 201 12 "-" "-"`)
	// a real nginx's logs of forged requests, unix-socket clients, syslog headers, no time
	conf, err := os.ReadFile("testdata/realnginx/formats.conf")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range []string{"edge", "clb", "uamid", "notime", "brackets", "none", "uatail"} {
		lines, err := os.ReadFile("testdata/realnginx/" + name + ".log")
		if err != nil {
			f.Fatal(err)
		}
		spec := string(conf)
		if p, err := ParseSpec(spec, name); err == nil {
			spec = formatText(p)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
			f.Add(spec, line)
		}
	}
	f.Add(`$remote_addr $status`, `unix: 200`)
	f.Add(`[$time_local] [$remote_addr:$remote_port] [$request]`, `<190>Nov 24 04:00:54 vm nginx: [24/Nov/2026:04:00:54 +0000] [unix::] [GET / HTTP/1.1]`)
	f.Add(`$msec "$request" $status`, `<190>1 2026-11-24T04:00:54Z vm nginx - - - 1.5 "GET /" 200`)
	f.Add(`[$msec] [$http_user_agent] [$status] [$http_referer]`, `[1.5] [a] [200] [b] [400] [c]`)
	f.Add(`escape=json '{"t":$msec,"rtt":$tcpinfo_rtt}'`, `{"t":1.5,"rtt":}`)
	f.Add(`[$time_iso8601] [$remote_addr:$remote_port]`, `[2019-04-26T09:47:40+00:00] [2001:db8::1:443]`)
	f.Fuzz(func(t *testing.T, spec, line string) {
		p, err := NewParser(spec, "")
		ref, rerr := newRefParser(spec, "")
		if errText(err) != errText(rerr) {
			t.Fatalf("NewParser(%q): %v; reference: %v", spec, err, rerr)
		}
		if err != nil {
			return
		}
		if d := sameAsReference(p, ref, line); d != "" {
			t.Fatalf("spec %q, line %q: %s", spec, line, d)
		}
		r, err := p.Parse(line)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Reason == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		record.Meta{SampleRate: 1}.StampHTTP(&r)
		var buf bytes.Buffer
		if err := record.NewEncoder(&buf).Encode(&r); err != nil {
			t.Fatalf("accepted line does not encode: %v", err)
		}
		if !json.Valid(buf.Bytes()) {
			t.Fatalf("invalid JSON: %s", buf.Bytes())
		}
		if r.PeerPrefix != "" {
			if p, err := netip.ParsePrefix(r.PeerPrefix); err != nil || (p.Bits() != 24 && p.Bits() != 48) {
				t.Fatalf("peer_prefix %q is not a /24 or /48", r.PeerPrefix)
			}
		}
	})
}
