package netlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ccab-dev/ccab/collectors/record"
)

// FuzzDecode: no input panics; every error is a *DecodeError; every accepted message makes
// a record that encodes as JSON.
//
//	go test ./collectors/netlink -run '^$' -fuzz FuzzDecode -fuzztime 30s -fuzzminimizetime 10x -parallel 1
func FuzzDecode(f *testing.F) {
	for _, m := range readFixture(f) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		s, err := Decode(msg)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if _, err := DecodeHeader(msg); err != nil {
			t.Fatalf("Decode accepted what DecodeHeader rejects: %v", err)
		}
		r, ok := s.Record(testKey, testMeta)
		if !ok {
			return
		}
		var buf bytes.Buffer
		if err := record.NewEncoder(&buf).Encode(&r); err != nil {
			t.Fatal(err)
		}
		if !json.Valid(buf.Bytes()) {
			t.Fatalf("invalid JSON %q", buf.Bytes())
		}
	})
}
