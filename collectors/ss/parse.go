package ss

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ccab-dev/ccab/collectors/internal/decimal"
	"github.com/ccab-dev/ccab/collectors/record"
)

// Options tune ParseEntry.
type Options struct {
	// DefaultState is the state recorded when ss printed no State column, which it does when
	// run with a single-state filter (`ss -tinHOe state established` → "ESTAB").
	DefaultState string
}

// Socket is one parsed entry. Sample holds every tcp_sample/1 field the text carries; the
// caller adds peer_prefix, sock_id and the host fields (see package anon and record.Meta).
type Socket struct {
	Local, Peer netip.AddrPort
	Cookie      uint64 // socket cookie from -e's sk: (hex), 0 when absent; keys sock_id with a namespace
	Sample      record.TCPSample
	// Unread lists the tokens whose value could not be read ("rtt: invalid decimal …"):
	// their fields are null, the rest of the socket is kept.
	Unread []string
	// Incomplete is Entry.Incomplete: hidden-means-zero defaults were not applied.
	Incomplete bool
}

// ParseEntry parses one entry (a socket line plus its info lines). Errors are *ParseError.
func ParseEntry(e Entry, opts Options) (Socket, error) {
	if err := e.Err(); err != nil {
		return Socket{}, err
	}
	tok := tokenize(e.Text)
	cols, err := parseColumns(tok)
	if err != nil {
		return Socket{}, err
	}
	b := builder{}
	b.s.State = cols.state
	if b.s.State == "" {
		b.s.State = opts.DefaultState
	}
	b.s.LocalPort = int64(cols.local.Port())
	b.s.RecvQBytes, b.s.SendQBytes = cols.recvQ, cols.sendQ
	b.info(cols.rest)
	if !b.hasInfo {
		return Socket{}, errorf(ReasonNoInfo, "socket %s has no TCP info (run ss with -i)", cols.local)
	}
	if e.Incomplete {
		b.nullSentinels() // what ss hid cannot be told from what was lost: no defaults
	} else {
		b.applyDefaults()
	}
	for _, null := range b.bad {
		null() // printed but unreadable: null, never a default
	}
	return Socket{Local: cols.local, Peer: cols.peer, Cookie: b.cookie, Sample: b.s, Unread: b.unread, Incomplete: e.Incomplete}, nil
}

// builder accumulates one socket's fields.
type builder struct {
	s       record.TCPSample
	cookie  uint64
	gen     generation // newest kernel generation the tokens prove
	hasInfo bool       // saw at least one tcp_info token
	kvSeen  bool       // saw a tcp_info key:value token (the CC name comes before them)
	unread  []string   // tokens whose value could not be read
	bad     []func()   // null the fields of those tokens (after the defaults)
}

// fail notes a token that could not be read; null clears its fields after the defaults.
func (b *builder) fail(what string, err error, null func()) {
	b.hasInfo = true
	b.unread = append(b.unread, fmt.Sprintf("%s: %v", what, err))
	if null != nil {
		b.bad = append(b.bad, null)
	}
}

func (b *builder) info(tok []string) {
	for i := 0; i < len(tok); i++ {
		t := tok[i]
		if k, v, ok := strings.Cut(t, ":"); ok && isKey(k) {
			b.keyValue(k, v)
			continue
		}
		switch t {
		case "send", "pacing_rate", "delivery_rate":
			if i+1 >= len(tok) {
				b.fail(t, errors.New("missing value"), b.rateNull(t))
				continue
			}
			i++
			if err := b.rate(t, tok[i]); err != nil {
				b.fail(t, err, b.rateNull(t))
			}
		case "ts", "sack", "ecn", "ecnseen", "fastopen", "usec_ts", "bidir":
			b.hasInfo = true
		case "app_limited":
			b.hasInfo = true
			b.s.AppLimited = record.Bool(true)
			b.prove(gen4_9)
		default:
			// The CC name is the last bare word before the first tcp_info key:value (it
			// follows the option flags and precedes wscale/rto), so an option flag this
			// parser does not know yet cannot pass for it. Later bare words (ULP details)
			// and the <-> shutdown marks are not ours.
			if !b.kvSeen && isCCName(t) {
				b.s.CC = t
				b.hasInfo = true
			}
		}
	}
	if b.s.CC == "bbr2" && b.s.CCVersion == nil {
		b.s.CCVersion = record.Int(2) // google/bbr v2alpha registers as bbr2 (ss_tcp_info_bbr.md)
	}
}

