package nginxlog

// The parser as it was before the single-pass readers: a regular expression per text
// format, encoding/json into a map for JSON lines, and a name → value lookup that builds
// the record. The tests and fuzz targets check that the fast readers give the same records
// and the same errors on every line.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/decimal"
	"github.com/ccab-dev/ccab/collectors/record"
)

type refParser struct {
	m        *refMatcher // nil for JSON lines
	readTime bool
}

func newRefParser(spec, name string) (*refParser, error) {
	if spec == FormatJSON {
		return &refParser{}, nil
	}
	f, err := ParseSpec(spec, name)
	if err != nil {
		return nil, err
	}
	m, err := refCompile(f)
	if err != nil {
		return nil, err
	}
	if err := checkDetermined(f); err != nil {
		return nil, err
	}
	return &refParser{m: m, readTime: !m.has("msec") && !m.has("time_iso8601") && !m.has("time_local")}, nil
}

func (p *refParser) Parse(line string) (record.HTTPRequest, error) {
	var get lookup
	var err error
	if p.m == nil || autoSyslog(p.m.f) {
		b, _ := stripSyslog([]byte(line), false)
		line = string(b)
	}
	if p.m == nil {
		if get, err = refJSONLookup(line); err != nil {
			return record.HTTPRequest{}, &ParseError{Reason: ReasonBadJSON, Err: err}
		}
	} else if get, err = p.m.match(line); err != nil {
		return record.HTTPRequest{}, &ParseError{Reason: ReasonNoMatch, Err: err}
	}
	r, err := refBuildRequest(get, p.readTime)
	if err != nil {
		return record.HTTPRequest{}, &ParseError{Reason: ReasonBadValue, Err: err}
	}
	if p.readTime {
		r.TsMs, r.TsSource = time.Now().UnixMilli(), TsSourceRead
	}
	return r, nil
}

func refJSONLookup(line string) (lookup, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	return func(v string) (string, bool, error) {
		raw, ok := obj[v]
		if !ok {
			return "", false, nil
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case bytes.Equal(raw, []byte("null")):
			return "", true, nil
		case len(raw) > 0 && raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", true, fmt.Errorf("%s: %w", v, err)
			}
			return s, true, nil
		case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
			return string(raw), true, nil
		}
		return "", true, fmt.Errorf("%s: want a string or a number, got %.20s", v, raw)
	}, nil
}

type refMatcher struct {
	f     Format
	re    *regexp.Regexp
	index map[string]int
	diag  *matcher // diagnose is shared: it did not change
}

func refCompile(f Format) (*refMatcher, error) {
	var b strings.Builder
	b.WriteString("^")
	index := map[string]int{}
	group := 0
	for _, s := range f.Segs {
		if s.Var == "" {
			b.WriteString(regexp.QuoteMeta(s.Lit))
			continue
		}
		group++
		if _, dup := index[s.Var]; !dup {
			index[s.Var] = group
		}
		b.WriteString(varClass(s.Var, f.Escape).re)
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("log_format %s: compile: %w", f.Name, err)
	}
	return &refMatcher{f: f, re: re, index: index, diag: &matcher{f: f}}, nil
}

func (m *refMatcher) has(v string) bool { _, ok := m.index[v]; return ok }

func (m *refMatcher) match(line string) (lookup, error) {
	loc := m.re.FindStringSubmatchIndex(line)
	if loc == nil {
		return nil, m.diag.diagnose(line)
	}
	return func(v string) (string, bool, error) {
		g, ok := m.index[v]
		if !ok || loc[2*g] < 0 {
			return "", false, nil
		}
		raw := line[loc[2*g]:loc[2*g+1]]
		val, err := unescape(raw, m.f.Escape)
		if err != nil {
			return "", true, fmt.Errorf("$%s: %w", v, err)
		}
		return val, true, nil
	}, nil
}

type lookup func(v string) (val string, ok bool, err error)

