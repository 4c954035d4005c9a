package nginxlog

import (
	"bytes"
	"errors"
)

// stripSyslog removes the syslog header nginx writes before each line it ships with
// `access_log syslog:…` ("<190>Nov 23 19:53:35 host nginx: ", RFC 3164), the RFC 5424 form
// ("<190>1 2025-11-23T19:53:35.1Z host nginx - - - "), or, with required, the same
// without "<PRI>" as a syslog daemon writes it to a file. Without required, only a line
// that starts with "<PRI>" is touched (the caller checks autoSyslog); one whose header does
// not parse is left for the format to judge.
func stripSyslog(line []byte, required bool) ([]byte, error) {
	i := 0
	if len(line) > 0 && line[0] == '<' {
		j := 1
		for j < len(line) && j <= 4 && line[j] >= '0' && line[j] <= '9' {
			j++
		}
		if j > 1 && j < len(line) && line[j] == '>' {
			i = j + 1
		}
	}
	if i == 0 && !required {
		return line, nil
	}
	if rest, ok := syslogHeader(line[i:]); ok {
		return rest, nil
	}
	if !required {
		return line, nil
	}
	return nil, errors.New("no syslog header (RFC 3164 \"Mmm dd hh:mm:ss host tag: \" or RFC 5424) before the log line")
}

// autoSyslog reports whether SyslogAuto may strip a header from lines of format f: not
// when the line starts with a value a client controls (a crafted value could pass for a
// header and have part of itself removed), nor when the format itself starts with "<".
func autoSyslog(f Format) bool {
	if len(f.Segs) == 0 {
		return false
	}
	if s := f.Segs[0]; s.Var == "" {
		return s.Lit[0] != '<'
	}
	return varClass(f.Segs[0].Var, f.Escape).kind == classSet
}

// syslogHeader skips the header after <PRI>: RFC 5424 "1 TIMESTAMP HOST APP PROCID MSGID SD "
// or RFC 3164 "Mmm dd hh:mm:ss HOST TAG: " (TAG may carry "[pid]"; HOST may be absent).
func syslogHeader(b []byte) ([]byte, bool) {
	if len(b) > 2 && b[0] == '1' && b[1] == ' ' {
		rest := b[2:]
		for k := 0; k < 5; k++ { // TIMESTAMP HOSTNAME APP-NAME PROCID MSGID
			sp := bytes.IndexByte(rest, ' ')
			if sp <= 0 {
				return nil, false
			}
			rest = rest[sp+1:]
		}
		switch { // STRUCTURED-DATA: "-" or one or more [..]
		case bytes.HasPrefix(rest, []byte("- ")):
			rest = rest[2:]
		case len(rest) > 0 && rest[0] == '[':
			end := bytes.Index(rest, []byte("] "))
			if end < 0 {
				return nil, false
			}
			rest = rest[end+2:]
		default:
			return nil, false
		}
		return bytes.TrimPrefix(rest, []byte("\xef\xbb\xbf")), true
	}
	// "Nov 23 19:53:35" or "Nov  3 19:53:35"
	if len(b) < 16 || b[3] != ' ' || b[6] != ' ' || b[9] != ':' || b[12] != ':' || b[15] != ' ' {
		return nil, false
	}
	for _, k := range []int{0, 1, 2} {
		if c := b[k] | 0x20; c < 'a' || c > 'z' {
			return nil, false
		}
	}
	rest := b[16:]
	// HOST TAG: or TAG: — the tag ends at the first ": "
	colon := bytes.Index(rest, []byte(": "))
	if colon <= 0 || colon > 300 || bytes.Count(rest[:colon], []byte(" ")) > 1 {
		return nil, false
	}
	return rest[colon+2:], true
}
