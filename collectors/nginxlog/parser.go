package nginxlog

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ccab-dev/ccab/collectors/record"
)

// FormatJSON selects JSON lines keyed by variable name.
const FormatJSON = "json"

// ErrNoTimestamp is the error of a JSON line without $msec, $time_iso8601 or $time_local.
// A text log_format without any of them is accepted: its records carry the time the line
// was read (ts_source "read").
var ErrNoTimestamp = errors.New("log_format has no $msec, $time_iso8601 or $time_local")

// Syslog modes (Options.Syslog): how a syslog header before the access-log line is handled.
const (
	SyslogAuto = ""    // strip "<PRI>…" (RFC 3164 or RFC 5424) when a line starts with it
	SyslogOn   = "on"  // every line has a syslog header, with or without <PRI> (a file written by a syslog daemon)
	SyslogOff  = "off" // never strip anything
)

// TsSourceRead is record.HTTPRequest.TsSource when ts_ms is the time the line was read.
const TsSourceRead = "read"

// Options tune NewParserOptions.
type Options struct {
	// FieldMap maps a variable the log_format logs (name without "$"; for JSON lines, a key)
	// to the nginx variable whose record field it fills: {"my_rtt": "tcpinfo_rtt",
	// "upstream_tcpinfo_rtt": "tcpinfo_rtt"}. In a text format the variable is then read
	// (and checked) as that one; in JSON lines the key wins over the variable's own key.
	FieldMap map[string]string
	// Syslog is SyslogAuto, SyslogOn or SyslogOff.
	Syslog string
	// Now is the read time of formats without a time variable; default time.Now.
	Now func() time.Time
}

// Parser turns access-log lines into http_request/1 records.
type Parser struct {
	m        *matcher // nil for JSON lines
	syslog   string
	readTime bool // the format has no time variable: ts_ms is the read time
	now      func() time.Time
	nRead    atomic.Int64 // records stamped with the read time
	// jsonAlias: JSON keys read as another variable (a field map); such lines are read by
	// encoding/json, not the single-pass scanner.
	jsonAlias map[string]varID
}

// NewParser returns a parser for spec: FormatJSON, a predefined name, or a log_format (see
// ParseSpec); name picks a format among several directives, or names a predefined one when
// spec is empty.
func NewParser(spec, name string) (*Parser, error) {
	return NewParserOptions(spec, name, Options{})
}

// NewParserOptions is NewParser with options. A format in which a client-controlled value
// could shift a field the record reads is refused (ErrAmbiguous, with the variables and
// the reason).
func NewParserOptions(spec, name string, o Options) (*Parser, error) {
	if o.Syslog == "auto" {
		o.Syslog = SyslogAuto
	}
	switch o.Syslog {
	case SyslogAuto, SyslogOn, SyslogOff:
	default:
		return nil, fmt.Errorf("syslog mode %q is not auto, on or off", o.Syslog)
	}
	p := &Parser{syslog: o.Syslog, now: o.Now}
	if p.now == nil {
		p.now = time.Now
	}
	if spec == FormatJSON {
		if len(o.FieldMap) > 0 {
			if _, err := applyFieldMap(Format{}, o.FieldMap); err != nil {
				return nil, err
			}
			p.jsonAlias = map[string]varID{}
			for k, to := range o.FieldMap {
				p.jsonAlias[k], _ = lookupVar([]byte(to))
			}
		}
		return p, nil
	}
	f, err := ParseSpec(spec, name)
	if err != nil {
		return nil, err
	}
	if f, err = applyFieldMap(f, o.FieldMap); err != nil {
		return nil, err
	}
	m, err := compile(f)
	if err != nil {
		return nil, err
	}
	if err := checkDetermined(f); err != nil {
		return nil, err
	}
	m.autoSyslog = autoSyslog(f)
	p.m = m
	p.readTime = !m.has("msec") && !m.has("time_iso8601") && !m.has("time_local")
	return p, nil
}

