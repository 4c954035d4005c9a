package record

import (
	"math"
	"math/rand"
	"strconv"
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
		}
	}
}
