package nginxlog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ccab-dev/ccab/collectors/internal/decimal"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

func encode(t *testing.T, r record.HTTPRequest) map[string]any {
	t.Helper()
	var buf bytes.Buffer
	if err := record.NewEncoder(&buf).Encode(&r); err != nil {
		t.Fatal(err)
	}
	return testvectors.DecodeJSONL(t, buf.Bytes())[0]
}

func check(t *testing.T, got map[string]any, want map[string]string) {
	t.Helper()
	for k, text := range want {
		var v any
		dec := json.NewDecoder(strings.NewReader(text))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("bad test value for %s: %v", k, err)
		}
		if g, ok := got[k]; !ok || !testvectors.SameValue(g, v) {
			t.Errorf("%s = %v, want %s", k, g, text)
		}
	}
}

const combinedPlus = `log_format edge '$remote_addr - $remote_user [$time_local] '
                    '"$request" $status $body_bytes_sent '
                    '"$http_referer" "$http_user_agent" '
                    '$msec $request_time $connection $connection_requests $bytes_sent '
                    '$tcpinfo_rtt $tcpinfo_rttvar $tcpinfo_snd_cwnd $tcpinfo_rcv_space';`

func TestParseText(t *testing.T) {
	for _, tc := range []struct {
		name, spec, fname, line string
		want                    map[string]string
	}{
		{
			name: "combined plus appended fields, directive as in nginx.conf",
			spec: combinedPlus,
			line: `203.0.113.77 - - [22/Nov/2025:00:00:01 +0000] "GET /big.bin HTTP/1.1" 200 4194304 "-" "curl/8.5.0" 1763769601.532 0.912 1841 1 4194624 41250 3125 87 14600`,
			want: map[string]string{"ts_ms": `1763769601532`, "peer_prefix": `"203.0.113.0/24"`, "method": `"GET"`,
				"status": `200`, "body_bytes_sent": `4194304`, "bytes_sent": `4194624`, "request_time_ms": `912.0`,
				"conn_serial": `1841`, "conn_requests": `1`, "tcpinfo_rtt_us": `41250`, "tcpinfo_rttvar_us": `3125`,
				"tcpinfo_snd_cwnd": `87`, "tcpinfo_rcv_space": `14600`},
		},
		{
			name: "combined plus fields, tcpinfo not found (-), IPv6, escaped quote in user agent",
			spec: combinedPlus,
			line: `2001:db8:85a3::8a2e:370:7334 - alice [22/Nov/2025:00:00:02 +0000] "HEAD /x?q=\x22a b\x22 HTTP/2.0" 404 0 "https://example.com/a b" "Mozilla/5.0 \x22quoted\x22 (X11)" 1763769602.117 0.000 1843 2 180 - - - -`,
			want: map[string]string{"ts_ms": `1763769602117`, "peer_prefix": `"2001:db8:85a3::/48"`, "method": `"HEAD"`,
				"status": `404`, "request_time_ms": `0.0`, "tcpinfo_rtt_us": `null`, "tcpinfo_rttvar_us": `null`,
				"tcpinfo_snd_cwnd": `null`, "tcpinfo_rcv_space": `null`, "conn_requests": `2`},
		},
		{
			name: "predefined combined: ts from $time_local, the rest null",
			spec: "combined",
			line: `198.51.100.9 - - [26/Apr/2019:09:47:40 +0300] "POST /api HTTP/1.1" 201 12 "-" "-"`,
			want: map[string]string{"ts_ms": `1556261260000`, "method": `"POST"`, "status": `201`,
				"body_bytes_sent": `12`, "bytes_sent": `null`, "request_time_ms": `null`, "conn_serial": `null`},
		},
		{
			name:  "--format-name picks one of several directives; bracketed [$remote_addr:$remote_port] with IPv6",
			spec:  combinedPlus + "\nlog_format clb '[$time_iso8601] [$remote_addr:$remote_port] [$status] [$request] [$bytes_sent] [$request_time] [$tcpinfo_rtt] [$connection] [$connection_requests]';",
			fname: "clb",
			line:  `[2019-04-26T09:47:40+00:00] [2001:db8::1:443] [206] [GET /v.mp4 HTTP/1.1] [1048898] [0.250] [812] [7] [3]`,
			want: map[string]string{"ts_ms": `1556272060000`, "peer_prefix": `"2001:db8::/48"`, "status": `206`,
				"bytes_sent": `1048898`, "request_time_ms": `250.0`, "tcpinfo_rtt_us": `812`, "method": `"GET"`},
		},
		{
			name: "research format with commas (mininet)",
			spec: `log_format tcp_info '$time_local, $msec, "$request", $status, $tcpinfo_rtt, $tcpinfo_rttvar, "$tcpinfo_snd_cwnd", $tcpinfo_rcv_space, $body_bytes_sent, "$http_referer", "$http_user_agent", $remote_addr';`,
			line: `22/Nov/2025:00:00:01 +0000, 1763769601.004, "GET /f HTTP/1.1", 200, 1203, 402, "10", 14480, 1048576, "-", "wget", 10.0.0.2`,
			want: map[string]string{"ts_ms": `1763769601004`, "tcpinfo_rtt_us": `1203`, "tcpinfo_snd_cwnd": `10`,
				"peer_prefix": `"10.0.0.0/24"`},
		},
		{
			name: "LTSV with \\t in a double-quoted config string",
			spec: `log_format ltsv "time:$msec\t" "host:$remote_addr\t" "status:$status\t" "req_time:$request_time\t" "method:$request_method";`,
			line: "time:1481599251.000\thost:10.42.131.60\tstatus:200\treq_time:0.000\tmethod:GET",
			want: map[string]string{"ts_ms": `1481599251000`, "peer_prefix": `"10.42.131.0/24"`, "status": `200`, "method": `"GET"`},
		},
		{
			name: "escape=json with unquoted tcpinfo that nginx leaves empty (\"rtt\":,)",
			spec: `escape=json '{"t":$msec,"a":"$remote_addr","s":$status,"rt":$request_time,"rtt":$tcpinfo_rtt,"ua":"$http_user_agent"}'`,
			line: `{"t":1763769601.532,"a":"203.0.113.7","s":200,"rt":0.010,"rtt":,"ua":"a \"b\" \\ c"}`,
			want: map[string]string{"ts_ms": `1763769601532`, "status": `200`, "request_time_ms": `10.0`, "tcpinfo_rtt_us": `null`},
		},
		{
			name: "bare format text, ${var} form",
			spec: `${remote_addr} ${msec} "$request" $status`,
			line: `10.1.2.3 1763769601.5 "\x16\x03\x01" 400`,
			want: map[string]string{"ts_ms": `1763769601500`, "method": `""`, "status": `400`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser(tc.spec, tc.fname)
			if err != nil {
				t.Fatal(err)
			}
			r, err := p.Parse(tc.line)
			if err != nil {
				t.Fatal(err)
			}
			got := encode(t, r)
			check(t, got, tc.want)
			for k, v := range got {
				if s, ok := v.(string); ok && strings.Contains(s, "203.0.113.77") || k == "remote_addr" {
					t.Errorf("raw client address leaked in %s", k)
				}
			}
		})
	}
}

