package nginxlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/decimal"
	"github.com/ccab-dev/ccab/collectors/record"
)

// varID names an nginx variable that an http_request/1 field is built from. Both readers
// (JSON lines and compiled text formats) fill a fields value indexed by varID; every other
// variable is matched or skipped and never stored.
type varID uint8

const (
	vMsec varID = iota
	vTimeISO8601
	vTimeLocal
	vRemoteAddr
	vConnection
	vConnectionRequests
	vStatus
	vBytesSent
	vBodyBytesSent
	vTcpinfoRTT
	vTcpinfoRTTVar
	vTcpinfoSndCwnd
	vTcpinfoRcvSpace
	vRequestTime
	vRequestMethod
	vRequest
	numVars
)

// varNames are the variables' names without "$", by varID.
var varNames = [numVars]string{
	vMsec: "msec", vTimeISO8601: "time_iso8601", vTimeLocal: "time_local", vRemoteAddr: "remote_addr",
	vConnection: "connection", vConnectionRequests: "connection_requests", vStatus: "status",
	vBytesSent: "bytes_sent", vBodyBytesSent: "body_bytes_sent", vTcpinfoRTT: "tcpinfo_rtt",
	vTcpinfoRTTVar: "tcpinfo_rttvar", vTcpinfoSndCwnd: "tcpinfo_snd_cwnd", vTcpinfoRcvSpace: "tcpinfo_rcv_space",
	vRequestTime: "request_time", vRequestMethod: "request_method", vRequest: "request",
}

// varName is the variable's name without "$" ("" for numVars).
func varName(id varID) string {
	if id >= numVars {
		return ""
	}
	return varNames[id]
}

// lookupVar returns the varID of a variable name (the switch on string(name) does not
// allocate).
func lookupVar(name []byte) (varID, bool) {
	switch string(name) {
	case "msec":
		return vMsec, true
	case "time_iso8601":
		return vTimeISO8601, true
	case "time_local":
		return vTimeLocal, true
	case "remote_addr":
		return vRemoteAddr, true
	case "connection":
		return vConnection, true
	case "connection_requests":
		return vConnectionRequests, true
	case "status":
		return vStatus, true
	case "bytes_sent":
		return vBytesSent, true
	case "body_bytes_sent":
		return vBodyBytesSent, true
	case "tcpinfo_rtt":
		return vTcpinfoRTT, true
	case "tcpinfo_rttvar":
		return vTcpinfoRTTVar, true
	case "tcpinfo_snd_cwnd":
		return vTcpinfoSndCwnd, true
	case "tcpinfo_rcv_space":
		return vTcpinfoRcvSpace, true
	case "request_time":
		return vRequestTime, true
	case "request_method":
		return vRequestMethod, true
	case "request":
		return vRequest, true
	}
	return numVars, false
}

// valueKind says how a stored value's bytes become the variable's value.
type valueKind uint8

const (
	kindAbsent     valueKind = iota // the line (or format) does not carry the variable
	kindRaw                         // b is the value
	kindNull                        // JSON null: carried, empty
	kindEscDefault                  // text format, default escaping: \xHH to undo
	kindEscJSON                     // text format, escape=json: JSON escapes to undo
	kindEscNone                     // text format, escape=none: b is the value
	kindJSONString                  // JSON line: b is a quoted string that needs decoding (escapes, invalid UTF-8)
	kindJSONOther                   // JSON line: b is true, false, an object or an array
)

type value struct {
	b    []byte
	kind valueKind
	// num is b's number when hasNum, read while the matcher scanned it: for an integer
	// variable a digits-only value of 1 to maxFastDigits digits (parseUint's result); for
	// $msec and $request_time (class decimal) the thousandths of a value thousandths reads;
	// for $remote_addr a dotted quad parseIPv4 accepts, its four bytes (first in the highest)
	hasNum bool
	num    int64
}

// set stores a value field by field: a composite literal assigned through the index is
// built on the stack and copied with 16-byte loads that cannot be forwarded from the 8-byte
// stores that built it (a store-forwarding stall on every stored value: ~13 % of
// parse-nginx's profile).
func (v *value) set(b []byte, kind valueKind, hasNum bool, num int64) {
	v.b, v.kind, v.hasNum, v.num = b, kind, hasNum, num
}

// fields holds one line's values of the variables a record reads. Byte slices point into
// the line; nothing is copied unless a value must be unescaped.
type fields struct {
	v [numVars]value
}