// buildRequest maps nginx variables to http_request/1 fields. Host fields are the caller's.
func refBuildRequest(get lookup, readTime bool) (record.HTTPRequest, error) {
	var r record.HTTPRequest
	var err error
	if !readTime {
		if r.TsMs, err = refTimestamp(get); err != nil {
			return r, err
		}
	}
	if v, ok, err := get("remote_addr"); err != nil {
		return r, err
	} else if v == "unix:" {
		r.PeerPrefixNull = true
	} else if ok {
		a, perr := netip.ParseAddr(v)
		if perr != nil {
			return r, fmt.Errorf("$remote_addr %q is not an IP address", v)
		}
		r.PeerPrefix = anon.PeerPrefix(a)
	}
	for _, f := range []struct {
		v   string
		dst **int64
	}{
		{"connection", &r.ConnSerial}, {"connection_requests", &r.ConnRequests}, {"status", &r.Status},
		{"bytes_sent", &r.BytesSent}, {"body_bytes_sent", &r.BodyBytesSent},
		{"tcpinfo_rtt", &r.TcpinfoRTTUs}, {"tcpinfo_rttvar", &r.TcpinfoRTTVarUs},
		{"tcpinfo_snd_cwnd", &r.TcpinfoSndCwnd}, {"tcpinfo_rcv_space", &r.TcpinfoRcvSpace},
	} {
		if *f.dst, err = refOptUint(get, f.v); err != nil {
			return r, err
		}
	}
	if r.Status != nil && *r.Status > 999 {
		return r, fmt.Errorf("$status %d is not an HTTP status", *r.Status)
	}
	if v, ok, err := get("request_time"); err != nil {
		return r, err
	} else if ok && !refNotFound(v) {
		ms, err := decimal.ScaleFloat(v, 3)
		if err != nil || ms < 0 {
			return r, fmt.Errorf("$request_time %q is not a duration in seconds", v)
		}
		r.RequestTimeMs = record.F(ms)
	}
	if r.Method, err = refMethod(get); err != nil {
		return r, err
	}
	return r, nil
}

// timestamp reads $msec exactly ("1763769601.532" → 1763769601532), else $time_iso8601 or
// $time_local (second resolution).
func refTimestamp(get lookup) (int64, error) {
	if v, ok, err := get("msec"); err != nil {
		return 0, err
	} else if ok {
		ms, err := decimal.ScaleInt(v, 3)
		if err != nil || ms < 0 {
			return 0, fmt.Errorf("$msec %q is not seconds since the epoch", v)
		}
		return ms, nil
	}
	for _, t := range []struct{ v, layout string }{{"time_iso8601", timeISO8601Layout}, {"time_local", timeLocalLayout}} {
		v, ok, err := get(t.v)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		ts, err := time.Parse(t.layout, v)
		if err != nil {
			return 0, fmt.Errorf("$%s %q: %w", t.v, v, err)
		}
		return ts.UnixMilli(), nil
	}
	return 0, fmt.Errorf("line has no $msec, $time_iso8601 or $time_local")
}

// method is $request_method, or the first word of $request when it looks like a method.
func refMethod(get lookup) (string, error) {
	if v, ok, err := get("request_method"); err != nil || ok {
		if refNotFound(v) {
			v = ""
		}
		return v, err
	}
	v, ok, err := get("request")
	if err != nil || !ok {
		return "", err
	}
	m, _, _ := strings.Cut(v, " ")
	if !refIsMethodToken(m) {
		return "", nil // "-", or a garbage request line (a TLS handshake sent to port 80)
	}
	return m, nil
}

func refIsMethodToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// optUint reads an unsigned integer variable; "-" and "" (nginx's "not found", as for
// $tcpinfo_* when getsockopt fails) and an absent variable give nil.
func refOptUint(get lookup, v string) (*int64, error) {
	s, ok, err := get(v)
	if err != nil || !ok || refNotFound(s) {
		return nil, err
	}
	n, err := decimal.Uint(s)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", v, err)
	}
	return record.Int(n), nil
}

func refNotFound(s string) bool { return s == "" || s == "-" }
