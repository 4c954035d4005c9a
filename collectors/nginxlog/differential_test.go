package nginxlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

// sameAsReference parses line with p and with the reference parser: both must fail with the
// same reason and message, or give records that encode to the same bytes. It reports what
// differs, or "".
func sameAsReference(p *Parser, ref *refParser, line string) string {
	want, werr := ref.Parse(line)
	got, gerr := p.Parse(line)
	var sc Scratch
	var into record.HTTPRequest
	ierr := p.ParseInto([]byte(line), &into, &sc)
	switch {
	case (werr == nil) != (gerr == nil) || (werr == nil) != (ierr == nil):
		return "error " + errText(gerr) + " / ParseInto " + errText(ierr) + ", reference error " + errText(werr)
	case werr != nil:
		var wpe, gpe *ParseError
		if !errors.As(werr, &wpe) || !errors.As(gerr, &gpe) || wpe.Reason != gpe.Reason || werr.Error() != gerr.Error() {
			return "error " + errText(gerr) + ", reference error " + errText(werr)
		}
		if ierr.Error() != gerr.Error() {
			return "ParseInto error " + errText(ierr) + ", Parse error " + errText(gerr)
		}
		return ""
	}
	for _, r := range []*record.HTTPRequest{&want, &got, &into} {
		if r.TsSource == TsSourceRead { // the time each parser read the line
			r.TsMs = 0
		}
	}
	meta := record.Meta{Pop: "p", Host: "h", SampleRate: 1}
	meta.StampHTTP(&want)
	meta.StampHTTP(&got)
	meta.StampHTTP(&into)
	w, err1 := record.AppendHTTP(nil, &want)
	g, err2 := record.AppendHTTP(nil, &got)
	i, err3 := record.AppendHTTP(nil, &into)
	// the integers copied from the line's text (Scratch.IntTexts), into a roomy buffer (one
	// 8-byte copy each) and a tight one
	var enc record.HTTPEncoder
	tx, err4 := enc.AppendTexts(make([]byte, 0, 4096), &into, sc.IntTexts())
	tt, err5 := enc.AppendTexts(nil, &into, sc.IntTexts())
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return "encode: " + err.Error()
	}
	if !bytes.Equal(w, g) || !bytes.Equal(w, i) {
		return "record\n   got " + string(g) + "\n  into " + string(i) + "\n  want " + string(w)
	}
	if !bytes.Equal(w, tx) || !bytes.Equal(w, tt) {
		return "record from the line's integer text\n   got " + string(tx) + "\n  tight " + string(tt) + "\n  want " + string(w)
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// mutate returns variants of line that are near misses of its format: bytes flipped,
// deleted or duplicated, quotes, backslashes, escapes and spaces inserted, cut short.
func mutate(rng *rand.Rand, line string) []string {
	specials := []string{`"`, `\`, `\x22`, `\"`, `\u0041`, " ", "-", ".", "\t", "\n", "\xff", "é", `\\`, "[", "]", ":", ",", "}", "{", "null", "0", "\ufffd"}
	out := []string{line[:rng.Intn(len(line)+1)]}
	for k := 0; k < 6; k++ {
		b := []byte(line)
		for n := rng.Intn(3) + 1; n > 0 && len(b) > 0; n-- {
			i := rng.Intn(len(b))
			switch rng.Intn(4) {
			case 0:
				b[i] = byte(rng.Intn(256))
			case 1:
				b = append(b[:i], b[i+1:]...)
			case 2:
				s := specials[rng.Intn(len(specials))]
				b = append(b[:i], append([]byte(s), b[i:]...)...)
			default:
				b = append(b[:i], append([]byte{b[i]}, b[i:]...)...)
			}
		}
		out = append(out, string(b))
	}
	return out
}

// format names a log format: a spec and a name, as NewParser takes them.
type format struct{ spec, name string }

var jsonFormat = format{spec: FormatJSON}

// corpus is every format and line the package's tests know.
func corpus(t testing.TB) map[format][]string {
	c := map[format][]string{}
	vec, err := os.ReadFile(filepath.Join(testvectors.Dir(t), "nginx_ccab_json.log"))
	if err != nil {
		t.Fatal(err)
	}
	ccab := format{spec: "ccab"}
	for _, l := range strings.Split(strings.TrimSpace(string(vec)), "\n") {
		c[jsonFormat] = append(c[jsonFormat], l)
		c[ccab] = append(c[ccab], l)
	}
	edge := format{name: "edge"}
	for _, x := range []struct{ conf, name, log string }{
		{"testdata/combined_tcpinfo.conf", "edge", "testdata/combined_tcpinfo.log"},
		{"testdata/combined_tcpinfo.conf", "ltsv", "testdata/ltsv.log"},
		{"testdata/gcore_quoted.conf", "", "testdata/gcore_quoted.log"},
	} {
		spec, err1 := os.ReadFile(x.conf)
		lines, err2 := os.ReadFile(x.log)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		k := format{spec: string(spec), name: x.name}
		if x.name == "edge" {
			edge = k
		}
		c[k] = append(c[k], strings.Split(string(lines), "\n")...)
	}
	comb, js := benchLines(300)
	for i := range comb {
		c[edge] = append(c[edge], string(comb[i]))
		c[jsonFormat] = append(c[jsonFormat], string(js[i]))
		c[ccab] = append(c[ccab], string(js[i]))
	}
	c[format{spec: "combined"}] = append(c[format{spec: "combined"}],
		`198.51.100.9 - - [26/Apr/2019:09:47:40 +0300] "POST /api HTTP/1.1" 201 12 "-" "-"`,
		`198.51.100.9 - - [31/Dec/1969:23:59:59 -0000] "\x16\x03\x01" 400 0 "-" "-"`,
		`::1 - u [29/Feb/2024:12:00:00 +0530] "GET / HTTP/1.1" 200 0 "-" "a \x22b\x22"`)
	c[jsonFormat] = append(c[jsonFormat],
		`{"request_time":"0.5","status":"200","msec":"1763769601.532","remote_addr":"::ffff:192.0.2.1","request_method":"GET","tcpinfo_rtt":null,"extra":{"x":1}}`,
		`{"msec":1.5,"msec":2.5,"status":200,"status":"301"}`,
		`{"msec":1.5,"request_method":"G\u0045T","remote_addr":"10.0.0.\u0031","x":[1,{"a":[true,false,null]},"\ud800"]}`,
		`{"msec":1.5,"request_method":"G`+"\xff"+`T","status":true}`,
		`{"msec":1.5,"request":{"a":1},"request_method":"PUT"}`,
		`{"ms\u0065c":1.5}`, ` { "msec" : 1.5 , "status" : 204 } `, `{}`, `null`, `[]`, `{"msec":1e3}`,
		`{"msec":-0,"status":0}`, `{"msec":1.5,"status":01}`, `{"msec":1.5,"a":"`+"\x01"+`"}`,
		`{"msec":"1.5","time_local":"22/Nov/2025:00:00:01 +0000"}`, `{"time_local":"29/Feb/2024:23:59:59 -1130"}`,
		`{"time_local":"29/Feb/2023:00:00:00 +0000"}`, `{"time_local":"31/Apr/2024:00:00:00 +0000"}`,
		`{"time_local":"01/jan/2024:00:00:00 +0000"}`, `{"time_local":"01/Jan/0000:24:00:00 +2400"}`,
		`{"time_iso8601":"2025-11-22T00:00:01+09:00","remote_addr":"2001:db8::1"}`,
	)
	return c
}

// The single-pass readers give the reference parser's records and errors on the known
// lines and on many near misses of them.
func TestMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	n := 0
	for fm, lines := range corpus(t) {
		p, err1 := NewParser(fm.spec, fm.name)
		ref, err2 := newRefParser(fm.spec, fm.name)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		for _, line := range lines {
			for _, l := range append([]string{line}, mutate(rng, line)...) {
				n++
				if d := sameAsReference(p, ref, l); d != "" {
					t.Errorf("format %.40q %q, line %q: %s", fm.spec, fm.name, l, d)
				}
			}
		}
	}
	t.Logf("%d lines", n)
}

// Lines where the first fit fails (a value holds the literal after it, or no match), and
// formats the byte matcher leaves to the regexp.
func TestMatchesReferenceFirstFitFails(t *testing.T) {
	for _, tc := range []struct{ spec, line string }{
		{`$remote_addr $remote_user [$msec]`, `1.2.3.4 a [b c [1.5]`},
		{`$remote_addr $remote_user [$msec]`, `1.2.3.4 a [b c [1.5] [2.5]`},
		{`[$msec] $request_method $request $status`, `[1.5] GET GET / HTTP/1.1 200 200`},
		{`[$msec] $status.$request_time $request_method`, `[1.5] 200.1.5 GET`},
		{`[$msec] $status $request_method`, `[1.5] - GET`},
		{`[$msec] $status-$request_method`, `[1.5] --GET`},
		{`escape=json '{"t":$msec,"m":"$request_method","r":"$request"}'`, `{"t":1.5,"m":"G\"ET","r":"a\\"}`},
		{`escape=json '{"t":$msec,"m":"$request_method","r":"$request"}'`, `{"t":1.5,"m":"G","r":"x","r":"y"}`},
		{`escape=none '$msec $request_method $request'`, "1.5 GET a\nb"},
		{`escape=none '$msec $request_method $request'`, "1.5 G E T"},
		{"$msec \ufffd $request_method", "1.5 \xff GET"},
		{"$msec \ufffd $request_method", "1.5 \ufffd GET"},
		{`$msec $msec $request_method`, `1.5 2.5 GET`},
		{`$time_local|$remote_addr|$status`, `22/Nov/2025:00:00:01 +0000|10.0.0.1|200`},
	} {
		p, err1 := NewParser(tc.spec, "")
		ref, err2 := newRefParser(tc.spec, "")
		if errors.Is(err1, ErrAmbiguous) && errText(err1) == errText(err2) {
			continue // refused alike: a client could shift the fields of such lines
		}
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if d := sameAsReference(p, ref, tc.line); d != "" {
			t.Errorf("spec %q, line %q: %s", tc.spec, tc.line, d)
		}
	}
}

// A line built to make a backtracking matcher explode stays cheap (the regexp decides it in
// time linear in the line).
func TestMatchBounded(t *testing.T) {
	p, err := NewParser(`escape=none '$msec $a $b $c $d $e $f $g $h $i $j $status'`, "")
	if err != nil {
		t.Fatal(err)
	}
	line := "1.5 " + strings.Repeat("x ", 3000) + "notanumber"
	if _, err := p.Parse(line); err == nil {
		t.Fatal("matched")
	}
}

// FuzzJSONScanner compares the single-pass JSON scanner with encoding/json on the same
// line: whenever the scanner accepts a line, encoding/json must accept it too and give
// every variable the same value; and the whole parse must equal the reference parser's.
func FuzzJSONScanner(f *testing.F) {
	for _, l := range corpus(f)[jsonFormat] {
		f.Add(l)
	}
	p, err1 := NewParser(FormatJSON, "")
	ref, err2 := newRefParser(FormatJSON, "")
	if err := errors.Join(err1, err2); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var fast fields
		if scanJSONLine([]byte(line), &fast) {
			if !json.Valid([]byte(line)) {
				t.Fatalf("scanner accepted invalid JSON %q", line)
			}
			var gen fields
			if err := jsonFields([]byte(line), &gen); err != nil {
				t.Fatalf("scanner accepted %q, encoding/json: %v", line, err)
			}
			for id := varID(0); id < numVars; id++ {
				gv, gok, gerr := fast.get(id)
				wv, wok, werr := gen.get(id)
				if gok != wok || !bytes.Equal(gv, wv) || errText(gerr) != errText(werr) {
					t.Fatalf("%q: %s = %q %v %v, encoding/json %q %v %v", line, varName(id), gv, gok, gerr, wv, wok, werr)
				}
			}
		}
		if d := sameAsReference(p, ref, line); d != "" {
			t.Fatalf("line %q: %s", line, d)
		}
	})
}

