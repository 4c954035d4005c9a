package nginxlog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// vclass is the alphabet of one variable's value in a text format: what nginx can write
// there. Variables nginx computes (numbers, the client's address, times) get the narrow
// alphabet of their values; every other variable may hold what a client sends, limited only
// by the format's escaping.
type vclass struct {
	kind     uint8     // classSet, classDefault, classJSON, classNone
	set      [256]bool // classSet: the value's bytes; classDefault: bytes default escaping leaves alone
	dash     bool      // classSet: "-" alone is also a value (nginx's "not found")
	nonEmpty bool      // classSet: never empty
	digits   bool      // classSet: set is setDigits
	decimal  bool      // classSet: set is setDecimal
	addr     bool      // classSet: set is setAddr
	re       string    // the regular expression of one value
}

// Value alphabets of a variable in a compiled text format.
const (
	classDefault uint8 = iota // default escaping: printable ASCII but " (written as \x22); \ only as \xHH
	classJSON                 // escape=json: ((?:[^"\\]|\\.)*?)
	classNone                 // escape=none: anything but a newline
	classSet                  // a variable nginx computes: a fixed set of bytes
)

func charSet(chars string) (s [256]bool) {
	for i := 0; i < len(chars); i++ {
		if chars[i] == '-' && i > 0 && i+1 < len(chars) {
			for c := int(chars[i-1]); c <= int(chars[i+1]); c++ {
				s[c] = true
			}
			i++
			continue
		}
		s[chars[i]] = true
	}
	return s
}

var (
	setDigits    = charSet("0-9")
	setDecimal   = charSet("0-9.")
	setAddr      = charSet("0-9a-zA-Z.:") // IPv4, IPv6, or "unix:"
	setTimeLocal = charSet("0-9a-zA-Z/:+ -")
	setTimeISO   = charSet("0-9a-zA-Z:+-")
	setPrintable = func() (s [256]bool) {
		for c := 0x20; c < 0x7f; c++ {
			s[c] = c != '"'
		}
		return s
	}()
)

// varClass returns the alphabet of variable v (its name as nginx knows it, after
// --nginx-field-map renamed it) under escaping esc.
func varClass(v string, esc Escape) vclass {
	switch v {
	case "status", "bytes_sent", "body_bytes_sent", "connection", "connection_requests", "request_length", "pid":
		return vclass{kind: classSet, set: setDigits, digits: true, nonEmpty: true, re: `([0-9]+)`}
	case "msec", "request_time", "connection_time":
		return vclass{kind: classSet, set: setDecimal, decimal: true, nonEmpty: true, re: `([0-9.]+)`}
	case "tcpinfo_rtt", "tcpinfo_rttvar", "tcpinfo_snd_cwnd", "tcpinfo_rcv_space", "remote_port", "server_port":
		// "-" when getsockopt fails, empty with escape=json; $remote_port is empty for a unix socket
		return vclass{kind: classSet, set: setDigits, digits: true, dash: true, re: `(-|[0-9]*)`}
	case "remote_addr", "server_addr":
		return vclass{kind: classSet, set: setAddr, addr: true, nonEmpty: true, re: `([0-9a-zA-Z.:]+)`}
	case "time_local":
		return vclass{kind: classSet, set: setTimeLocal, nonEmpty: true, re: `([0-9a-zA-Z/:+ \-]+)`}
	case "time_iso8601":
		return vclass{kind: classSet, set: setTimeISO, nonEmpty: true, re: `([0-9a-zA-Z:+\-]+)`}
	}
	switch esc {
	case EscapeJSON:
		return vclass{kind: classJSON, re: `((?:[^"\\]|\\.)*?)`}
	case EscapeNone:
		return vclass{kind: classNone, re: `(.*?)`}
	}
	return vclass{kind: classDefault, set: setPrintable, re: `([ !#-~]*?)`}
}

// isNumericVar reports variables whose value is a number (or "-"): a line where one holds
// something else is diagnosed as such.
func isNumericVar(v string) bool {
	c := varClass(v, EscapeDefault)
	return c.kind == classSet && (c.set == setDigits || c.set == setDecimal)
}

// alpha reports whether byte b can appear in a value of class c.
func (c *vclass) alpha(b byte) bool {
	switch c.kind {
	case classSet:
		return c.set[b] || c.dash && b == '-'
	case classDefault:
		return c.set[b]
	case classJSON:
		return b >= 0x20 // escape=json writes control bytes as \uXXXX
	}
	return b != '\n'
}

// tseg is one segment of a compiled text format.
type tseg struct {
	lit   []byte // literal text; nil for a variable
	id    varID  // the variable's slot in fields; numVars when not read (or a repeat)
	class uint8
	cls   *vclass
	kind  valueKind
}

