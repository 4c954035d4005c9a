package nginxlog

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// isNumericVar reports variables that always print as digits and a dot, or "-" when not
// found. Their narrow alphabet lets the matcher split "[$remote_addr:$remote_port]" right for
// an IPv6 client.
func isNumericVar(v string) bool {
	switch v {
	case "msec", "request_time", "status", "bytes_sent", "body_bytes_sent", "connection",
		"connection_requests", "connection_time", "request_length", "remote_port", "server_port",
		"pid", "content_length", "tcpinfo_rtt", "tcpinfo_rttvar", "tcpinfo_snd_cwnd", "tcpinfo_rcv_space":
		return true
	}
	return false
}

// matcher is a compiled text format.
type matcher struct {
	f     Format
	re    *regexp.Regexp
	index map[string]int // variable name → submatch number of its first occurrence
}

func compile(f Format) (*matcher, error) {
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
		switch {
		case isNumericVar(s.Var):
			b.WriteString(`(-|[0-9.]*)`)
		case f.Escape == EscapeJSON:
			b.WriteString(`((?:[^"\\]|\\.)*?)`)
		case f.Escape == EscapeNone:
			b.WriteString(`(.*?)`)
		default:
			b.WriteString(`([^"]*?)`)
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("log_format %s: compile: %w", f.Name, err)
	}
	return &matcher{f: f, re: re, index: index}, nil
}

// has reports whether the format logs variable v.
func (m *matcher) has(v string) bool { _, ok := m.index[v]; return ok }

// match returns a lookup of the line's variable values, unescaped.
func (m *matcher) match(line string) (lookup, error) {
	loc := m.re.FindStringSubmatchIndex(line)
	if loc == nil {
		return nil, m.diagnose(line)
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

// diagnose explains a line that does not match: it follows the format, taking each
// variable's value up to the first occurrence of the literal after it, and names the first
// literal it cannot find or the first numeric variable whose value is not a number.
func (m *matcher) diagnose(line string) error {
	pos := 0
	prevVar := ""
	for i, s := range m.f.Segs {
		if s.Var != "" {
			prevVar = s.Var
			if i == len(m.f.Segs)-1 {
				if err := m.badValue(s.Var, line[pos:]); err != nil {
					return err
				}
				pos = len(line)
			}
			continue
		}
		if prevVar == "" {
			if !strings.HasPrefix(line, s.Lit) {
				return fmt.Errorf("line does not match log_format %s: does not start with %q", m.f.Name, s.Lit)
			}
			pos = len(s.Lit)
			continue
		}
		at := strings.Index(line[pos:], s.Lit)
		if at < 0 {
			return fmt.Errorf("line does not match log_format %s: no %q after $%s (byte %d)", m.f.Name, s.Lit, prevVar, pos)
		}
		if err := m.badValue(prevVar, line[pos:pos+at]); err != nil {
			return err
		}
		pos += at + len(s.Lit)
		prevVar = ""
	}
	if pos != len(line) {
		return fmt.Errorf("line does not match log_format %s: extra text at byte %d", m.f.Name, pos)
	}
	return fmt.Errorf("line does not match log_format %s: a value holds characters its escaping forbids", m.f.Name)
}

// badValue reports a numeric variable whose value is not digits and dots (or "-").
func (m *matcher) badValue(v, val string) error {
	if !isNumericVar(v) || val == "-" || strings.Trim(val, "0123456789.") == "" {
		return nil
	}
	return fmt.Errorf("line does not match log_format %s: $%s %q is not a number", m.f.Name, v, val)
}

// unescape undoes nginx's escaping of one value.
func unescape(raw string, esc Escape) (string, error) {
	switch esc {
	case EscapeJSON:
		if !strings.Contains(raw, `\`) {
			return raw, nil
		}
		var s string
		if err := json.Unmarshal([]byte(`"`+raw+`"`), &s); err != nil {
			return "", fmt.Errorf("bad JSON escape in %q", raw)
		}
		return s, nil
	case EscapeNone:
		return raw, nil
	}
	if !strings.Contains(raw, `\x`) {
		return raw, nil
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+3 < len(raw) && raw[i+1] == 'x' {
			if v, err := strconv.ParseUint(raw[i+2:i+4], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(raw[i])
	}
	return b.String(), nil
}
