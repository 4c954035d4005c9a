package record

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// referenceEncode is the encoder this package had before AppendHTTP/AppendTCP: encoding/json
// with HTML escaping off, driven by the struct tags. The append encoders must produce the
// same bytes.
func referenceEncode(rec any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// nastyStrings are strings whose JSON escaping is easy to get wrong.
var nastyStrings = []string{
	"", "edge-7", "6.1.0-18-amd64", "<GET>&", `a"b\c`, "\x00\x01\x1f\x7f", "\b\f\n\r\t",
	"é ü 日本", "\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\U0001F600",
	"\ufffd", "tab\there", "/", "\u007f\u0080",
}

func randString(rng *rand.Rand) string {
	if rng.Intn(3) == 0 {
		return nastyStrings[rng.Intn(len(nastyStrings))]
	}
	n := rng.Intn(12)
	b := make([]byte, n)
	for i := range b {
		switch rng.Intn(4) {
		case 0:
			b[i] = byte(rng.Intn(256))
		default:
			b[i] = byte(' ' + rng.Intn(95))
		}
	}
	return string(b)
}

func randInt(rng *rand.Rand) *int64 {
	switch rng.Intn(6) {
	case 0:
		return nil
	case 1:
		return Int(0)
	case 2:
		return Int(math.MaxInt64)
	case 3:
		return Int(math.MinInt64)
	}
	return Int(rng.Int63n(1<<uint(rng.Intn(62)+1)) - rng.Int63n(3))
}

var specialFloats = []float64{0, 1, 912, 0.5, 2.88671875, 1e21, 1e20, 1e-6, 9.99e-7, 1e-7, -3, 123456789012,
	math.MaxFloat64, math.SmallestNonzeroFloat64, -0.0, 0.1 + 0.2, 1.0 / 3}

func randFloat(rng *rand.Rand) float64 {
	if rng.Intn(2) == 0 {
		return specialFloats[rng.Intn(len(specialFloats))]
	}
	return math.Float64frombits(rng.Uint64()&^(0x7ff<<52) | uint64(rng.Intn(0x7fe)+1)<<52)
}

func randOptFloat(rng *rand.Rand) *Float {
	if rng.Intn(4) == 0 {
		return nil
	}
	return F(randFloat(rng))
}

// randFill sets every field of the struct v points to at random.
func randFill(rng *rand.Rand, v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch p := f.Addr().Interface().(type) {
		case *string:
			*p = randString(rng)
		case *bool:
			*p = rng.Intn(4) == 0
		case *int64:
			*p = *randInt0(rng)
		case **int64:
			*p = randInt(rng)
		case **bool:
			switch rng.Intn(3) {
			case 0:
				*p = nil
			case 1:
				*p = Bool(true)
			default:
				*p = Bool(false)
			}
		case *Float:
			*p = Float(randFloat(rng))
		case **Float:
			*p = randOptFloat(rng)
		default:
			panic("randFill: unhandled field type " + f.Type().String())
		}
	}
}

func randInt0(rng *rand.Rand) *int64 {
	if p := randInt(rng); p != nil {
		return p
	}
	return Int(-1)
}

// The append encoders write exactly what encoding/json wrote, on many random records.
func TestAppendMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for i := 0; i < n; i++ {
		var h HTTPRequest
		var s TCPSample
		randFill(rng, reflect.ValueOf(&h).Elem())
		randFill(rng, reflect.ValueOf(&s).Elem())
		for _, tc := range []struct {
			rec any
			got func() ([]byte, error)
		}{
			{&h, func() ([]byte, error) { return AppendHTTP([]byte("prefix"), &h) }},
			{&s, func() ([]byte, error) { return AppendTCP([]byte("prefix"), &s) }},
		} {
			if h.PeerPrefixNull {
				h.PeerPrefix = "" // written as null; encoding/json writes "" (json:"-" flag)
			}
			want, err := referenceEncode(tc.rec)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if _, ok := tc.rec.(*HTTPRequest); ok && h.PeerPrefixNull {
				want = bytes.Replace(want, []byte(`"peer_prefix":""`), []byte(`"peer_prefix":null`), 1)
			}
			got, err := tc.got()
			if err != nil {
				t.Fatalf("append: %v", err)
			}
			if !bytes.Equal(got[len("prefix"):], want) || string(got[:len("prefix")]) != "prefix" {
				t.Fatalf("record %d (%T):\n got %s\nwant %s", i, tc.rec, got, want)
			}
		}
	}
}

