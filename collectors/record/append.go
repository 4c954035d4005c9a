package record

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// AppendHTTP appends r as one JSON object (no newline) to dst: the same bytes as
// encoding/json with HTML escaping off, keys in contract order, written with appendInt and strconv.AppendFloat
// and constant key text instead of reflection. On error (a float that is not finite) dst
// is returned unchanged.
func AppendHTTP(dst []byte, r *HTTPRequest) ([]byte, error) {
	return appendHTTP(dst, r, nil, nil)
}

// noTexts: no integer given as text.
var noTexts IntTexts

// HTTPEncoder is AppendHTTP for a stream of records that share their host fields (the
// records of one collector): it keeps the encoded text of the last schema and host fields
// (pop, host, kernel, arm, rollout_id, cc) and copies it while they stay equal, instead of
// escaping six strings per record. Same bytes as AppendHTTP. One per goroutine; the zero
// value is ready.
type HTTPEncoder struct {
	schema    string
	schemaEnc []byte // `{"schema":"…","ts_ms":`
	host      [6]string
	hostEnc   []byte // `,"pop":"…",…,"cc":"…","peer_prefix":`
	rate      Float
	rateEnc   []byte // `,"sample_rate":…` (nil: not encoded yet)
}

// sameHost reports whether r's host fields are e.host: the strings of one Meta stamped on
// every record share their bytes, so equal pointers and lengths answer without comparing
// the text; otherwise the text decides.
func (e *HTTPEncoder) sameHost(r *HTTPRequest) bool {
	return sameString(r.Pop, e.host[0]) && sameString(r.Host, e.host[1]) && sameString(r.Kernel, e.host[2]) &&
		sameString(r.Arm, e.host[3]) && sameString(r.RolloutID, e.host[4]) && sameString(r.CC, e.host[5])
}

func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// Append appends r to dst as AppendHTTP does.
func (e *HTTPEncoder) Append(dst []byte, r *HTTPRequest) ([]byte, error) {
	return appendHTTP(dst, r, e, nil)
}

// IntTexts is the decimal text of a record's nullable integers as a parser read them, in
// contract order: conn_serial, conn_requests, status, bytes_sent, body_bytes_sent,
// tcpinfo_rtt_us, tcpinfo_rttvar_us, tcpinfo_snd_cwnd, tcpinfo_rcv_space. A text that is not
// nil must be exactly strconv.FormatInt of its field's value (digits, no leading zero) and at
// most 15 bytes; the encoder copies it instead of formatting the number.
type IntTexts [9][]byte

// AppendTexts is Append with the integers' text from t where it is given: the same bytes,
// copied from the parsed line instead of formatted.
func (e *HTTPEncoder) AppendTexts(dst []byte, r *HTTPRequest, t *IntTexts) ([]byte, error) {
	return appendHTTP(dst, r, e, t)
}

// appendIntText appends v, from its text when t (when not nil) gives it: one 8-byte copy when
// the text has 8 bytes of capacity behind it (a slice of a longer line) and b has room; like
// appendIntW it may write up to 8 bytes past the number.
func appendIntText(b []byte, v *int64, t []byte) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	if t == nil {
		return appendIntW(b, *v)
	}
	if n := len(t); n <= 8 && cap(t) >= 8 && cap(b)-len(b) >= 8 {
		l := len(b)
		binary.LittleEndian.PutUint64(b[l:l+8], binary.LittleEndian.Uint64(t[:8]))
		return b[:l+n]
	}
	return append(b, t...)
}