func TestParseJSON(t *testing.T) {
	p, err := NewParser(FormatJSON, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Parse(`{"request_time":"0.5","status":"200","msec":"1763769601.532","remote_addr":"::ffff:192.0.2.1","request_method":"GET","tcpinfo_rtt":null,"extra":{"x":1}}`)
	if err != nil {
		t.Fatal(err)
	}
	check(t, encode(t, r), map[string]string{"ts_ms": `1763769601532`, "status": `200`, "request_time_ms": `500.0`,
		"peer_prefix": `"192.0.2.0/24"`, "tcpinfo_rtt_us": `null`, "conn_serial": `null`})
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ spec, line, substr string }{
		{FormatJSON, `not json`, "not a JSON object"},
		{FormatJSON, `[1,2]`, "not a JSON object"},
		{FormatJSON, `{"msec":1.5,"remote_addr":"10.0.0.1"} trailing`, "not a JSON object"},
		{FormatJSON, `{"remote_addr":"10.0.0.1"}`, "no $msec"},
		{FormatJSON, `{"msec":1.5,"status":true}`, "status: want a string or a number"},
		{FormatJSON, `{"msec":1.5,"status":1000}`, "not an HTTP status"},
		{FormatJSON, `{"msec":-1.5}`, "$msec"},
		{FormatJSON, `{"msec":1.5,"remote_addr":"unix:x"}`, `"unix:x" is not an IP address`},
		{FormatJSON, `{"msec":1.5,"request_time":"abc"}`, "$request_time"},
		{FormatJSON, `{"msec":1.5,"tcpinfo_rtt":"12x"}`, "$tcpinfo_rtt"},
		{combinedPlus, `garbage`, "no \" - \" after $remote_addr"},
		{combinedPlus, `1.2.3.4 - - [x] "GET / HTTP/1.1" 200 5 "-" "-" 1.5 0.1 1 1 9 1 1 1 1 extra`, "does not match"},
		{"combined", `1.2.3.4 - - [not a time] "GET / HTTP/1.1" 200 5 "-" "-"`, "$time_local"},
		{`[$msec]`, `1.5`, `does not start with "["`},
	} {
		p, err := NewParser(tc.spec, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(tc.line); err == nil || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("Parse(%q) err = %v, want it to contain %q", tc.line, err, tc.substr)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	for _, tc := range []struct{ spec, name, substr string }{
		{`$remote_addr$msec`, "", "touch"},
		{`$msec $`, "", "invalid variable"},
		{`${msec`, "", "unterminated ${"},
		{`log_format a '$msec'; log_format b '$msec';`, "", `no format named ""`},
		{`log_format a '$msec'; log_format b '$msec';`, "c", `no format named "c"`},
		{`log_format a escape=yaml '$msec';`, "", "unknown escape=yaml"},
		{`log_format a '$msec`, "", "unterminated"},
		{`log_format a;`, "", "needs a name"},
		{`log_format a '$msec'; }`, "", "unexpected"},
		{``, "nosuch", "empty format"},
	} {
		if _, err := NewParser(tc.spec, tc.name); err == nil || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("NewParser(%q, %q) err = %v, want %q", tc.spec, tc.name, err, tc.substr)
		}
	}
}

func TestSpecForms(t *testing.T) {
	p, err := NewParser("", "combined")
	if err != nil {
		t.Fatal(err)
	}
	missing := strings.Join(p.Missing(), " ")
	if missing != "conn_serial conn_requests bytes_sent request_time_ms tcpinfo_rtt_us tcpinfo_rttvar_us tcpinfo_snd_cwnd tcpinfo_rcv_space" {
		t.Errorf("combined Missing() = %s", missing)
	}
	f, err := ParseSpec(`log_format main escape=none '$a "x" ' # comment ; ignored
	   '$b\'s';`, "main")
	if err != nil {
		t.Fatal(err)
	}
	if f.Escape != EscapeNone || len(f.Segs) != 4 || f.Segs[1].Lit != ` "x" ` || f.Segs[3].Lit != `'s` {
		t.Errorf("ParseSpec = %+v", f)
	}
}

func TestUnescape(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		esc  Escape
		want string
	}{
		{`a\x22b\x5Cc`, EscapeDefault, `a"b\c`},
		{`\x`, EscapeDefault, `\x`},
		{`\xZZ`, EscapeDefault, `\xZZ`},
		{`a\"b\u00e9`, EscapeJSON, `a"bé`},
		{`a\x22`, EscapeNone, `a\x22`},
	} {
		if got, err := unescape(tc.raw, tc.esc); err != nil || got != tc.want {
			t.Errorf("unescape(%q, %s) = %q, %v; want %q", tc.raw, tc.esc, got, err, tc.want)
		}
	}
	if _, err := unescape(`\q`, EscapeJSON); err == nil {
		t.Error("bad JSON escape accepted")
	}
}

