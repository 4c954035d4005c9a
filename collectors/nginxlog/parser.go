package nginxlog

import (
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
	return p.ParseBytes([]byte(line))
}

// ParseBytes is Parse on a byte slice, which it does not keep: the record holds no
// reference to line. A Parser is safe for concurrent use.
func (p *Parser) ParseBytes(line []byte) (record.HTTPRequest, error) {
	var r record.HTTPRequest
	if err := p.parse(line, &r, new(recordInts), nil); err != nil {
		return record.HTTPRequest{}, err
	}
	return r, nil
}

// Scratch is memory that ParseInto reuses from one line to the next: the record's numbers,
// and the text of recently seen client prefixes. One per goroutine.
type Scratch struct {
	ints     recordInts
	prefixes prefixCache
}

// ParseInto parses line into *r (all of it: fields the line does not set are zeroed)
// without allocating, except for a client prefix not seen lately and an unusual line. r's
// nullable numbers point into s, so r is valid until the next ParseInto with s; encode it
// (record.AppendHTTP) or copy it before.
func (p *Parser) ParseInto(line []byte, r *record.HTTPRequest, s *Scratch) error {
	s.ints = recordInts{}
	return p.parse(line, r, &s.ints, &s.prefixes)
}

func (p *Parser) parse(line []byte, r *record.HTTPRequest, store *recordInts, pc *prefixCache) error {
	*r = record.HTTPRequest{}
	var f fields
	if p.m == nil {
		if !scanJSONLine(line, &f) {
			f = fields{}
			if err := jsonFields(line, &f); err != nil {
				return &ParseError{Reason: ReasonBadJSON, Err: err}
			}
		}
	} else if !p.m.match(line, &f) {
		return &ParseError{Reason: ReasonNoMatch, Err: p.m.diagnose(string(line))}
	}
	if err := buildRequest(&f, r, store, pc); err != nil {
		*r = record.HTTPRequest{}
		return &ParseError{Reason: ReasonBadValue, Err: err}
	}
	return nil
}