// matcher is a compiled text format: the anchored regular expression re (one group per
// variable, in the variable's alphabet, lazy: the shortest value after which the rest
// still matches), and the same segments laid out for firstFit, which reads the common line
// in one pass without it. re also checks the format at compile time, and matches the lines
// of formats whose literals the byte matcher does not compare alike (U+FFFD, which the
// regexp also matches against an invalid byte).
type matcher struct {
	f     Format
	re    *regexp.Regexp
	index map[string]int // variable name → submatch number of its first occurrence
	segs  []tseg
	fast  bool
	lead  []byte // firstFit's plan
	steps []step
	// autoSyslog: SyslogAuto may strip a header (see autoSyslog)
	autoSyslog bool
}

func compile(f Format) (*matcher, error) {
	var b strings.Builder
	b.WriteString("^")
	index := map[string]int{}
	group := 0
	kind := kindEscDefault
	switch f.Escape {
	case EscapeJSON:
		kind = kindEscJSON
	case EscapeNone:
		kind = kindEscNone
	}
	m := &matcher{f: f, index: index, fast: true}
	for _, s := range f.Segs {
		if s.Var == "" {
			b.WriteString(regexp.QuoteMeta(s.Lit))
			m.segs = append(m.segs, tseg{lit: []byte(s.Lit), id: numVars})
			if strings.Contains(s.Lit, "\uFFFD") || s.Lit == "" {
				m.fast = false
			}
			continue
		}
		group++
		ts := tseg{id: numVars, kind: kind}
		if _, dup := index[s.Var]; !dup {
			index[s.Var] = group
			if id, ok := lookupVar([]byte(s.Var)); ok {
				ts.id = id
			}
		}
		c := varClass(s.Var, f.Escape)
		b.WriteString(c.re)
		ts.class, ts.cls = c.kind, &c
		if c.kind == classSet {
			ts.kind = kindRaw
		}
		m.segs = append(m.segs, ts)
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("log_format %s: compile: %w", f.Name, err)
	}
	m.re = re
	m.lead, m.steps = plan(m.segs)
	return m, nil
}

// has reports whether the format logs variable v.
func (m *matcher) has(v string) bool { _, ok := m.index[v]; return ok }

// match fills f with the line's values (still escaped); false when the line does not
// match.
func (m *matcher) match(line []byte, f *fields) bool {
	if !m.fast {
		return m.matchRegexp(line, f)
	}
	if m.firstFit(line, f) {
		return true
	}
	*f = fields{}
	return m.matchRegexp(line, f)
}

// step is one variable of a compiled text format, for firstFit: the variable and the
// literal after it.
type step struct {
	tseg
	next  []byte // the literal after the variable; nil when the variable ends the format
	first byte   // next[0]
	stop  byte   // the first byte the value cannot hold (classDefault: ", classNone: \n)
	// nextWord, nextMask: next as a little-endian word and the mask of its bytes, when it
	// has 1 to 8 bytes (nextMask 0 otherwise): compared with one load where 8 bytes remain
	nextWord, nextMask uint64
	// classSet: which reader (setDigits, setDecimal, setAddr, another set), and the class
	set      uint8
	dash     bool
	nonEmpty bool
	// plain (classDefault): the bytes a value may hold that are not next's first byte, so
	// that firstFit skips them in one tight loop
	plain     *[256]bool
	firstWord uint64 // first in every byte of a word
}

// Readers of a classSet value in firstFit.
const (
	setKindOther   uint8 = iota // the class's byte table ($time_local, $time_iso8601)
	setKindDigits               // digits, added up (scanDigits)
	setKindDecimal              // digits and dots, as thousandths (scanDecimal)
	setKindAddr                 // an address, IPv4 octets read (scanAddr)
)

// endsAt reports whether a value may end at line[i]: the next literal follows, or, for the
// last variable, the line ends there.
func (st *step) endsAt(line []byte, i int) bool {
	if st.nextMask != 0 && i+8 <= len(line) {
		return binary.LittleEndian.Uint64(line[i:])&st.nextMask == st.nextWord
	}
	if st.next == nil {
		return i == len(line)
	}
	return hasPrefixAt(line, i, st.next)
}

// Eight bytes at a time (SWAR): bytesLo has 1 in every byte, bytesHi 0x80.
const (
	bytesLo = 0x0101010101010101
	bytesHi = 0x8080808080808080
)

// hasZeroByte reports (non-zero) whether a byte of x is 0; exact.
func hasZeroByte(x uint64) uint64 { return (x - bytesLo) &^ x & bytesHi }