// applyFieldMap renames the variables of fm in f to the variables whose fields they fill.
func applyFieldMap(f Format, fm map[string]string) (Format, error) {
	if len(fm) == 0 {
		return f, nil
	}
	keys := make([]string, 0, len(fm))
	for k := range fm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		to := fm[k]
		if !isVarName(k) {
			return f, fmt.Errorf("field map: %q is not a variable name", k)
		}
		if _, ok := lookupVar([]byte(to)); !ok {
			return f, fmt.Errorf("field map: %s=%s: %q is not a variable a record field is read from (one of %s)", k, to, to, strings.Join(varNames[:], ", "))
		}
	}
	segs := make([]Segment, len(f.Segs))
	copy(segs, f.Segs)
	for i := range segs {
		if to, ok := fm[segs[i].Var]; ok {
			segs[i].Var = to
		}
	}
	f.Segs = segs
	return f, nil
}

// ParseFieldMap reads "my_rtt=tcpinfo_rtt,upstream_tcpinfo_rtt=tcpinfo_rtt" ($ allowed).
func ParseFieldMap(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimPrefix(strings.TrimSpace(k), "$"), strings.TrimPrefix(strings.TrimSpace(v), "$")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("field map: %q is not variable=field_variable", kv)
		}
		out[k] = v
	}
	return out, nil
}

// ReadTime reports whether the format has no time variable, so that records carry the
// time their line was read (ts_source "read").
func (p *Parser) ReadTime() bool { return p.readTime }

// ReadTimeRecords counts the records stamped with the read time so far.
func (p *Parser) ReadTimeRecords() int64 { return p.nRead.Load() }

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
	if err := p.parse(line, &r, new(recordInts), nil, nil); err != nil {
		return record.HTTPRequest{}, err
	}
	return r, nil
}

// Scratch is memory that ParseInto reuses from one line to the next: the record's numbers,
// and the text of recently seen client prefixes. One per goroutine.
type Scratch struct {
	ints     recordInts
	prefixes prefixCache
	texts    record.IntTexts
}

// IntTexts is the text of the last record's integers, for record.HTTPEncoder.AppendTexts:
// slices of the line given to ParseInto, valid while it is.
func (s *Scratch) IntTexts() *record.IntTexts { return &s.texts }

// ParseInto parses line into *r (all of it: fields the line does not set are zeroed)
// without allocating, except for a client prefix not seen lately and an unusual line. r's
// nullable numbers point into s, so r is valid until the next ParseInto with s; encode it
// (record.AppendHTTP) or copy it before.
func (p *Parser) ParseInto(line []byte, r *record.HTTPRequest, s *Scratch) error {
	s.ints = recordInts{}
	s.texts = record.IntTexts{}
	return p.parse(line, r, &s.ints, &s.prefixes, &s.texts)
}

func (p *Parser) parse(line []byte, r *record.HTTPRequest, store *recordInts, pc *prefixCache, texts *record.IntTexts) error {
	*r = record.HTTPRequest{}
	var f fields
	if p.syslog == SyslogOn || p.syslog == SyslogAuto && (p.m == nil || p.m.autoSyslog) {
		var err error
		if line, err = stripSyslog(line, p.syslog == SyslogOn); err != nil {
			return &ParseError{Reason: ReasonNoMatch, Err: err}
		}
	}
	if p.m == nil && p.jsonAlias != nil {
		if err := jsonFieldsAlias(line, &f, p.jsonAlias); err != nil {
			return &ParseError{Reason: ReasonBadJSON, Err: err}
		}
	} else if p.m == nil {
		if !scanJSONLine(line, &f) {
			f = fields{}
			if err := jsonFields(line, &f); err != nil {
				return &ParseError{Reason: ReasonBadJSON, Err: err}
			}
		}
	} else if !p.m.match(line, &f) {
		return &ParseError{Reason: ReasonNoMatch, Err: p.m.diagnose(string(line))}
	}
	if err := buildRequest(&f, r, store, pc, texts, p.readTime); err != nil {
		*r = record.HTTPRequest{}
		return &ParseError{Reason: ReasonBadValue, Err: err}
	}
	if p.readTime {
		r.TsMs, r.TsSource = p.now().UnixMilli(), TsSourceRead
		p.nRead.Add(1)
	}
	return nil
}