// The numbers the JSON scanner reads on the way (jsonNum.value, stringNum) give the
// reference parser's record: every read variable given numbers and strings of many shapes.
func TestJSONScannedNumbersMatchReference(t *testing.T) {
	p, err1 := NewParser(FormatJSON, "")
	ref, err2 := newRefParser(FormatJSON, "")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	shapes := []string{"0", "7", "200", "1763769600.532", "1763769600.5", "1.5", "1.2345", "0.001", "-1", "-0",
		"1e3", "1.5E+2", "123456789012345", "1234567890123456", "123456789012345678901", "999999999999999.999",
		`"62098"`, `""`, `"-"`, `"007"`, `"1.5"`, `"1.2345"`, `"1."`, `".5"`, `"10.0.0.1"`, `"010.0.0.1"`,
		`"10.0.0.256"`, `"10.0.0"`, `"::1"`, `"unix:"`, `"1\u0030"`, `"12a"`, "null"}
	keys := []string{"msec", "remote_addr", "connection", "connection_requests", "status", "bytes_sent",
		"body_bytes_sent", "request_time", "tcpinfo_rtt", "tcpinfo_rttvar", "tcpinfo_snd_cwnd", "tcpinfo_rcv_space"}
	for _, k := range keys {
		for _, v := range shapes {
			line := `{"msec":1763769600.532,"remote_addr":"198.51.100.7","status":200,"` + k + `":` + v + `}`
			if d := sameAsReference(p, ref, line); d != "" {
				t.Errorf("%s: %s", line, d)
			}
		}
	}
}