// appendHTTP is AppendHTTP, with the schema and host text from e when e is not nil, and
// integer text from t when t is not nil.
func appendHTTP(dst []byte, r *HTTPRequest, e *HTTPEncoder, t *IntTexts) ([]byte, error) {
	if t == nil {
		t = &noTexts
	}
	var b []byte
	if e == nil {
		b = appendHTTPSchema(dst, r.Schema)
	} else {
		if e.schemaEnc == nil || r.Schema != e.schema {
			e.schema, e.schemaEnc = r.Schema, appendHTTPSchema(nil, r.Schema)
		}
		b = append(dst, e.schemaEnc...)
	}
	b = appendIntW(b, r.TsMs) // the host text follows
	if e == nil {
		b = appendHTTPHost(b, r)
	} else {
		if e.hostEnc == nil || !e.sameHost(r) {
			e.host, e.hostEnc = [6]string{r.Pop, r.Host, r.Kernel, r.Arm, r.RolloutID, r.CC}, appendHTTPHost(nil, r)
		}
		b = append(b, e.hostEnc...)
	}
	if r.PeerPrefixNull {
		b = append(b, "null"...)
	} else {
		b = appendString(b, r.PeerPrefix)
	}
	b = appendIntText(appendKey(b, &keyConnSerial), r.ConnSerial, t[0])
	b = appendIntText(appendKey(b, &keyConnRequests), r.ConnRequests, t[1])
	b = appendKey(b, &keyMethod)
	b = appendString(b, r.Method)
	b = appendIntText(appendKey(b, &keyStatus), r.Status, t[2])
	b = appendIntText(appendKey(b, &keyBytesSent), r.BytesSent, t[3])
	b = appendIntText(appendKey(b, &keyBodyBytesSent), r.BodyBytesSent, t[4])
	b = appendKey(b, &keyRequestTimeMs)
	var err error
	if b, err = appendOptFloat(b, r.RequestTimeMs, "request_time_ms"); err != nil {
		return dst, err
	}
	b = appendIntText(appendKey(b, &keyTcpinfoRttUs), r.TcpinfoRTTUs, t[5])
	b = appendIntText(appendKey(b, &keyTcpinfoRttvarUs), r.TcpinfoRTTVarUs, t[6])
	b = appendIntText(appendKey(b, &keyTcpinfoSndCwnd), r.TcpinfoSndCwnd, t[7])
	b = appendIntText(appendKey(b, &keyTcpinfoRcvSpace), r.TcpinfoRcvSpace, t[8])
	if e != nil && e.rateEnc != nil && r.SampleRate == e.rate && r.SampleRate != 0 { // 0 and -0 print apart
		b = append(b, e.rateEnc...)
	} else {
		start := len(b)
		b = append(b, keySampleRate.s...) // the end of the record: nothing may be written past it
		if b, err = appendFloatField(b, float64(r.SampleRate), "sample_rate"); err != nil {
			return dst, err
		}
		if e != nil {
			e.rate, e.rateEnc = r.SampleRate, append(e.rateEnc[:0], b[start:]...)
		}
	}
	if r.TsSource != "" {
		b = appendString(append(b, keyTsSource.s...), r.TsSource)
	}
	return append(b, '}'), nil
}

// The keys of http_request/1 after the host fields, as words for appendKey.
var (
	keyConnSerial      = mkKey(`,"conn_serial":`)
	keyConnRequests    = mkKey(`,"conn_requests":`)
	keyMethod          = mkKey(`,"method":`)
	keyStatus          = mkKey(`,"status":`)
	keyBytesSent       = mkKey(`,"bytes_sent":`)
	keyBodyBytesSent   = mkKey(`,"body_bytes_sent":`)
	keyRequestTimeMs   = mkKey(`,"request_time_ms":`)
	keyTcpinfoRttUs    = mkKey(`,"tcpinfo_rtt_us":`)
	keyTcpinfoRttvarUs = mkKey(`,"tcpinfo_rttvar_us":`)
	keyTcpinfoSndCwnd  = mkKey(`,"tcpinfo_snd_cwnd":`)
	keyTcpinfoRcvSpace = mkKey(`,"tcpinfo_rcv_space":`)
	keySampleRate      = mkKey(`,"sample_rate":`)
	keyTsSource        = mkKey(`,"ts_source":`)
)

// keyWords is a key's text (at most 24 bytes) as three little-endian words.
type keyWords struct {
	s string
	w [3]uint64
}