// get returns the value of id, unescaped; ok is false when the line does not carry it.
func (f *fields) get(id varID) (val []byte, ok bool, err error) {
	v := &f.v[id]
	switch v.kind {
	case kindAbsent:
		return nil, false, nil
	case kindRaw, kindEscNone:
		return v.b, true, nil
	case kindNull:
		return nil, true, nil
	case kindEscDefault:
		if bytes.Contains(v.b, []byte(`\x`)) {
			s, _ := unescape(string(v.b), EscapeDefault) // never fails
			return []byte(s), true, nil
		}
		return v.b, true, nil
	case kindEscJSON:
		if bytes.IndexByte(v.b, '\\') >= 0 {
			s, err := unescape(string(v.b), EscapeJSON)
			if err != nil {
				return nil, true, fmt.Errorf("$%s: %w", varName(id), err)
			}
			return []byte(s), true, nil
		}
		return v.b, true, nil
	case kindJSONString:
		var s string
		if err := json.Unmarshal(v.b, &s); err != nil {
			return nil, true, fmt.Errorf("%s: %w", varName(id), err)
		}
		return []byte(s), true, nil
	}
	return nil, true, fmt.Errorf("%s: want a string or a number, got %.20s", varName(id), json.RawMessage(v.b))
}

// Time formats nginx uses.
const (
	timeLocalLayout   = "02/Jan/2006:15:04:05 -0700"
	timeISO8601Layout = time.RFC3339
)

// recordInts backs the nullable fields of one record: one allocation instead of one per
// field.
type recordInts struct {
	ints [9]int64
	rt   record.Float
}

// prefixCache remembers the text of recently seen IPv4 /24s, so that a client seen again
// costs no allocation: a direct-mapped table keyed by the prefix.
type prefixCache [1024]struct {
	key uint32 // 1<<24 | the prefix's three bytes; 0 when empty
	s   string
}

func (pc *prefixCache) get(a [4]byte) string {
	key := 1<<24 | uint32(a[0])<<16 | uint32(a[1])<<8 | uint32(a[2])
	e := &pc[(key*2654435761)>>22]
	if e.key != key {
		var buf [len("255.255.255.0/24")]byte
		e.key, e.s = key, string(anon.AppendPeerPrefix4(buf[:0], a))
	}
	return e.s
}

// buildRequest maps nginx variables to http_request/1 fields in r (zero on entry); its
// nullable numbers point into store. pc may be nil. Host fields are the caller's. texts (nil
// or zero on entry) receives the integers whose text in the line is their canonical decimal.
func buildRequest(f *fields, r *record.HTTPRequest, store *recordInts, pc *prefixCache, texts *record.IntTexts, readTime bool) error {
	var err error
	if !readTime {
		if r.TsMs, err = timestamp(f); err != nil {
			return err
		}
	}
	if rv := &f.v[vRemoteAddr]; rv.hasNum {
		a4 := [4]byte{byte(rv.num >> 24), byte(rv.num >> 16), byte(rv.num >> 8), byte(rv.num)}
		if pc != nil {
			r.PeerPrefix = pc.get(a4)
		} else {
			var buf [len("255.255.255.0/24")]byte
			r.PeerPrefix = string(anon.AppendPeerPrefix4(buf[:0], a4))
		}
	} else if v, ok, err := f.get(vRemoteAddr); err != nil {
		return err
	} else if ok {
		switch a4, ok4 := parseIPv4(v); {
		case string(v) == "unix:": // a unix-socket client: no address, no prefix
			r.PeerPrefixNull = true
		case ok4 && pc != nil:
			r.PeerPrefix = pc.get(a4)
		case ok4:
			var buf [len("255.255.255.0/24")]byte
			r.PeerPrefix = string(anon.AppendPeerPrefix4(buf[:0], a4))
		default:
			a, perr := netip.ParseAddr(string(v))
			if perr != nil {
				return fmt.Errorf("$remote_addr %q is not an IP address", v)
			}
			r.PeerPrefix = anon.PeerPrefix(a)
		}
	}
	n := 0
	for k, u := range [...]struct {
		id  varID
		dst **int64
	}{
		{vConnection, &r.ConnSerial}, {vConnectionRequests, &r.ConnRequests}, {vStatus, &r.Status},
		{vBytesSent, &r.BytesSent}, {vBodyBytesSent, &r.BodyBytesSent},
		{vTcpinfoRTT, &r.TcpinfoRTTUs}, {vTcpinfoRTTVar, &r.TcpinfoRTTVarUs},
		{vTcpinfoSndCwnd, &r.TcpinfoSndCwnd}, {vTcpinfoRcvSpace, &r.TcpinfoRcvSpace},
	} {
		fv := &f.v[u.id]
		v := fv.num
		if fv.hasNum {
			// digits only (1 to maxFastDigits): canonical unless a leading zero
			if texts != nil && (len(fv.b) == 1 || fv.b[0] != '0') {
				texts[k] = fv.b
			}
		} else {
			s, ok, err := f.get(u.id)
			if err != nil {
				return err
			}
			if !ok || notFound(s) {
				continue
			}
			if v, err = parseUint(s); err != nil {
				return fmt.Errorf("$%s: %w", varName(u.id), err)
			}
		}
		store.ints[n] = v
		*u.dst = &store.ints[n]
		n++
	}
	if r.Status != nil && *r.Status > 999 {
		return fmt.Errorf("$status %d is not an HTTP status", *r.Status)
	}
	if v := &f.v[vRequestTime]; v.hasNum {
		store.rt = record.Float(v.num) // thousandths: secondsToMs's fast path
		r.RequestTimeMs = &store.rt
	} else if v, ok, err := f.get(vRequestTime); err != nil {
		return err
	} else if ok && !notFound(v) {
		ms, err := secondsToMs(v)
		if err != nil || ms < 0 {
			return fmt.Errorf("$request_time %q is not a duration in seconds", v)
		}
		store.rt = record.Float(ms)
		r.RequestTimeMs = &store.rt
	}
	r.Method, err = method(f)
	return err
}

