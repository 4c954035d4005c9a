package nginxlog

import (
	"fmt"
	"strings"
)

// Escape is a log_format's escaping mode.
type Escape string

// Escaping modes of ngx_http_log_module.
const (
	EscapeDefault Escape = "default"
	EscapeJSON    Escape = "json"
	EscapeNone    Escape = "none"
)

// Format is a parsed log_format: literal text and variables, in order.
type Format struct {
	Name   string
	Escape Escape
	Segs   []Segment
}

// Segment is literal text (Var == "") or one variable.
type Segment struct {
	Lit string
	Var string // name without "$"
}

// Predefined returns nginx's built-in formats, and the `ccab` format of docs/reference/nginx.md.
func Predefined(name string) (Format, bool) {
	var text string
	esc := EscapeDefault
	switch name {
	case "combined": // ngx_http_log_module.c
		text = `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`
	case "ccab":
		esc = EscapeJSON
		text = `{"msec":$msec,"remote_addr":"$remote_addr","connection":$connection,` +
			`"connection_requests":$connection_requests,"request_method":"$request_method","status":$status,` +
			`"bytes_sent":$bytes_sent,"body_bytes_sent":$body_bytes_sent,"request_time":$request_time,` +
			`"tcpinfo_rtt":"$tcpinfo_rtt","tcpinfo_rttvar":"$tcpinfo_rttvar",` +
			`"tcpinfo_snd_cwnd":"$tcpinfo_snd_cwnd","tcpinfo_rcv_space":"$tcpinfo_rcv_space"}`
	default:
		return Format{}, false
	}
	segs, err := splitFormat(text)
	if err != nil {
		panic("nginxlog: predefined format " + name + ": " + err.Error()) // a bug in this file
	}
	return Format{Name: name, Escape: esc, Segs: segs}, true
}

// ParseSpec reads a log_format as a user gives it:
//   - a predefined name ("combined", "ccab");
//   - one or more `log_format NAME [escape=…] '…' …;` directives (e.g. pasted from nginx.conf);
//     name picks one when there are several;
//   - `[escape=…] '…' '…'` (the directive's arguments);
//   - bare format text: `$remote_addr - $remote_user [$time_local] "$request" … $request_time`.
func ParseSpec(spec, name string) (Format, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		if f, ok := Predefined(name); ok {
			return f, nil
		}
		return Format{}, fmt.Errorf("log_format: empty format and no predefined format %q", name)
	}
	if f, ok := Predefined(s); ok {
		return f, nil
	}
	if d := skipComments(s); strings.HasPrefix(d, "log_format") || strings.HasPrefix(d, "escape=") || d != "" && (d[0] == '\'' || d[0] == '"') {
		return parseDirectives(d, name)
	}
	segs, err := splitFormat(s)
	if err != nil {
		return Format{}, err
	}
	return Format{Name: name, Escape: EscapeDefault, Segs: segs}, nil
}

// skipComments drops leading blank and "#" comment lines, as in a pasted nginx.conf excerpt.
func skipComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		if !strings.HasPrefix(s, "#") {
			return s
		}
		_, rest, ok := strings.Cut(s, "\n")
		if !ok {
			return ""
		}
		s = rest
	}
}

func parseDirectives(s, name string) (Format, error) {
	stmts, err := confStatements(s)
	if err != nil {
		return Format{}, err
	}
	var found []Format
	for _, args := range stmts {
		if len(args) == 0 {
			continue
		}
		var f Format
		if args[0] == "log_format" {
			if len(args) < 3 {
				return Format{}, fmt.Errorf("log_format: directive needs a name and a format")
			}
			f.Name, args = args[1], args[2:]
		} else {
			f.Name = name
		}
		f.Escape = EscapeDefault
		if v, ok := strings.CutPrefix(args[0], "escape="); ok {
			switch Escape(v) {
			case EscapeDefault, EscapeJSON, EscapeNone:
				f.Escape = Escape(v)
			default:
				return Format{}, fmt.Errorf("log_format %s: unknown escape=%s", f.Name, v)
			}
			args = args[1:]
		}
		if len(args) == 0 {
			return Format{}, fmt.Errorf("log_format %s: no format text", f.Name)
		}
		segs, err := splitFormat(strings.Join(args, ""))
		if err != nil {
			return Format{}, fmt.Errorf("log_format %s: %w", f.Name, err)
		}
		f.Segs = segs
		found = append(found, f)
	}
	var names []string
	for _, f := range found {
		if name == "" && len(found) == 1 || f.Name == name {
			return f, nil
		}
		names = append(names, f.Name)
	}
	if len(found) == 0 {
		return Format{}, fmt.Errorf("log_format: no format found")
	}
	return Format{}, fmt.Errorf("log_format: no format named %q among %q", name, names)
}

// confStatements splits nginx configuration text into statements of arguments, undoing
// nginx's quoting: '…' and "…" with \" \' \\ \t \r \n escapes; # comments; ';' ends a
// statement. Blocks ({…}) are not supported.
func confStatements(s string) ([][]string, error) {
	var stmts [][]string
	var cur []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == ';':
			stmts = append(stmts, cur)
			cur = nil
			i++
		case c == '{' || c == '}':
			return nil, fmt.Errorf("log_format: unexpected %q at offset %d", c, i)
		case c == '\'' || c == '"':
			var b strings.Builder
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					switch s[j+1] {
					case '"', '\'', '\\':
						b.WriteByte(s[j+1])
						j++
						continue
					case 't':
						b.WriteByte('\t')
						j++
						continue
					case 'r':
						b.WriteByte('\r')
						j++
						continue
					case 'n':
						b.WriteByte('\n')
						j++
						continue
					}
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("log_format: unterminated %c-quoted string at offset %d", c, i)
			}
			cur = append(cur, b.String())
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\r\n;'\"", rune(s[j])) {
				j++
			}
			cur = append(cur, s[i:j])
			i = j
		}
	}
	if len(cur) > 0 {
		stmts = append(stmts, cur)
	}
	return stmts, nil
}

// splitFormat splits format text into literals and variables ($name or ${name}), as
// ngx_http_log_compile does.
func splitFormat(text string) ([]Segment, error) {
	var segs []Segment
	var lit strings.Builder
	for i := 0; i < len(text); {
		if text[i] != '$' {
			lit.WriteByte(text[i])
			i++
			continue
		}
		var name string
		if i+1 < len(text) && text[i+1] == '{' {
			end := strings.IndexByte(text[i+2:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ${ at offset %d", i)
			}
			name = text[i+2 : i+2+end]
			i += 3 + end
			if !isVarName(name) {
				return nil, fmt.Errorf("invalid variable name %q at offset %d", name, i)
			}
		} else {
			j := i + 1
			for j < len(text) && isVarChar(text[j]) {
				j++
			}
			name = text[i+1 : j]
			if name == "" {
				return nil, fmt.Errorf("invalid variable at offset %d", i)
			}
			i = j
		}
		if lit.Len() > 0 {
			segs = append(segs, Segment{Lit: lit.String()})
			lit.Reset()
		}
		if n := len(segs); n > 0 && segs[n-1].Var != "" {
			return nil, fmt.Errorf("variables $%s and $%s touch: nothing tells where one ends", segs[n-1].Var, name)
		}
		segs = append(segs, Segment{Var: name})
	}
	if lit.Len() > 0 {
		segs = append(segs, Segment{Lit: lit.String()})
	}
	return segs, nil
}

func isVarChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isVarChar(s[i]) {
			return false
		}
	}
	return true
}