// Every string, byte by byte over a range, escapes as encoding/json escapes it.
func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	var all []string
	for c := 0; c < 256; c++ {
		all = append(all, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"b")
	}
	for r := rune(0x80); r < 0x3000; r += 7 {
		all = append(all, string(r))
	}
	all = append(all, nastyStrings...)
	// every byte value at every position of printable strings of 1 to 20 bytes: the eight-byte
	// fast path (plainString) and its tail see each byte it must leave to the escaping loop
	for n := 1; n <= 20; n++ {
		for at := 0; at < n; at++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("x/ -~", 4)[:n])
				b[at] = byte(c)
				all = append(all, string(b))
			}
		}
	}
	for _, s := range all {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		// json.Marshal escapes HTML; undo that for the comparison the way SetEscapeHTML(false) would.
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendString(%q) = %s, want %s (valid UTF-8: %v)", s, got, want, utf8.ValidString(s))
		}
	}
}

func TestAppendNotFinite(t *testing.T) {
	h := HTTPRequest{RequestTimeMs: F(math.Inf(1))}
	if got, err := AppendHTTP([]byte("x"), &h); err == nil || string(got) != "x" || !strings.Contains(err.Error(), "request_time_ms") {
		t.Errorf("AppendHTTP(Inf) = %q, %v", got, err)
	}
	s := TCPSample{BBRCwndGain: F(math.NaN()), SampleRate: 1}
	if got, err := AppendTCP(nil, &s); err == nil || len(got) != 0 || !strings.Contains(err.Error(), "bbr_cwnd_gain") {
		t.Errorf("AppendTCP(NaN) = %q, %v", got, err)
	}
}

func BenchmarkAppendHTTP(b *testing.B) {
	r := HTTPRequest{TsMs: 1763769601532, PeerPrefix: "198.51.100.0/24", ConnSerial: Int(1841), ConnRequests: Int(1),
		Method: "GET", Status: Int(200), BytesSent: Int(4194624), BodyBytesSent: Int(4194304), RequestTimeMs: F(912),
		TcpinfoRTTUs: Int(41250), TcpinfoRTTVarUs: Int(3125), TcpinfoSndCwnd: Int(87), TcpinfoRcvSpace: Int(14600)}
	Meta{Pop: "nrt1", Host: "edge-7", Kernel: "6.1.0-18-amd64", Arm: "bbr2", RolloutID: "r-2025-11", CC: "bbr", SampleRate: 1}.StampHTTP(&r)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf, _ = AppendHTTP(buf[:0], &r)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("http_encoder", func(b *testing.B) {
		b.ReportAllocs()
		var enc HTTPEncoder
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf, _ = enc.Append(buf[:0], &r)
		}
		b.SetBytes(int64(len(buf)))
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = referenceEncode(&r)
		}
	})
}

// The integral fast path of AppendFloat prints what strconv prints.
func TestAppendFloatIntegral(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	xs := []float64{0, 1, -1, 912, 1 << 52, 1<<53 - 1, -(1<<53 - 1), 1 << 53, 1e15, 999999999999999, 123456789012}
	for i := 0; i < 100000; i++ {
		xs = append(xs, float64(rng.Int63n(1<<uint(rng.Intn(54)+1))-rng.Int63n(1<<20)))
	}
	for _, x := range xs {
		want := strconv.AppendFloat(nil, x, 'f', -1, 64)
		if math.Abs(x) >= 1e21 {
			want = strconv.AppendFloat(nil, x, 'e', -1, 64)
		}
		if !bytes.ContainsAny(want, ".e") {
			want = append(want, ".0"...)
		}
		if got, _ := AppendFloat(nil, x); !bytes.Equal(got, want) {
			t.Fatalf("AppendFloat(%v) = %s, want %s", x, got, want)
		}
	}
	if got, _ := AppendFloat(nil, math.Copysign(0, -1)); string(got) != "-0.0" {
		t.Errorf("AppendFloat(-0) = %s", got)
	}
}