// timestamp reads $msec exactly ("1763769601.532" → 1763769601532), else $time_iso8601 or
// $time_local (second resolution).
func timestamp(f *fields) (int64, error) {
	if v := &f.v[vMsec]; v.hasNum {
		return v.num, nil // thousandths: epochMs's fast path
	}
	if v, ok, err := f.get(vMsec); err != nil {
		return 0, err
	} else if ok {
		ms, err := epochMs(v)
		if err != nil || ms < 0 {
			return 0, fmt.Errorf("$msec %q is not seconds since the epoch", v)
		}
		return ms, nil
	}
	for _, t := range [...]struct {
		id     varID
		layout string
	}{{vTimeISO8601, timeISO8601Layout}, {vTimeLocal, timeLocalLayout}} {
		v, ok, err := f.get(t.id)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		if t.id == vTimeLocal {
			if ms, ok := parseTimeLocal(v); ok {
				return ms, nil
			}
		}
		ts, err := time.Parse(t.layout, string(v))
		if err != nil {
			return 0, fmt.Errorf("$%s %q: %w", varName(t.id), v, err)
		}
		return ts.UnixMilli(), nil
	}
	return 0, fmt.Errorf("line has no $msec, $time_iso8601 or $time_local")
}

// method is $request_method, or the first word of $request when it looks like a method.
func method(f *fields) (string, error) {
	if v, ok, err := f.get(vRequestMethod); err != nil || ok {
		if err != nil || notFound(v) {
			return "", err
		}
		return methodString(v), nil
	}
	var m []byte
	raw := false
	if rv := &f.v[vRequest]; rv.kind == kindEscDefault {
		// Default escaping: when no \xHH comes before the first space, unescaping the whole
		// request (which cannot fail) leaves its first word as it is: read it raw. One pass
		// over the first word finds its end and checks that it is a method token.
		b := rv.b
		raw = true
		token := true
		i := 0
		for ; i < len(b) && b[i] != ' '; i++ {
			c := b[i]
			if c == '\\' {
				raw = false
				break
			}
			token = token && (c >= 'A' && c <= 'Z' || c == '-' || c == '_')
		}
		if raw {
			if !token || i == 0 || i > 32 {
				return "", nil // as isMethodToken below
			}
			return methodString(b[:i]), nil
		}
	}
	if !raw {
		v, ok, err := f.get(vRequest)
		if err != nil || !ok {
			return "", err
		}
		m = v
		if i := bytes.IndexByte(v, ' '); i >= 0 {
			m = v[:i]
		}
	}
	if !isMethodToken(m) {
		return "", nil // "-", or a garbage request line (a TLS handshake sent to port 80)
	}
	return methodString(m), nil
}

// methodString returns the common methods without allocating.
func methodString(m []byte) string {
	switch string(m) {
	case "GET":
		return "GET"
	case "HEAD":
		return "HEAD"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "OPTIONS":
		return "OPTIONS"
	case "PATCH":
		return "PATCH"
	case "CONNECT":
		return "CONNECT"
	case "PROPFIND":
		return "PROPFIND"
	}
	return string(m)
}

func isMethodToken(s []byte) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// notFound reports nginx's "not found" ("-", or "" as with $tcpinfo_* when getsockopt
// fails); such a variable gives null.
func notFound(s []byte) bool { return len(s) == 0 || len(s) == 1 && s[0] == '-' }

