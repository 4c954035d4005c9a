package nginxlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ccab-dev/ccab/collectors/record"
)

// FormatJSON selects JSON lines keyed by variable name.
const FormatJSON = "json"

// ErrNoTimestamp is returned by NewParser for a format without $msec, $time_iso8601 or
// $time_local: an http_request/1 record cannot exist without ts_ms.
var ErrNoTimestamp = errors.New("log_format has no $msec, $time_iso8601 or $time_local")

// Parser turns access-log lines into http_request/1 records.
type Parser struct {
	m *matcher // nil for JSON lines
}

// NewParser returns a parser for spec: FormatJSON, a predefined name, or a log_format (see
// ParseSpec); name picks a format among several directives, or names a predefined one when
// spec is empty.
func NewParser(spec, name string) (*Parser, error) {
	if spec == FormatJSON {
		return &Parser{}, nil
	}
	f, err := ParseSpec(spec, name)
	if err != nil {
		return nil, err
	}
	m, err := compile(f)
	if err != nil {
		return nil, err
	}
	if !m.has("msec") && !m.has("time_iso8601") && !m.has("time_local") {
		return nil, fmt.Errorf("log_format %s: %w", f.Name, ErrNoTimestamp)
	}
	return &Parser{m: m}, nil
}

// Missing lists the http_request/1 fields the format never fills (they will be null, or ""
// for method and peer_prefix). It is empty for JSON lines, whose keys can vary by line.
func (p *Parser) Missing() []string {
	if p.m == nil {
		return nil
	}
	var out []string
	for _, f := range []struct{ field, v, alt string }{
		{"peer_prefix", "remote_addr", ""}, {"conn_serial", "connection", ""},
		{"conn_requests", "connection_requests", ""}, {"method", "request_method", "request"},
		{"status", "status", ""}, {"bytes_sent", "bytes_sent", ""}, {"body_bytes_sent", "body_bytes_sent", ""},
		{"request_time_ms", "request_time", ""}, {"tcpinfo_rtt_us", "tcpinfo_rtt", ""},
		{"tcpinfo_rttvar_us", "tcpinfo_rttvar", ""}, {"tcpinfo_snd_cwnd", "tcpinfo_snd_cwnd", ""},
		{"tcpinfo_rcv_space", "tcpinfo_rcv_space", ""},
	} {
		if !p.m.has(f.v) && (f.alt == "" || !p.m.has(f.alt)) {
			out = append(out, f.field)
		}
	}
	return out
}

// Parse parses one line (without its newline). Host fields of the record are left empty.
func (p *Parser) Parse(line string) (record.HTTPRequest, error) {
	var get lookup
	var err error
	if p.m == nil {
		if get, err = jsonLookup(line); err != nil {
			return record.HTTPRequest{}, &ParseError{Reason: ReasonBadJSON, Err: err}
		}
	} else if get, err = p.m.match(line); err != nil {
		return record.HTTPRequest{}, &ParseError{Reason: ReasonNoMatch, Err: err}
	}
	r, err := buildRequest(get)
	if err != nil {
		return record.HTTPRequest{}, &ParseError{Reason: ReasonBadValue, Err: err}
	}
	return r, nil
}

// jsonLookup decodes one JSON object. String values are taken unquoted, numbers as their
// text (so decimals stay exact), null as "" (not found).
func jsonLookup(line string) (lookup, error) {
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
