package nginxlog

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/decimal"
	"github.com/ccab-dev/ccab/collectors/record"
)

// lookup returns a variable's value for one line: ok is false when the format (or the JSON
// line) does not carry the variable.
type lookup func(v string) (val string, ok bool, err error)

// Time formats nginx uses.
const (
	timeLocalLayout   = "02/Jan/2006:15:04:05 -0700"
	timeISO8601Layout = time.RFC3339
)

// buildRequest maps nginx variables to http_request/1 fields. Host fields are the caller's.
func buildRequest(get lookup) (record.HTTPRequest, error) {
	var r record.HTTPRequest
	var err error
	if r.TsMs, err = timestamp(get); err != nil {
		return r, err
	}
	if v, ok, err := get("remote_addr"); err != nil {
		return r, err
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
		if *f.dst, err = optUint(get, f.v); err != nil {
			return r, err
		}
	}
	if r.Status != nil && *r.Status > 999 {
		return r, fmt.Errorf("$status %d is not an HTTP status", *r.Status)
	}
	if v, ok, err := get("request_time"); err != nil {
		return r, err
	} else if ok && !notFound(v) {
		ms, err := decimal.ScaleFloat(v, 3)
		if err != nil || ms < 0 {
			return r, fmt.Errorf("$request_time %q is not a duration in seconds", v)
		}
		r.RequestTimeMs = record.F(ms)
	}
	if r.Method, err = method(get); err != nil {
		return r, err
	}
	return r, nil
}

// timestamp reads $msec exactly ("1763769601.532" → 1763769601532), else $time_iso8601 or
// $time_local (second resolution).
func timestamp(get lookup) (int64, error) {
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
func method(get lookup) (string, error) {
	if v, ok, err := get("request_method"); err != nil || ok {
		if notFound(v) {
			v = ""
		}
		return v, err
	}
	v, ok, err := get("request")
	if err != nil || !ok {
		return "", err
	}
	m, _, _ := strings.Cut(v, " ")
	if !isMethodToken(m) {
		return "", nil // "-", or a garbage request line (a TLS handshake sent to port 80)
	}
	return m, nil
}

func isMethodToken(s string) bool {
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
func optUint(get lookup, v string) (*int64, error) {
	s, ok, err := get(v)
	if err != nil || !ok || notFound(s) {
		return nil, err
	}
	n, err := decimal.Uint(s)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", v, err)
	}
	return record.Int(n), nil
}

func notFound(s string) bool { return s == "" || s == "-" }