// HTTPEncoder writes AppendHTTP's bytes on a stream of records whose schema and host fields
// sometimes stay and sometimes change (one field at a time), including after an error.
func TestHTTPEncoderMatchesAppendHTTP(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var enc HTTPEncoder
	var prev HTTPRequest
	randFill(rng, reflect.ValueOf(&prev).Elem())
	hits := 0
	for i := 0; i < 20000; i++ {
		var h HTTPRequest
		randFill(rng, reflect.ValueOf(&h).Elem())
		keep := [...]*string{&h.Schema, &h.Pop, &h.Host, &h.Kernel, &h.Arm, &h.RolloutID, &h.CC}
		from := [...]string{prev.Schema, prev.Pop, prev.Host, prev.Kernel, prev.Arm, prev.RolloutID, prev.CC}
		change := rng.Intn(len(keep) + 3) // mostly: every host field as in the previous record
		for k := range keep {
			if k != change {
				*keep[k] = from[k]
			}
		}
		if rng.Intn(4) != 0 { // mostly the previous sample rate (its text is kept), 0 and -0 too
			h.SampleRate = prev.SampleRate
		} else if rng.Intn(2) == 0 {
			h.SampleRate = Float([]float64{0, math.Copysign(0, -1), 1, 0.5, math.NaN()}[rng.Intn(5)])
		}
		if rng.Intn(3) == 0 { // the same text in other strings: compared by content
			h.Host = strings.Clone(h.Host)
		}
		if change >= len(keep) {
			hits++
		}
		want, werr := AppendHTTP([]byte("prefix"), &h)
		got, gerr := enc.Append([]byte("prefix"), &h)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("record %d: HTTPEncoder\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
		prev = h
	}
	if hits < 1000 {
		t.Fatalf("only %d records reused the cached host text", hits)
	}
}

// AppendTexts writes AppendHTTP's bytes when integers come as their text: texts with and
// without 8 bytes of capacity behind them, buffers with and without room.
func TestAppendTextsMatchesAppendHTTP(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	var enc HTTPEncoder
	for i := 0; i < 20000; i++ {
		var h HTTPRequest
		randFill(rng, reflect.ValueOf(&h).Elem())
		ints := [...]*int64{h.ConnSerial, h.ConnRequests, h.Status, h.BytesSent, h.BodyBytesSent,
			h.TcpinfoRTTUs, h.TcpinfoRTTVarUs, h.TcpinfoSndCwnd, h.TcpinfoRcvSpace}
		var texts IntTexts
		for k, p := range ints {
			if p == nil || *p < 0 || *p >= 1e15 || rng.Intn(4) == 0 {
				continue
			}
			line := strconv.AppendInt([]byte("x"), *p, 10)
			if rng.Intn(2) == 0 {
				line = append(line, " 12345678"...) // the text is followed by more of the line
			}
			texts[k] = line[1 : 1+len(strconv.FormatInt(*p, 10))]
		}
		want, werr := AppendHTTP([]byte("prefix"), &h)
		buf := []byte("prefix")
		if rng.Intn(2) == 0 {
			buf = append(make([]byte, 0, 4096), buf...)
			for k := len(buf); k < cap(buf); k++ {
				buf[:cap(buf)][k] = '#'
			}
		}
		got, gerr := enc.AppendTexts(buf, &h, &texts)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("record %d: AppendTexts\n got %s (%v)\nwant %s (%v)", i, got, gerr, want, werr)
		}
		// the word writes past a key or a number are overwritten by the record itself:
		// nothing changes beyond its end
		if gerr == nil && cap(got) == 4096 && strings.Trim(string(got[len(got):cap(got)]), "#") != "" {
			t.Fatalf("record %d: AppendTexts wrote past the record's end: %q", i, got[len(got):len(got)+32])
		}
	}
}