// Every line that does not match gets an error, whichever way it fails.
func TestDiagnoseAlwaysErrs(t *testing.T) {
	p, err := NewParser(`$remote_addr [$msec] $status`, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{``, `x`, `1.2.3.4 [1.5] 2x`, `1.2.3.4 [1.5] 200 extra`, `1.2.3.4 [1.5`, `1.2.3.4 [x] 200`, `"" [1] 1`} {
		if _, err := p.Parse(line); err == nil {
			t.Errorf("Parse(%q) succeeded", line)
		}
	}
}

// nginx shipping over syslog puts a header before each line: stripped when configured or
// when a line starts with <PRI>.
func TestSyslogHeaders(t *testing.T) {
	const spec = `$remote_addr [$msec] "$request" $status`
	body := `203.0.113.7 [1763769601.532] "GET / HTTP/1.1" 200`
	for _, tc := range []struct{ mode, line string }{
		{"", `<190>Nov 23 19:53:35 edge-7 nginx: ` + body},
		{"", `<190>Nov  3 19:53:35 nginx: ` + body},
		{"", `<190>Nov 23 19:53:35 edge-7 nginx[123]: ` + body},
		{"", `<190>1 2025-11-23T19:53:35.003Z edge-7 nginx - - - ` + body},
		{"", `<190>1 2025-11-23T19:53:35Z edge-7 nginx 12 ID47 [x@1 a="b"] ` + body},
		{"", body},
		{"on", `Nov 23 19:53:35 edge-7 nginx: ` + body},
		{"on", `<13>Nov 23 19:53:35 edge-7 nginx: ` + body},
		{"off", body},
	} {
		p, err := NewParserOptions(spec, "", Options{Syslog: tc.mode})
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Parse(tc.line)
		if err != nil {
			t.Errorf("%s %q: %v", tc.mode, tc.line, err)
			continue
		}
		check(t, encode(t, r), map[string]string{"ts_ms": `1763769601532`, "status": `200`, "peer_prefix": `"203.0.113.0/24"`})
	}
	// a line that starts with a client's value: auto never strips (the value could pass
	// for a header), so the value is kept whole
	p, _ := NewParser(`$http_user_agent [$msec] $status`, "")
	if r, err := p.Parse(`<1>Nov 23 19:53:35 a b: x [1.5] 200`); err != nil || r.TsMs != 1500 {
		t.Errorf("client-led line: %+v, %v", r, err)
	}
	for _, tc := range []struct{ mode, line string }{
		{"on", body},
		{"off", `<190>Nov 23 19:53:35 edge-7 nginx: ` + body},
	} {
		p, _ := NewParserOptions(spec, "", Options{Syslog: tc.mode})
		if _, err := p.Parse(tc.line); err == nil {
			t.Errorf("%s %q: accepted", tc.mode, tc.line)
		}
	}
}

// A unix-socket client is kept with a null peer_prefix; a format without a time variable
// stamps the read time and says so; a variable can be read as another (field map).
func TestUnixClientReadTimeFieldMap(t *testing.T) {
	now := time.UnixMilli(1795492854970)
	p, err := NewParserOptions(`$remote_addr $connection $status $my_rtt "$request"`, "", Options{
		FieldMap: map[string]string{"my_rtt": "tcpinfo_rtt"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if !p.ReadTime() {
		t.Error("ReadTime() = false")
	}
	for _, tc := range []struct {
		line string
		want map[string]string
	}{
		{`unix: 9 200 - "GET /unix HTTP/1.1"`, map[string]string{"peer_prefix": `null`, "conn_serial": `9`, "tcpinfo_rtt_us": `null`, "method": `"GET"`}},
		{`10.0.0.1 10 404 4120 "HEAD / HTTP/1.1"`, map[string]string{"peer_prefix": `"10.0.0.0/24"`, "tcpinfo_rtt_us": `4120`, "status": `404`}},
	} {
		r, err := p.Parse(tc.line)
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		got := encode(t, r)
		tc.want["ts_ms"], tc.want["ts_source"] = `1795492854970`, `"read"`
		check(t, got, tc.want)
	}
	if n := p.ReadTimeRecords(); n != 2 {
		t.Errorf("ReadTimeRecords() = %d", n)
	}
	// a time in the line: no ts_source key at all
	q, _ := NewParser(`$msec $remote_addr`, "")
	r, err := q.Parse(`1.5 unix:`)
	if err != nil {
		t.Fatal(err)
	}
	if got := encode(t, r); got["ts_source"] != nil || got["peer_prefix"] != nil {
		t.Errorf("record %v", got)
	}
	if _, err := q.Parse(`1.5 -`); err == nil {
		t.Error(`$remote_addr "-" accepted`)
	}
	// $connection is always a number: "-" is no connection serial
	c, _ := NewParser(`$msec $connection`, "")
	if _, err := c.Parse(`1.5 -`); err == nil {
		t.Error(`$connection "-" accepted`)
	}
	for _, fm := range []string{"a", "a=", "=tcpinfo_rtt"} {
		if _, err := ParseFieldMap(fm); err == nil {
			t.Errorf("ParseFieldMap(%q) accepted", fm)
		}
	}
	if m, err := ParseFieldMap(" $my_rtt=$tcpinfo_rtt , up=tcpinfo_rttvar"); err != nil || m["my_rtt"] != "tcpinfo_rtt" || m["up"] != "tcpinfo_rttvar" {
		t.Errorf("ParseFieldMap = %v, %v", m, err)
	}
	j, err := NewParserOptions(FormatJSON, "", Options{FieldMap: map[string]string{"up_rtt": "tcpinfo_rtt"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := j.Parse(`{"msec":1.5,"tcpinfo_rtt":"-","up_rtt":"812","remote_addr":"unix:"}`); err != nil {
		t.Fatal(err)
	} else {
		check(t, encode(t, r), map[string]string{"tcpinfo_rtt_us": `812`, "peer_prefix": `null`, "ts_ms": `1500`})
	}
	if _, err := NewParserOptions(`$msec $x`, "", Options{FieldMap: map[string]string{"x": "remote_user"}}); err == nil {
		t.Error("field map to a variable no field is read from accepted")
	}
}

// plainWord answers for eight bytes what the plain table answers for each: every byte value
// in every position of a word, next to plain and special neighbours, for several literals'
// first bytes.
func TestPlainWordMatchesTable(t *testing.T) {
	for _, first := range []byte{'"', ' ', '[', 'x', 0} {
		st := step{first: first}
		st.plain = new([256]bool)
		*st.plain = setPrintable
		fw := uint64('"') * bytesLo
		if first != 0 {
			st.plain[first] = false
			fw = uint64(first) * bytesLo
		}
		for _, fill := range []byte{'a', 0x1f, 0x7f, 0x80, ' ', '"'} {
			for pos := 0; pos < 8; pos++ {
				for c := 0; c < 256; c++ {
					var w [8]byte
					for i := range w {
						w[i] = fill
					}
					w[pos] = byte(c)
					want := true
					for _, b := range w {
						want = want && st.plain[b]
					}
					if got := plainWord(binary.LittleEndian.Uint64(w[:]), fw); got != want {
						t.Fatalf("first %q, word %q: plainWord %v, table %v", first, w, got, want)
					}
				}
			}
		}
		rng := rand.New(rand.NewSource(int64(first)))
		alphabet := []byte{'a', 'Z', ' ', '"', first, 0, 0x1f, 0x20, 0x7e, 0x7f, 0x80, 0xff, '\\'}
		for i := 0; i < 200000; i++ {
			var w [8]byte
			want := true
			for k := range w {
				if rng.Intn(2) == 0 {
					w[k] = byte(rng.Intn(256))
				} else {
					w[k] = alphabet[rng.Intn(len(alphabet))]
				}
				want = want && st.plain[w[k]]
			}
			if got := plainWord(binary.LittleEndian.Uint64(w[:]), fw); got != want {
				t.Fatalf("first %q, word %q: plainWord %v, table %v", first, w, got, want)
			}
		}
	}
}

// Integers the matcher adds up while scanning give parseUint's (decimal.Uint's) value or
// error at every length, past int64 too.
func TestScannedIntegersMatchParseUint(t *testing.T) {
	p, err := NewParser(`$msec $bytes_sent $tcpinfo_rtt`, "")
	if err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 25; k++ {
		for _, s := range []string{strings.Repeat("9", k), "1" + strings.Repeat("0", k-1), strings.Repeat("0", k)} {
			want, werr := decimal.Uint(s)
			for _, line := range []string{"1.5 " + s + " 7", "1.5 7 " + s} {
				r, err := p.Parse(line)
				if (err != nil) != (werr != nil) {
					t.Fatalf("%q: error %v, decimal.Uint %v", line, err, werr)
				}
				if err != nil {
					continue
				}
				got := *r.BytesSent
				if line == "1.5 7 "+s {
					got = *r.TcpinfoRTTUs
				}
				if got != want {
					t.Fatalf("%q: %d, decimal.Uint %d", line, got, want)
				}
			}
		}
	}
}

// The method read from $request's raw first word is the one read from the unescaped
// request: escapes before, inside and after the first word.
func TestMethodFromEscapedRequest(t *testing.T) {
	p, err := NewParser(`$msec "$request"`, "")
	if err != nil {
		t.Fatal(err)
	}
	for req, want := range map[string]string{
		`GET / HTTP/1.1`: "GET", `G\x45T / HTTP/1.1`: "GET", `GET\x20/ HTTP/1.1`: "GET", `GET /\x22\x5C HTTP/1.1`: "GET",
		`\x16\x03\x01`: "", `-`: "-", ``: "", ` GET /`: "", `PROPFIND`: "PROPFIND", `BREW /pot`: "BREW", `GE\x5Cx54 /`: "",
	} {
		r, err := p.Parse(`1.5 "` + req + `"`)
		if err != nil || r.Method != want {
			t.Errorf("$request %q: method %q (%v), want %q", req, r.Method, err, want)
		}
	}
}

// $msec and $request_time read as thousandths while the matcher scans them (scanDecimal)
// give what package decimal gives for the same text, errors included: every string of up to
// five digits and dots, and longer random ones.
func TestScannedDecimalsMatchDecimal(t *testing.T) {
	ts, err := NewParser(`$msec $status`, "")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := NewParser(`$msec $request_time`, "")
	if err != nil {
		t.Fatal(err)
	}
	check := func(s string) {
		wantMs, werr := decimal.ScaleInt(s, 3)
		r, err := ts.Parse(s + " 200")
		if (err != nil) != (werr != nil || wantMs < 0) || err == nil && r.TsMs != wantMs {
			t.Fatalf("$msec %q: ts_ms %d (%v), decimal.ScaleInt %d (%v)", s, r.TsMs, err, wantMs, werr)
		}
		wantF, werr := decimal.ScaleFloat(s, 3)
		r, err = rt.Parse("1.5 " + s)
		if (err != nil) != (werr != nil || wantF < 0) || err == nil && float64(*r.RequestTimeMs) != wantF {
			t.Fatalf("$request_time %q: %v (%v), decimal.ScaleFloat %v (%v)", s, r.RequestTimeMs, err, wantF, werr)
		}
	}
	const alphabet = "0123456789."
	everyString(alphabet, 5, func(s string) {
		if s != "" {
			check(s)
		}
	})
	rng := rand.New(rand.NewSource(4))
	for i := 0; i < 50000; i++ {
		b := make([]byte, 1+rng.Intn(24))
		for j := range b {
			b[j] = alphabet[rng.Intn(10)]
		}
		if rng.Intn(4) != 0 {
			b[rng.Intn(len(b))] = '.'
		}
		check(string(b))
	}
}

// The address scan (scanAddr) ends where the address alphabet ends and reads the dotted
// quads parseIPv4 reads, and only those: every string of up to five bytes of "0129.:a", and
// longer random ones.
func TestScanAddrMatchesParseIPv4(t *testing.T) {
	check := func(s string) {
		line := []byte(s + " -")
		end, a4, ok := scanAddr(line, 0)
		run := 0
		for run < len(line) && setAddr[line[run]] {
			run++
		}
		want, wok := parseIPv4(line[:run])
		got := [4]byte{byte(a4 >> 24), byte(a4 >> 16), byte(a4 >> 8), byte(a4)}
		if end != run || ok != wok || ok && got != want {
			t.Fatalf("scanAddr(%q) = %d, %v, %v; want %d, %v, %v", s, end, got, ok, run, want, wok)
		}
	}
	const alphabet = "0129.:a"
	everyString(alphabet, 5, check)
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 100000; i++ {
		var b []byte
		for f := 0; f < 2+rng.Intn(4); f++ {
			if f > 0 {
				b = append(b, '.')
			}
			b = strconv.AppendInt(b, int64(rng.Intn(300)), 10)
			if rng.Intn(8) == 0 {
				b = append(b, "0:a"[rng.Intn(3)])
			}
		}
		check(string(b))
	}
}

// scanDigits (eight bytes at a time) ends where a byte loop ends and gives its value: digits
// runs of 0 to 20 bytes followed by every byte value, at every offset, with and without
// eight bytes left after them.
func TestScanDigitsMatchesByteLoop(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	for k := 0; k <= 20; k++ {
		for c := 0; c < 256; c++ {
			for _, tail := range []string{"", "0123456789"} {
				for lead := 0; lead < 3; lead++ {
					b := []byte(strings.Repeat("x", lead))
					for i := 0; i < k; i++ {
						b = append(b, byte('0'+rng.Intn(10)))
					}
					b = append(b, byte(c))
					b = append(b, tail...)
					wantEnd, want := lead, int64(0)
					for wantEnd < len(b) && b[wantEnd] >= '0' && b[wantEnd] <= '9' {
						want = want*10 + int64(b[wantEnd]-'0')
						wantEnd++
					}
					end, v := scanDigits(b, lead)
					if end != wantEnd || wantEnd-lead <= 18 && v != want {
						t.Fatalf("scanDigits(%q, %d) = %d, %d; want %d, %d", b, lead, end, v, wantEnd, want)
					}
				}
			}
		}
	}
}

// everyString calls f with every string of up to maxLen bytes of alphabet, the empty one first.
func everyString(alphabet string, maxLen int, f func(string)) {
	var walk func(prefix string)
	walk = func(prefix string) {
		f(prefix)
		if len(prefix) == maxLen {
			return
		}
		for i := 0; i < len(alphabet); i++ {
			walk(prefix + alphabet[i:i+1])
		}
	}
	walk("")
}
