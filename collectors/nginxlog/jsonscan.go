package nginxlog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// JSON access-log lines are read in one pass by scanJSONLine: keys are compared with the
// variable names a record reads, other values are skipped (and checked, so that only valid
// JSON is accepted), and read values are kept as slices of the line. Anything the scanner
// does not handle — a line that is not valid JSON, an escaped key, a read variable holding
// true/false/an object/an array, very deep nesting — goes to jsonFields, the general path
// (encoding/json into a map), which decides, and words the error. Both give the same
// fields for every line the scanner accepts (FuzzJSONScanner checks that).

// maxJSONDepth bounds the nesting the scanner follows before it leaves a line to the
// general path.
const maxJSONDepth = 64

// scanJSONLine reads the JSON object line into f; ok is false when the general path must
// decide. As with a map, a repeated key's last value counts.
func scanJSONLine(line []byte, f *fields) bool {
	i := skipWS(line, 0)
	if i >= len(line) || line[i] != '{' {
		return false
	}
	i = skipWS(line, i+1)
	if i < len(line) && line[i] == '}' {
		return skipWS(line, i+1) == len(line)
	}
	expect := vMsec
	for {
		// The ccab log_format's keys come in a known order: try the expected one first, with
		// its quotes and colon (`"msec":`).
		id, known := expect, true
		if expect != numVars && quotedKeys[expect].at(line, i) {
			i += quotedKeys[expect].n
		} else {
			if i >= len(line) || line[i] != '"' {
				return false
			}
			ks := i + 1
			j := ks
			for j < len(line) && keyByte[line[j]] {
				j++
			}
			if j >= len(line) || line[j] != '"' {
				return false // an escaped key (or a bad one): the general path compares it unescaped
			}
			id, known = lookupVar(line[ks:j])
			i = skipWS(line, j+1)
			if i >= len(line) || line[i] != ':' {
				return false
			}
			i++
		}
		expect = numVars
		if known {
			expect = ccabNext(id)
		}
		i = skipWS(line, i)
		if i >= len(line) {
			return false
		}
		if known && line[i] == '"' {
			// a string of digits (an integer variable: $tcpinfo_*) or of address bytes
			// ($remote_addr) read in one pass, its number on the way, as stringNum would
			if e, num, hasNum, ok := plainStringNum(line, i+1, id); ok {
				f.v[id].set(line[i+1:e], kindRaw, hasNum, num)
				i = e + 1
				goto next
			}
		}
		switch c := line[i]; {
		case c == '"':
			end, esc, high, ok := scanString(line, i)
			if !ok {
				return false
			}
			if known {
				content := line[i+1 : end-1]
				if esc || high && !utf8.Valid(content) {
					f.v[id].set(line[i:end], kindJSONString, false, 0)
				} else {
					num, hasNum := stringNum(id, content)
					f.v[id].set(content, kindRaw, hasNum, num)
				}
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end, jn, ok := scanNumberNum(line, i)
			if !ok {
				return false
			}
			if known {
				num, hasNum := jn.value(id)
				f.v[id].set(line[i:end], kindRaw, hasNum, num)
			}
			i = end
		case c == 'n':
			if !bytes.HasPrefix(line[i:], []byte("null")) {
				return false
			}
			if known {
				f.v[id].set(nil, kindNull, false, 0)
			}
			i += 4
		default:
			if known {
				return false // true/false/object/array where a value is read: the general path words the error
			}
			end, ok := skipValue(line, i, 0)
			if !ok {
				return false
			}
			i = end
		}
	next:
		i = skipWS(line, i)
		if i >= len(line) {
			return false
		}
		switch line[i] {
		case ',':
			i = skipWS(line, i+1)
		case '}':
			return skipWS(line, i+1) == len(line)
		default:
			return false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// ccabNext is the key after id in the ccab log_format of docs/reference/nginx.md.
func ccabNext(id varID) varID {
	switch id {
	case vMsec:
		return vRemoteAddr
	case vRemoteAddr:
		return vConnection
	case vConnection:
		return vConnectionRequests
	case vConnectionRequests:
		return vRequestMethod
	case vRequestMethod:
		return vStatus
	case vStatus:
		return vBytesSent
	case vBytesSent:
		return vBodyBytesSent
	case vBodyBytesSent:
		return vRequestTime
	case vRequestTime:
		return vTcpinfoRTT
	case vTcpinfoRTT:
		return vTcpinfoRTTVar
	case vTcpinfoRTTVar:
		return vTcpinfoSndCwnd
	case vTcpinfoSndCwnd:
		return vTcpinfoRcvSpace
	}
	return numVars
}

// Byte classes of the scanner.
var (
	keyByte  = byteSet(func(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' }) // key bytes read as they are
	strPlain = byteSet(func(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf })
)

func byteSet(in func(byte) bool) (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = in(byte(c))
	}
	return t
}

// scanString checks the JSON string starting at the quote b[i] and returns the index after
// its closing quote, whether it holds escapes, and whether it holds bytes ≥ 0x80.
func scanString(b []byte, i int) (end int, esc, high, ok bool) {
	j := i + 1
	for {
		for j < len(b) && strPlain[b[j]] {
			j++
		}
		if j >= len(b) {
			return 0, false, false, false
		}
		switch c := b[j]; {
		case c == '"':
			return j + 1, esc, high, true
		case c == '\\':
			esc = true
			if j+1 >= len(b) {
				return 0, false, false, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return 0, false, false, false
				}
				j += 6
			default:
				return 0, false, false, false
			}
		case c < 0x20:
			return 0, false, false, false
		default: // ≥ 0x80
			high = true
			j++
		}
	}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber checks the JSON number at b[i] (-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)
// and returns the index after it.
func scanNumber(b []byte, i int) (int, bool) {
	end, _, ok := scanNumberNum(b, i)
	return end, ok
}

// jsonNum is what scanNumberNum reads of a number on the way: its integer digits and up to
// three digits of its fraction, as one integer v.
type jsonNum struct {
	v           int64
	intN, fracN int  // digits before and after the dot
	signOrExp   bool // a minus sign or an exponent: no fast value
}

// value is the number as buildRequest reads variable id from its text (hasNum: thousandths
// for $msec and $request_time, parseUint for the integer variables); ok is false when
// buildRequest must read the text itself.
func (n jsonNum) value(id varID) (num int64, ok bool) {
	if n.signOrExp || n.intN < 1 || n.intN > maxFastDigits {
		return 0, false
	}
	switch id {
	case vMsec, vRequestTime:
		if n.fracN > 3 {
			return 0, false
		}
		v := n.v
		for k := n.fracN; k < 3; k++ {
			v *= 10
		}
		return v, true
	case vConnection, vConnectionRequests, vStatus, vBytesSent, vBodyBytesSent,
		vTcpinfoRTT, vTcpinfoRTTVar, vTcpinfoSndCwnd, vTcpinfoRcvSpace:
		return n.v, n.fracN == 0
	}
	return 0, false
}

// stringNum is jsonNum.value for a string value's raw content (no escapes): the integer
// variables' digits, $msec and $request_time as thousandths, $remote_addr's IPv4 octets (as
// a text format's scanner stores them).
func stringNum(id varID, s []byte) (num int64, ok bool) {
	switch id {
	case vMsec, vRequestTime:
		return thousandths(s)
	case vConnection, vConnectionRequests, vStatus, vBytesSent, vBodyBytesSent,
		vTcpinfoRTT, vTcpinfoRTTVar, vTcpinfoSndCwnd, vTcpinfoRcvSpace:
		end, v := scanDigits(s, 0)
		return v, end == len(s) && end >= 1 && end <= maxFastDigits
	case vRemoteAddr:
		end, a4, ok := scanAddr(s, 0)
		return int64(a4), ok && end == len(s)
	}
	return 0, false
}

// plainStringNum reads the content of the string that starts at line[i] (after its quote)
// when id is an integer variable and the content is digits, or id is $remote_addr and the
// content is address bytes: e is the closing quote, num and hasNum as stringNum gives them.
// ok is false for any other string (scanString reads it).
func plainStringNum(line []byte, i int, id varID) (e int, num int64, hasNum, ok bool) {
	switch id {
	case vConnection, vConnectionRequests, vStatus, vBytesSent, vBodyBytesSent,
		vTcpinfoRTT, vTcpinfoRTTVar, vTcpinfoSndCwnd, vTcpinfoRcvSpace:
		e, num = scanDigits(line, i)
		hasNum = e > i && e-i <= maxFastDigits
	case vRemoteAddr:
		var a4 uint32
		e, a4, hasNum = scanAddr(line, i)
		num = int64(a4)
	default:
		return 0, 0, false, false
	}
	if e >= len(line) || line[e] != '"' {
		return 0, 0, false, false
	}
	return e, num, hasNum, true
}

// scanNumberNum is scanNumber, reading the number's digits on the way (jsonNum).
func scanNumberNum(b []byte, i int) (int, jsonNum, bool) {
	var n jsonNum
	if i < len(b) && b[i] == '-' {
		n.signOrExp = true
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		n.intN = 1
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			n.v = n.v*10 + int64(b[i]-'0')
			i++
		}
		n.intN = i - start
	default:
		return 0, n, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			if i-start < 3 {
				n.v = n.v*10 + int64(b[i]-'0')
			}
			i++
		}
		if i == start {
			return 0, n, false
		}
		n.fracN = i - start
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		n.signOrExp = true
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
		if i == start {
			return 0, n, false
		}
	}
	return i, n, true
}

// quotedKey is a variable's name in quotes and the colon after it, as 8-byte words for at.
type quotedKey struct {
	s    string
	n    int
	w, m [3]uint64 // the words of s and the masks of their bytes
}

// quotedKeys are the keys scanJSONLine expects, by varID.
var quotedKeys = func() (k [numVars]quotedKey) {
	for id := varID(0); id < numVars; id++ {
		q := &k[id]
		q.s = `"` + varName(id) + `":`
		q.n = len(q.s)
		var buf [24]byte
		copy(buf[:], q.s)
		for w := 0; w < 3; w++ {
			q.w[w] = binary.LittleEndian.Uint64(buf[8*w:])
			for b := 0; b < 8; b++ {
				if 8*w+b < q.n {
					q.m[w] |= 0xff << (8 * b)
				}
			}
		}
	}
	return k
}()

// at reports whether line[i:] starts with the key: three masked word compares where 24
// bytes remain (no call), else a string compare.
func (q *quotedKey) at(line []byte, i int) bool {
	if i+24 > len(line) {
		return i+q.n <= len(line) && string(line[i:i+q.n]) == q.s
	}
	d := (binary.LittleEndian.Uint64(line[i:]) ^ q.w[0]) & q.m[0]
	if q.n > 8 {
		d |= (binary.LittleEndian.Uint64(line[i+8:]) ^ q.w[1]) & q.m[1]
		if q.n > 16 {
			d |= (binary.LittleEndian.Uint64(line[i+16:]) ^ q.w[2]) & q.m[2]
		}
	}
	return d == 0
}

// skipValue checks the JSON value at b[i] and returns the index after it.
func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, _, ok := scanString(b, i)
		return end, ok
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '{' || c == '[':
		if depth >= maxJSONDepth {
			return 0, false
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, true
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return 0, false
				}
				end, _, _, ok := scanString(b, i)
				if !ok {
					return 0, false
				}
				i = skipWS(b, end)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipWS(b, i+1)
			}
			end, ok := skipValue(b, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipWS(b, end)
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case ',':
				i = skipWS(b, i+1)
			case closer:
				return i + 1, true
			default:
				return 0, false
			}
		}
	}
	return 0, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return 0, false
	}
	return i + len(lit), true
}

// jsonFields is the general path for JSON lines: encoding/json decodes the whole object
// into a map; string values are decoded when read, numbers kept as their text (so decimals
// stay exact), null is "carried, empty".
func jsonFields(line []byte, f *fields) error {
	return jsonFieldsAlias(line, f, nil)
}

// jsonFieldsAlias is jsonFields where alias[key] names the variable a key is read as (a
// field map): such a key wins over the variable's own key.
func jsonFieldsAlias(line []byte, f *fields, alias map[string]varID) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	keys := [numVars]string{}
	for id := varID(0); id < numVars; id++ {
		keys[id] = varName(id)
	}
	for k, id := range alias {
		if _, ok := obj[k]; ok {
			keys[id] = k
		}
	}
	for id := varID(0); id < numVars; id++ {
		raw, ok := obj[keys[id]]
		if !ok {
			continue
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case bytes.Equal(raw, []byte("null")):
			f.v[id].set(nil, kindNull, false, 0)
		case len(raw) > 0 && raw[0] == '"':
			f.v[id].set(raw, kindJSONString, false, 0)
		case len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
			f.v[id].set(raw, kindRaw, false, 0)
		default:
			f.v[id].set(raw, kindJSONOther, false, 0)
		}
	}
	return nil
}