func mkKey(s string) keyWords {
	if len(s) > 24 {
		panic("record: key longer than 24 bytes: " + s)
	}
	var buf [24]byte
	copy(buf[:], s)
	k := keyWords{s: s}
	for i := range k.w {
		k.w[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return k
}

// appendKey appends a key with three 8-byte writes when b has room (no call): like
// appendIntW it may write up to 24 bytes from the key's start, which the record's next
// bytes overwrite (every key it writes is followed by a value and the sample_rate field).
func appendKey(b []byte, k *keyWords) []byte {
	l := len(b)
	if cap(b)-l < 24 {
		return append(b, k.s...)
	}
	w := b[l : l+24]
	binary.LittleEndian.PutUint64(w, k.w[0])
	binary.LittleEndian.PutUint64(w[8:], k.w[1])
	binary.LittleEndian.PutUint64(w[16:], k.w[2])
	return b[:l+len(k.s)]
}

func appendHTTPSchema(b []byte, schema string) []byte {
	b = append(b, `{"schema":`...)
	b = appendString(b, schema)
	return append(b, `,"ts_ms":`...)
}

func appendHTTPHost(b []byte, r *HTTPRequest) []byte {
	b = appendHost(b, r.Pop, r.Host, r.Kernel, r.Arm, r.RolloutID)
	b = append(b, `,"cc":`...)
	b = appendString(b, r.CC)
	return append(b, `,"peer_prefix":`...)
}

// AppendTCP appends s as one JSON object (no newline) to dst, like AppendHTTP.
func AppendTCP(dst []byte, s *TCPSample) ([]byte, error) {
	b := append(dst, `{"schema":`...)
	b = appendString(b, s.Schema)
	b = append(b, `,"ts_ms":`...)
	b = appendInt(b, s.TsMs)
	b = appendHost(b, s.Pop, s.Host, s.Kernel, s.Arm, s.RolloutID)
	b = append(b, `,"cc":`...)
	b = appendString(b, s.CC)
	b = appendOptInt(append(b, `,"cc_version":`...), s.CCVersion)
	if s.CCImpl != "" { // optional: absent when the collector cannot tell
		b = appendString(append(b, `,"cc_impl":`...), s.CCImpl)
	}
	b = append(b, `,"sock_id":`...)
	b = appendString(b, s.SockID)
	b = append(b, `,"peer_prefix":`...)
	b = appendString(b, s.PeerPrefix)
	b = append(b, `,"local_port":`...)
	b = appendInt(b, s.LocalPort)
	b = append(b, `,"state":`...)
	b = appendString(b, s.State)

	b = appendOptInt(append(b, `,"rtt_us":`...), s.RTTUs)
	b = appendOptInt(append(b, `,"rttvar_us":`...), s.RTTVarUs)
	b = appendOptInt(append(b, `,"min_rtt_us":`...), s.MinRTTUs)
	b = appendOptInt(append(b, `,"rto_ms":`...), s.RTOMs)
	b = appendOptInt(append(b, `,"mss":`...), s.MSS)
	b = appendOptInt(append(b, `,"cwnd":`...), s.Cwnd)
	b = appendOptInt(append(b, `,"ssthresh":`...), s.Ssthresh)

	b = appendOptInt(append(b, `,"unacked":`...), s.Unacked)
	b = appendOptInt(append(b, `,"sacked":`...), s.Sacked)
	b = appendOptInt(append(b, `,"lost":`...), s.Lost)
	b = appendOptInt(append(b, `,"retrans_out":`...), s.RetransOut)
	b = appendOptInt(append(b, `,"total_retrans":`...), s.TotalRetrans)
	b = appendOptInt(append(b, `,"reordering":`...), s.Reordering)

	b = appendOptInt(append(b, `,"bytes_sent":`...), s.BytesSent)
	b = appendOptInt(append(b, `,"bytes_acked":`...), s.BytesAcked)
	b = appendOptInt(append(b, `,"bytes_retrans":`...), s.BytesRetrans)
	b = appendOptInt(append(b, `,"bytes_received":`...), s.BytesReceived)
	b = appendOptInt(append(b, `,"segs_out":`...), s.SegsOut)
	b = appendOptInt(append(b, `,"segs_in":`...), s.SegsIn)
	b = appendOptInt(append(b, `,"data_segs_out":`...), s.DataSegsOut)
	b = appendOptInt(append(b, `,"data_segs_in":`...), s.DataSegsIn)

	b = appendOptInt(append(b, `,"delivery_rate_bps":`...), s.DeliveryRateBps)
	b = appendOptInt(append(b, `,"pacing_rate_bps":`...), s.PacingRateBps)
	b = appendOptInt(append(b, `,"delivered":`...), s.Delivered)
	b = append(b, `,"app_limited":`...)
	switch {
	case s.AppLimited == nil:
		b = append(b, "null"...)
	case *s.AppLimited:
		b = append(b, "true"...)
	default:
		b = append(b, "false"...)
	}

	b = appendOptInt(append(b, `,"busy_ms":`...), s.BusyMs)
	b = appendOptInt(append(b, `,"rwnd_limited_ms":`...), s.RwndLimitedMs)
	b = appendOptInt(append(b, `,"sndbuf_limited_ms":`...), s.SndbufLimitedMs)

	b = appendOptInt(append(b, `,"notsent_bytes":`...), s.NotsentBytes)
	b = append(b, `,"send_q_bytes":`...)
	b = appendInt(b, s.SendQBytes)
	b = append(b, `,"recv_q_bytes":`...)
	b = appendInt(b, s.RecvQBytes)
	b = appendOptInt(append(b, `,"snd_wnd":`...), s.SndWnd)
	b = appendOptInt(append(b, `,"rcv_space":`...), s.RcvSpace)

	b = appendOptInt(append(b, `,"lastsnd_ms":`...), s.LastsndMs)
	b = appendOptInt(append(b, `,"lastrcv_ms":`...), s.LastrcvMs)
	b = appendOptInt(append(b, `,"lastack_ms":`...), s.LastackMs)

	b = appendOptInt(append(b, `,"bbr_bw_bps":`...), s.BBRBwBps)
	b = appendOptInt(append(b, `,"bbr_min_rtt_us":`...), s.BBRMinRTTUs)
	var err error
	if b, err = appendOptFloat(append(b, `,"bbr_pacing_gain":`...), s.BBRPacingGain, "bbr_pacing_gain"); err != nil {
		return dst, err
	}
	if b, err = appendOptFloat(append(b, `,"bbr_cwnd_gain":`...), s.BBRCwndGain, "bbr_cwnd_gain"); err != nil {
		return dst, err
	}
	b = appendOptInt(append(b, `,"total_rto":`...), s.TotalRTO)
	b = appendOptInt(append(b, `,"total_rto_recoveries":`...), s.TotalRTORecoveries)
	b = appendOptInt(append(b, `,"total_rto_time_ms":`...), s.TotalRTOTimeMs)
	b = append(b, `,"sample_rate":`...)
	if b, err = appendFloatField(b, float64(s.SampleRate), "sample_rate"); err != nil {
		return dst, err
	}
	if s.PolicyGeneration != nil { // optional: absent unless a socket policy decided the connection
		b = appendOptInt(append(b, `,"policy_generation":`...), s.PolicyGeneration)
	}
	return append(b, '}'), nil
}

// AppendConn appends c as one JSON object (no newline) to dst, like AppendHTTP.
func AppendConn(dst []byte, c *TCPConn) ([]byte, error) {
	b := append(dst, `{"schema":`...)
	b = appendString(b, c.Schema)
	b = append(b, `,"ts_ms":`...)
	b = appendInt(b, c.TsMs)
	b = appendHost(b, c.Pop, c.Host, c.Kernel, c.Arm, c.RolloutID)
	b = append(b, `,"cc":`...)
	b = appendString(b, c.CC)
	b = appendOptInt(append(b, `,"cc_version":`...), c.CCVersion)
	b = append(b, `,"cc_source":`...)
	b = appendString(b, c.CCSource)
	if c.CCImpl != "" { // optional: absent when the collector cannot tell
		b = appendString(append(b, `,"cc_impl":`...), c.CCImpl)
	}
	b = append(b, `,"sock_id":`...)
	b = appendString(b, c.SockID)
	b = append(b, `,"peer_prefix":`...)
	b = appendString(b, c.PeerPrefix)
	b = append(b, `,"local_port":`...)
	b = appendInt(b, c.LocalPort)
	b = appendOptInt(append(b, `,"duration_ms":`...), c.DurationMs)
	b = appendOptInt(append(b, `,"seen_duration_ms":`...), c.SeenDurationMs)

	b = appendOptInt(append(b, `,"rtt_us":`...), c.RTTUs)
	b = appendOptInt(append(b, `,"rttvar_us":`...), c.RTTVarUs)
	b = appendOptInt(append(b, `,"min_rtt_us":`...), c.MinRTTUs)
	b = appendOptInt(append(b, `,"rto_ms":`...), c.RTOMs)
	b = appendOptInt(append(b, `,"mss":`...), c.MSS)
	b = appendOptInt(append(b, `,"cwnd":`...), c.Cwnd)
	b = appendOptInt(append(b, `,"ssthresh":`...), c.Ssthresh)

	b = appendOptInt(append(b, `,"unacked":`...), c.Unacked)
	b = appendOptInt(append(b, `,"sacked":`...), c.Sacked)
	b = appendOptInt(append(b, `,"lost":`...), c.Lost)
	b = appendOptInt(append(b, `,"retrans_out":`...), c.RetransOut)
	b = appendOptInt(append(b, `,"total_retrans":`...), c.TotalRetrans)
	b = appendOptInt(append(b, `,"reordering":`...), c.Reordering)

	b = appendOptInt(append(b, `,"bytes_sent":`...), c.BytesSent)
	b = appendOptInt(append(b, `,"bytes_acked":`...), c.BytesAcked)
	b = appendOptInt(append(b, `,"bytes_retrans":`...), c.BytesRetrans)
	b = appendOptInt(append(b, `,"bytes_received":`...), c.BytesReceived)
	b = appendOptInt(append(b, `,"segs_out":`...), c.SegsOut)
	b = appendOptInt(append(b, `,"segs_in":`...), c.SegsIn)
	b = appendOptInt(append(b, `,"data_segs_out":`...), c.DataSegsOut)
	b = appendOptInt(append(b, `,"data_segs_in":`...), c.DataSegsIn)

	b = appendOptInt(append(b, `,"delivery_rate_bps":`...), c.DeliveryRateBps)
	b = appendOptInt(append(b, `,"pacing_rate_bps":`...), c.PacingRateBps)
	b = appendOptInt(append(b, `,"delivered":`...), c.Delivered)
	b = appendOptInt(append(b, `,"delivered_ce":`...), c.DeliveredCE)
	b = append(b, `,"app_limited":`...)
	switch {
	case c.AppLimited == nil:
		b = append(b, "null"...)
	case *c.AppLimited:
		b = append(b, "true"...)
	default:
		b = append(b, "false"...)
	}

	b = appendOptInt(append(b, `,"busy_ms":`...), c.BusyMs)
	b = appendOptInt(append(b, `,"rwnd_limited_ms":`...), c.RwndLimitedMs)
	b = appendOptInt(append(b, `,"sndbuf_limited_ms":`...), c.SndbufLimitedMs)

	b = appendOptInt(append(b, `,"notsent_bytes":`...), c.NotsentBytes)
	b = appendOptInt(append(b, `,"snd_wnd":`...), c.SndWnd)
	b = appendOptInt(append(b, `,"rcv_space":`...), c.RcvSpace)
	b = appendOptInt(append(b, `,"dsack_dups":`...), c.DsackDups)
	b = appendOptInt(append(b, `,"reord_seen":`...), c.ReordSeen)
	b = appendOptInt(append(b, `,"rcv_ooopack":`...), c.RcvOoopack)

	b = appendOptInt(append(b, `,"total_rto":`...), c.TotalRTO)
	b = appendOptInt(append(b, `,"total_rto_recoveries":`...), c.TotalRTORecoveries)
	b = appendOptInt(append(b, `,"total_rto_time_ms":`...), c.TotalRTOTimeMs)
	if c.PolicyGeneration != nil { // optional: absent unless a socket policy decided the connection
		b = appendOptInt(append(b, `,"policy_generation":`...), c.PolicyGeneration)
	}
	b = append(b, `,"sample_rate":`...)
	b, err := appendFloatField(b, float64(c.SampleRate), "sample_rate")
	if err != nil {
		return dst, err
	}
	return append(b, '}'), nil
}

func appendHost(b []byte, pop, host, kernel, arm, rolloutID string) []byte {
	b = append(b, `,"pop":`...)
	b = appendString(b, pop)
	b = append(b, `,"host":`...)
	b = appendString(b, host)
	b = append(b, `,"kernel":`...)
	b = appendString(b, kernel)
	b = append(b, `,"arm":`...)
	b = appendString(b, arm)
	b = append(b, `,"rollout_id":`...)
	return appendString(b, rolloutID)
}

func appendOptInt(b []byte, v *int64) []byte {
	if v == nil {
		return append(b, "null"...)
	}
	return appendInt(b, *v)
}

func appendOptFloat(b []byte, v *Float, field string) ([]byte, error) {
	if v == nil {
		return append(b, "null"...), nil
	}
	return appendFloatField(b, float64(*v), field)
}

func appendFloatField(b []byte, x float64, field string) ([]byte, error) {
	out, err := AppendFloat(b, x)
	if err != nil {
		return b, fmt.Errorf("record: encode %s: %w", field, err)
	}
	return out, nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string exactly as encoding/json does with HTML escaping
// off: `"` and `\` and control characters escaped (\b \f \n \r \t by name, others \u00XX),
// invalid UTF-8 bytes as \ufffd, U+2028 and U+2029 as \u2028 and \u2029, everything else
// as it is.
func appendString(b []byte, s string) []byte {
	if plainString(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Eight bytes at a time (SWAR): bytesLo has 1 in every byte, bytesHi 0x80.
const (
	bytesLo = 0x0101010101010101
	bytesHi = 0x8080808080808080
)

// plainString reports whether s holds no byte appendString escapes or checks: every byte
// printable ASCII (0x20–0x7f) but `"` and `\`. Such a string is written as it is. Eight
// bytes at a time; each test is exact (Bit Twiddling Hacks: hasless(x, 0x20), haszero).
func plainString(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s[i:]), 8))
		if (x-0x20*bytesLo)&^x&bytesHi|x&bytesHi|hasZeroByte(x^'"'*bytesLo)|hasZeroByte(x^'\\'*bytesLo) != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// hasZeroByte reports (non-zero) whether a byte of x is 0; exact.
func hasZeroByte(x uint64) uint64 { return (x - bytesLo) &^ x & bytesHi }

// plainByte: the bytes plainString accepts.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()