// rateNull clears the field of a rate token.
func (b *builder) rateNull(name string) func() {
	switch name {
	case "pacing_rate":
		return func() { b.s.PacingRateBps = nil }
	case "delivery_rate":
		return func() { b.s.DeliveryRateBps = nil }
	}
	return nil // send: not recorded
}

func (b *builder) rate(name, v string) error {
	b.hasInfo = true
	switch name {
	case "send": // cwnd·mss/srtt, a model ss computes, not in the record; still checked
		_, err := parseRate(v)
		return err
	case "pacing_rate":
		cur, max, hasMax := strings.Cut(v, "/")
		bps, err := parseRate(cur)
		if err != nil {
			return err
		}
		if hasMax {
			if _, err := parseRate(max); err != nil {
				return fmt.Errorf("max: %w", err)
			}
		}
		b.s.PacingRateBps = record.Int(bps)
	case "delivery_rate":
		bps, err := parseRate(v)
		if err != nil {
			return err
		}
		b.s.DeliveryRateBps = record.Int(bps)
		b.prove(gen4_9)
	}
	return nil
}

// keyValue handles one key:value token. Keys that are not tcp_info (timer, uid, ino, sk,
// cgroup, skmem, users, ULP details) and unknown keys are ignored.
func (b *builder) keyValue(k, v string) {
	var dst **int64
	var g generation
	parse := parseCount
	switch k {
	case "sk":
		// The socket cookie in hex (iproute2 ≥ 4.x; older ss printed a kernel pointer, which
		// keys nothing useful but is harmless).
		if c, err := strconv.ParseUint(v, 16, 64); err == nil {
			b.cookie = c
		}
		return
	case "timer", "uid", "ino", "cgroup", "skmem", "users", "v6only", "fwmark", "tos", "tclass", "class", "cgroup2":
		return
	case "rtt":
		s, r, err := parsePair(v, "srtt/rttvar", parseMsToUs)
		if err != nil {
			b.fail(k, err, func() { b.s.RTTUs, b.s.RTTVarUs = nil, nil })
			return
		}
		b.s.RTTUs, b.s.RTTVarUs = record.Int(s), record.Int(r)
		b.tcpInfo(genBase)
		return
	case "retrans":
		o, t, err := parsePair(v, "retrans_out/total_retrans", parseCount)
		if err != nil {
			b.fail(k, err, func() { b.s.RetransOut, b.s.TotalRetrans = nil, nil })
			return
		}
		b.s.RetransOut, b.s.TotalRetrans = record.Int(o), record.Int(t)
		b.tcpInfo(genBase)
		return
	case "bbr":
		b.tcpInfo(genBase)
		b.bbr(v)
		return
	case "rto":
		dst, parse = &b.s.RTOMs, parseMs
	case "mss":
		dst = &b.s.MSS
	case "cwnd":
		dst = &b.s.Cwnd
	case "ssthresh":
		dst = &b.s.Ssthresh
	case "unacked":
		dst = &b.s.Unacked
	case "sacked":
		dst = &b.s.Sacked
	case "lost":
		dst = &b.s.Lost
	case "reordering":
		dst = &b.s.Reordering
	case "rcv_space":
		dst = &b.s.RcvSpace
	case "lastsnd":
		dst = &b.s.LastsndMs
	case "lastrcv":
		dst = &b.s.LastrcvMs
	case "lastack":
		dst = &b.s.LastackMs
	case "bytes_acked":
		dst, g = &b.s.BytesAcked, gen4_1
	case "bytes_received":
		dst, g = &b.s.BytesReceived, gen4_1
	case "segs_out":
		dst, g = &b.s.SegsOut, gen4_2
	case "segs_in":
		dst, g = &b.s.SegsIn, gen4_2
	case "data_segs_out":
		dst, g = &b.s.DataSegsOut, gen4_6
	case "data_segs_in":
		dst, g = &b.s.DataSegsIn, gen4_6
	case "notsent":
		dst, g = &b.s.NotsentBytes, gen4_6
	case "minrtt":
		dst, g, parse = &b.s.MinRTTUs, gen4_6, parseMsToUs
	case "busy":
		dst, g, parse = &b.s.BusyMs, gen4_10, parseMsSuffix
	case "rwnd_limited":
		dst, g, parse = &b.s.RwndLimitedMs, gen4_10, parseMsSuffix
	case "sndbuf_limited":
		dst, g, parse = &b.s.SndbufLimitedMs, gen4_10, parseMsSuffix
	case "delivered":
		dst, g = &b.s.Delivered, gen4_18
	case "bytes_sent":
		dst, g = &b.s.BytesSent, gen4_19
	case "bytes_retrans":
		dst, g = &b.s.BytesRetrans, gen4_19
	case "snd_wnd":
		dst, g = &b.s.SndWnd, gen5_4
	case "delivered_ce":
		b.tcpInfo(gen4_18)
		return
	case "dsack_dups", "reord_seen":
		b.tcpInfo(gen4_19)
		return
	case "rcv_ooopack":
		b.tcpInfo(gen5_4)
		return
	case "rcv_wnd", "rehash":
		b.tcpInfo(gen6_2)
		return
	case "wscale", "ato", "qack", "backoff", "pmtu", "rcvmss", "advmss", "rcv_rtt", "rcv_ssthresh", "fackets", "dctcp":
		b.tcpInfo(genBase)
		return
	default:
		return
	}
	n, err := parse(v)
	if err != nil {
		b.fail(k, err, func() { *dst = nil })
		return
	}
	*dst = record.Int(n)
	b.tcpInfo(g)
}