// The number readers below take the common shapes byte by byte and hand everything else
// to package decimal, so the results (and errors) are decimal's.

// maxFastDigits keeps fast-path integers far from overflow.
const maxFastDigits = 15

// parseUint is decimal.Uint.
func parseUint(s []byte) (int64, error) {
	if len(s) > 0 && len(s) <= maxFastDigits {
		var v int64
		for _, c := range s {
			if c < '0' || c > '9' {
				return decimal.Uint(string(s))
			}
			v = v*10 + int64(c-'0')
		}
		return v, nil
	}
	return decimal.Uint(string(s))
}

// thousandths reads "123", "123." and "123.4" to "123.456" as an integer count of
// thousandths; ok is false for any other shape.
func thousandths(s []byte) (int64, bool) {
	var v int64
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		v = v*10 + int64(s[i]-'0')
	}
	if i == 0 || i > maxFastDigits {
		return 0, false
	}
	frac := 0
	if i < len(s) {
		if s[i] != '.' {
			return 0, false
		}
		for i++; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' || frac == 3 {
				return 0, false
			}
			v = v*10 + int64(s[i]-'0')
			frac++
		}
	}
	for ; frac < 3; frac++ {
		v *= 10
	}
	return v, true
}

// epochMs is decimal.ScaleInt(s, 3): seconds with a fraction to integer milliseconds.
func epochMs(s []byte) (int64, error) {
	if v, ok := thousandths(s); ok {
		return v, nil
	}
	return decimal.ScaleInt(string(s), 3)
}

// secondsToMs is decimal.ScaleFloat(s, 3). A fast-path value is an exact integer: the
// conversion rounds it to the nearest float64 as strconv.ParseFloat does in decimal.
func secondsToMs(s []byte) (float64, error) {
	if v, ok := thousandths(s); ok {
		return float64(v), nil
	}
	return decimal.ScaleFloat(string(s), 3)
}

// parseIPv4 reads a dotted quad as netip.ParseAddr accepts it (no leading zeros, each
// octet ≤ 255); ok is false for anything else, which netip then judges.
func parseIPv4(s []byte) ([4]byte, bool) {
	var a [4]byte
	field, digits, v := 0, 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits > 0 && v == 0 { // leading zero
				return a, false
			}
			v = v*10 + int(c-'0')
			digits++
			if v > 255 {
				return a, false
			}
		case c == '.' && digits > 0 && field < 3:
			a[field] = byte(v)
			field++
			digits, v = 0, 0
		default:
			return a, false
		}
	}
	if field != 3 || digits == 0 {
		return a, false
	}
	a[3] = byte(v)
	return a, true
}

// parseTimeLocal reads $time_local ("22/Nov/2025:00:00:01 +0000") as time.Parse with
// timeLocalLayout would, in unix milliseconds; ok is false for anything but the canonical
// shape with in-range fields (time.Parse then decides).
func parseTimeLocal(s []byte) (int64, bool) {
	if len(s) != len(timeLocalLayout) || s[2] != '/' || s[6] != '/' || s[11] != ':' || s[14] != ':' ||
		s[17] != ':' || s[20] != ' ' || (s[21] != '+' && s[21] != '-') {
		return 0, false
	}
	num := func(i, n int) (int, bool) {
		v := 0
		for _, c := range s[i : i+n] {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	day, ok1 := num(0, 2)
	year, ok2 := num(7, 4)
	hour, ok3 := num(12, 2)
	minute, ok4 := num(15, 2)
	sec, ok5 := num(18, 2)
	zh, ok6 := num(22, 2)
	zm, ok7 := num(24, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return 0, false
	}
	month := 0
	switch string(s[3:6]) {
	case "Jan":
		month = 1
	case "Feb":
		month = 2
	case "Mar":
		month = 3
	case "Apr":
		month = 4
	case "May":
		month = 5
	case "Jun":
		month = 6
	case "Jul":
		month = 7
	case "Aug":
		month = 8
	case "Sep":
		month = 9
	case "Oct":
		month = 10
	case "Nov":
		month = 11
	case "Dec":
		month = 12
	default:
		return 0, false
	}
	if day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 || zh > 23 || zm > 59 {
		return 0, false
	}
	secs := daysFromCivil(year, month, day)*86400 + int64(hour*3600+minute*60+sec)
	off := int64(zh*3600 + zm*60)
	if s[21] == '-' {
		off = -off
	}
	return (secs - off) * 1000, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil is the number of days from 1970-01-01 to y-m-d (proleptic Gregorian;
// Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}
