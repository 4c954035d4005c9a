package record

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

func TestAppendIntMatchesStrconv(t *testing.T) {
	vals := []int64{0, 1, -1, 9, 10, 11, 99, 100, 101, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, -math.MaxInt64}
	for p := int64(1); p <= 1e18; p *= 10 {
		vals = append(vals, p-1, p, p+1, -p+1, -p, -p-1)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 100000; i++ {
		v := rng.Int63() >> uint(rng.Intn(63))
		if i%2 == 1 {
			v = -v
		}
		vals = append(vals, v)
	}
	for _, v := range vals {
		for _, pre := range [][]byte{nil, []byte("x:"), make([]byte, 3, 40)} {
			want := strconv.AppendInt(append([]byte(nil), pre...), v, 10)
			if got := appendInt(append([]byte(nil), pre...), v); string(got) != string(want) {
				t.Fatalf("appendInt(%q, %d) = %q, want %q", pre, v, got, want)
			}
			if got := appendInt(append(make([]byte, 0, 64), pre...), v); string(got) != string(want) {
				t.Fatalf("appendInt(%q, %d) with capacity = %q, want %q", pre, v, got, want)
			}
			if got := appendInt(pre[:len(pre):len(pre)], v); string(got) != string(want) {
				t.Fatalf("appendInt(%q, %d) without capacity = %q, want %q", pre, v, got, want)
			}
			// appendIntW: the same digits; what it writes past them stays within 8 bytes
			buf := append(make([]byte, 0, 64), pre...)
			for i := len(buf); i < cap(buf); i++ {
				buf[:cap(buf)][i] = '#'
			}
			got := appendIntW(buf, v)
			if string(got) != string(want) {
				t.Fatalf("appendIntW(%q, %d) = %q, want %q", pre, v, got, want)
			}
			if rest := got[len(got)+8 : cap(got)]; strings.Trim(string(rest), "#") != "" {
				t.Fatalf("appendIntW(%q, %d) wrote more than 8 bytes past the number: %q", pre, v, got[:cap(got)])
			}
			if got := appendIntW(append(make([]byte, 0, len(pre)+20), pre...), v); string(got) != string(want) {
				t.Fatalf("appendIntW(%q, %d) with little capacity = %q, want %q", pre, v, got, want)
			}
		}
	}
}

// digits8 is the zero-padded eight digits of its argument: every value below 10^5, every
// value around a multiple of 10^4, and a million random ones.
func TestDigits8(t *testing.T) {
	check := func(u uint32) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], digits8(u))
		if want := fmt.Sprintf("%08d", u); string(w[:]) != want {
			t.Fatalf("digits8(%d) = %q, want %q", u, w, want)
		}
	}
	for u := uint32(0); u < 1e5; u++ {
		check(u)
	}
	for k := uint32(1); k < 1e4; k++ {
		for _, d := range []uint32{0, 1, 99, 100, 9999} {
			check(k*1e4 + d)
			check(k*1e4 - 1)
		}
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 1000000; i++ {
		check(uint32(rng.Intn(1e8)))
	}
}