// bbr reads "(bw:18955200bps,mrtt:0.027,pacing_gain:1,cwnd_gain:2)" and Google's extended
// form with ",version:3,bw_hi:…,bw_lo:…,inflight_hi:…,inflight_lo:…,extra_acked:…,mode:…,phase:…".
func (b *builder) bbr(v string) {
	inner, ok := strings.CutPrefix(v, "(")
	if ok {
		inner, ok = strings.CutSuffix(inner, ")")
	}
	if !ok {
		b.fail("bbr", fmt.Errorf("%q is not a (…) block", v), nil)
		return
	}
	for _, kv := range strings.Split(inner, ",") {
		k, val, ok := strings.Cut(kv, ":")
		if !ok {
			continue // not key:value: a word a newer ss may print; nothing of ours
		}
		var err error
		var null func()
		switch k {
		case "bw":
			var bps int64
			if bps, err = parseRate(val); err == nil {
				b.s.BBRBwBps = record.Int(bps)
			}
			null = func() { b.s.BBRBwBps = nil }
		case "mrtt":
			var us int64
			if us, err = parseMsToUs(val); err == nil {
				b.s.BBRMinRTTUs = record.Int(us)
			}
			null = func() { b.s.BBRMinRTTUs = nil }
		case "pacing_gain":
			var g float64
			if g, err = decimal.Float(val); err == nil {
				b.s.BBRPacingGain = record.F(g)
			}
			null = func() { b.s.BBRPacingGain = nil }
		case "cwnd_gain":
			var g float64
			if g, err = decimal.Float(val); err == nil {
				b.s.BBRCwndGain = record.F(g)
			}
			null = func() { b.s.BBRCwndGain = nil }
		case "version":
			var n int64
			if n, err = parseCount(val); err == nil {
				b.s.CCVersion = record.Int(n)
			}
			null = func() { b.s.CCVersion = nil }
		}
		if err != nil {
			b.fail("bbr: "+k, err, null)
		}
	}
}

func (b *builder) tcpInfo(g generation) {
	b.hasInfo = true
	b.kvSeen = true
	b.prove(g)
}

func (b *builder) prove(g generation) {
	if g > b.gen {
		b.gen = g
	}
}

// isKey reports a plausible ss key ("bytes_sent", "rcv_ssthresh"); it keeps "http://x" and
// similar text from being read as key:value.
func isKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isCCName reports a congestion-control name as the kernel spells them (cubic, bbr, bbr2,
// reno, dctcp, htcp, ...).
func isCCName(t string) bool {
	if t == "" || t[0] < 'a' || t[0] > 'z' || len(t) > 16 {
		return false
	}
	for i := 1; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// parsePair parses an "a/b" token (rtt:srtt/rttvar, retrans:out/total) with one parser for both.
func parsePair(v, what string, parse func(string) (int64, error)) (int64, int64, error) {
	first, second, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not %s", v, what)
	}
	a, err := parse(first)
	if err != nil {
		return 0, 0, err
	}
	b, err := parse(second)
	if err != nil {
		return 0, 0, err
	}
	return a, b, nil
}