// plainWord reports whether all eight bytes of x (a little-endian load of the line) are bytes
// a default-escaped value holds (printable ASCII, 0x20–0x7e, but ") and none is the
// byte repeated in firstWord: the same answer as the plain table, for a word. Each test is
// exact (Bit Twiddling Hacks: hasless(x, 0x20), haszero).
func plainWord(x, firstWord uint64) bool { return specialBytes(x, firstWord) == 0 }

// specialBytes is non-zero when a byte of x is not one plainWord accepts.
func specialBytes(x, firstWord uint64) uint64 {
	return (x-0x20*bytesLo)&^x&bytesHi | // a byte < 0x20
		x&bytesHi | // a byte ≥ 0x80
		hasZeroByte(x^0x7f*bytesLo) | hasZeroByte(x^'"'*bytesLo) | hasZeroByte(x^firstWord)
}

// plan lays the segments out for firstFit: the leading literal, then one step per variable.
func plan(segs []tseg) (lead []byte, steps []step) {
	i := 0
	if len(segs) > 0 && segs[0].lit != nil {
		lead, i = segs[0].lit, 1
	}
	for ; i < len(segs); i += 2 {
		st := step{tseg: segs[i], stop: '"'}
		if st.class == classNone {
			st.stop = '\n'
		}
		if i+1 < len(segs) {
			st.next = segs[i+1].lit
			st.first = st.next[0]
		}
		if k := len(st.next); k >= 1 && k <= 8 {
			var w [8]byte
			copy(w[:], st.next)
			st.nextWord = binary.LittleEndian.Uint64(w[:])
			st.nextMask = ^uint64(0) >> (64 - 8*k)
		}
		if c := st.cls; st.class == classSet {
			st.dash, st.nonEmpty = c.dash, c.nonEmpty
			switch {
			case c.digits:
				st.set = setKindDigits
			case c.decimal:
				st.set = setKindDecimal
			case c.addr:
				st.set = setKindAddr
			}
		}
		if st.class == classDefault {
			st.plain = new([256]bool)
			*st.plain = setPrintable
			st.firstWord = '"' * bytesLo
			if st.next != nil {
				st.plain[st.first] = false
				st.firstWord = uint64(st.first) * bytesLo
			}
		}
		steps = append(steps, st)
	}
	return lead, steps
}

// firstFit matches the line in one pass, giving each variable its first candidate value
// (the one a backtracking search — and the regexp's leftmost-first submatches — try first)
// after which the next literal follows. When it reaches the end of the line, the regexp
// would have taken the same path; when it does not (a line that does not match, or one
// where a value holds the literal that follows it), the regexp decides.
func (m *matcher) firstFit(line []byte, f *fields) bool {
	if !bytes.HasPrefix(line, m.lead) {
		return false
	}
	pos := len(m.lead)
	n := len(line)
	for k := range m.steps {
		st := &m.steps[k]
		end := -1
		switch st.class {
		case classSet:
			if st.dash && pos < n && line[pos] == '-' && st.endsAt(line, pos+1) {
				end = pos + 1
				break
			}
			// digits, decimals and IPv4 addresses are read on the way (buildRequest then
			// skips parseUint, thousandths, parseIPv4)
			var num int64
			hasNum := false
			switch st.set {
			case setKindDigits:
				end, num = scanDigits(line, pos)
				hasNum = end > pos && end-pos <= maxFastDigits
			case setKindDecimal:
				end, num, hasNum = scanDecimal(line, pos)
			case setKindAddr:
				var a4 uint32
				end, a4, hasNum = scanAddr(line, pos)
				num = int64(a4)
			default:
				set := &st.cls.set
				end = pos
				for end < n && set[line[end]] {
					end++
				}
			}
			if st.nonEmpty && end == pos || !st.endsAt(line, end) {
				return false
			}
			if st.id != numVars {
				f.v[st.id].set(line[pos:end], st.kind, hasNum, num)
			}
			pos = end + len(st.next)
			continue
		case classDefault:
			// One pass: skip the bytes the value may hold; stop at the first byte that is the
			// next literal's start (taken when the literal follows, skipped when it may be
			// part of the value) or that the value cannot hold (", a control or non-ASCII
			// byte, which default escaping writes as \xHH).
			e := pos
			for {
				// sixteen bytes per test while they last (two independent words), then eight
				for e+16 <= n && specialBytes(binary.LittleEndian.Uint64(line[e:]), st.firstWord)|
					specialBytes(binary.LittleEndian.Uint64(line[e+8:]), st.firstWord) == 0 {
					e += 16
				}
				for e+8 <= n && plainWord(binary.LittleEndian.Uint64(line[e:]), st.firstWord) {
					e += 8
				}
				for e < n && st.plain[line[e]] {
					e++
				}
				if e == n {
					if st.next != nil {
						return false
					}
					end = n
					break
				}
				if c := line[e]; st.next == nil || c != st.first {
					return false
				} else if st.endsAt(line, e) {
					end = e
					break
				} else if !setPrintable[c] {
					return false
				}
				e++
			}
		case classNone:
			limit := n
			if i := bytes.IndexByte(line[pos:], st.stop); i >= 0 {
				if st.next == nil {
					return false
				}
				limit = pos + i + 1 // the literal may start with the stop byte
			}
			if st.next == nil {
				end = n
				break
			}
			for e := pos; e < limit; e++ {
				i := bytes.IndexByte(line[e:limit], st.first)
				if i < 0 {
					return false
				}
				e += i
				if len(st.next) == 1 || bytes.HasPrefix(line[e:], st.next) {
					end = e
					break
				}
			}
			if end < 0 {
				return false
			}
		case classJSON:
			for e := pos; ; {
				if st.next == nil && e == n || st.next != nil && e < n && line[e] == st.first && bytes.HasPrefix(line[e:], st.next) {
					end = e
					break
				}
				if e >= n || line[e] == '"' || line[e] == '\\' && (e+1 >= n || line[e+1] == '\n') {
					return false
				}
				if line[e] == '\\' {
					e++
				}
				e++
			}
		}
		if st.id != numVars {
			f.v[st.id].set(line[pos:end], st.kind, false, 0)
		}
		pos = end + len(st.next)
	}
	return pos == n
}

