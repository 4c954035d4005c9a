package ss

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/internal/testvectors"
)

// FuzzParseSS feeds arbitrary text to the scanner and parser: they must never panic, every
// error must be a *ParseError, and every socket they accept must encode as valid JSON with a
// proper prefix in place of the client address.
func FuzzParseSS(f *testing.F) {
	dir := testvectors.Dir(f)
	seeds, _ := filepath.Glob(filepath.Join(dir, "ss_*.txt"))
	local, _ := filepath.Glob("testdata/*.txt")
	for _, path := range append(seeds, local...) {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
		for _, line := range strings.Split(string(b), "\n") {
			f.Add(line)
		}
	}
	f.Add("ESTAB 0 0 [::1]:1 [::1]:2 bbr bbr:(bw:1bps,mrtt:1,pacing_gain:1,cwnd_gain:1,version:3)")
	// ss without -n, unreadable and future tokens, a continuation that lost its indent
	f.Add("ESTAB 0 0 10.0.0.1:https 10.0.0.2:http-alt\n\t cubic rtt:1/0.5\n")
	f.Add("ESTAB 0 0 10.0.0.1:443 10.0.0.9:444 cubic rtt:x/1 bbr:(bw:1.2xbps,mrtt:1,future,newkey:7) pacing_rate retrans:1 lost:q\n")
	f.Add("ESTAB 0 0 10.0.0.1:22 10.0.0.2:40000\n\t cubic rto:234 rtt:33.199/17.225 cwnd:9\nretrans:0/4 unacked:1 reordering:4\n\t ts\n")
	f.Fuzz(func(t *testing.T, in string) {
		sc := NewScanner(strings.NewReader(in))
		var buf bytes.Buffer
		enc := record.NewEncoder(&buf)
		for sc.Scan() {
			s, err := ParseEntry(sc.Entry(), Options{DefaultState: "ESTAB"})
			if err != nil {
				var pe *ParseError
				if !errors.As(err, &pe) || pe.Reason == "" {
					t.Fatalf("error without a reason: %v", err)
				}
				continue
			}
			r := s.Record(anon.SockKey{Salt: "fuzz"}, record.Meta{SampleRate: 1})
			buf.Reset()
			if err := enc.Encode(&r); err != nil {
				t.Fatalf("accepted socket does not encode: %v", err)
			}
			if !json.Valid(buf.Bytes()) {
				t.Fatalf("invalid JSON: %s", buf.Bytes())
			}
			if p, err := netip.ParsePrefix(r.PeerPrefix); err != nil || (p.Bits() != 24 && p.Bits() != 48) {
				t.Fatalf("peer_prefix %q is not a /24 or /48", r.PeerPrefix)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("read error from a strings.Reader: %v", err)
		}
	})
}