// scanDecimal reads the longest run of digits and dots at line[pos:] and returns where it
// ends; when the run is one that thousandths reads (1 to maxFastDigits digits, then
// optionally a dot and up to three digits), also its value in thousandths (ok).
func scanDecimal(line []byte, pos int) (end int, milli int64, ok bool) {
	n := len(line)
	end, v := scanDigits(line, pos)
	ok = end > pos && end-pos <= maxFastDigits
	frac := 0
	if end < n && line[end] == '.' {
		end++
		for end < n && line[end]-'0' <= 9 {
			if frac < 3 {
				v = v*10 + int64(line[end]-'0')
			}
			frac++
			end++
		}
	}
	for end < n && setDecimal[line[end]] { // a second dot: not a number thousandths reads
		ok = false
		end++
	}
	if !ok || frac > 3 {
		return end, 0, false
	}
	for ; frac < 3; frac++ {
		v *= 10
	}
	return end, v, true
}

// scanDigits reads the digits at line[pos:] and returns where they end and their value (when
// there are at most 18 of them; more wrap around). A byte loop: eight bytes at a time
// (counting a word's leading digits and converting them with multiplications) measured
// slower on the short numbers of a log line.
func scanDigits(line []byte, pos int) (end int, v int64) {
	end = pos
	for end < len(line) && line[end]-'0' <= 9 {
		v = v*10 + int64(line[end]-'0')
		end++
	}
	return end, v
}

// scanAddr reads the longest run of address bytes (setAddr) at line[pos:] and returns where
// it ends; when the run is a dotted quad that parseIPv4 accepts, also its four bytes, first
// in the highest (ok).
func scanAddr(line []byte, pos int) (end int, a4 uint32, ok bool) {
	n := len(line)
	end = pos
	field, digits, oct := 0, 0, 0
	ok = true
	for ; end < n; end++ {
		c := line[end]
		if c-'0' <= 9 {
			if digits > 0 && oct == 0 { // a leading zero
				ok = false
			}
			oct = oct*10 + int(c-'0')
			digits++
			if oct > 255 {
				ok, oct = false, 256 // stays out of range, never overflows
			}
		} else if c == '.' {
			if digits == 0 || field == 3 {
				ok = false
			}
			a4 = a4<<8 | uint32(oct&0xff)
			field++
			digits, oct = 0, 0
		} else {
			break
		}
	}
	for end < n && setAddr[line[end]] { // letters or colons: IPv6, "unix:"
		ok = false
		end++
	}
	if !ok || field != 3 || digits == 0 {
		return end, 0, false
	}
	return end, a4<<8 | uint32(oct), true
}

// hasPrefixAt is bytes.HasPrefix(line[i:], lit) without the call into memequal, for the
// short literals between variables.
func hasPrefixAt(line []byte, i int, lit []byte) bool {
	if len(line)-i < len(lit) {
		return false
	}
	for k, c := range lit {
		if line[i+k] != c {
			return false
		}
	}
	return true
}

func (m *matcher) matchRegexp(line []byte, f *fields) bool {
	loc := m.re.FindSubmatchIndex(line)
	if loc == nil {
		return false
	}
	g := 0
	for _, s := range m.segs {
		if s.lit != nil {
			continue
		}
		g++
		if s.id != numVars && loc[2*g] >= 0 {
			f.v[s.id].set(line[loc[2*g]:loc[2*g+1]], s.kind, false, 0)
		}
	}
	return true
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
