package lines

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 100)
	in := "a\r\n\nb\n" + long + "\nc"
	r := NewReader(strings.NewReader(in), 10)
	want := []Line{{1, "a", false}, {2, "", false}, {3, "b", false}, {4, "xxxxxxxxxx", true}, {5, "c", false}}
	for _, w := range want {
		got, err := r.Next()
		if err != nil || got != w {
			t.Fatalf("Next() = %+v, %v; want %+v", got, err, w)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next() at end: %v", err)
	}
}

func TestReaderLongerThanBuffer(t *testing.T) {
	long := strings.Repeat("y", 200<<10)
	r := NewReader(strings.NewReader(long+"\nz\n"), 0)
	l, err := r.Next()
	if err != nil || len(l.Text) != len(long) || l.TooLong {
		t.Fatalf("Next() = len %d, tooLong %v, %v", len(l.Text), l.TooLong, err)
	}
	if l, _ := r.Next(); l.Text != "z" || l.Num != 2 {
		t.Fatalf("second line = %+v", l)
	}
}

// NextBytes gives the lines Next gives, whether or not a line fits the read buffer.
func TestNextBytesMatchesNext(t *testing.T) {
	in := "a\r\n\nb\n" + strings.Repeat("x", 100) + "\n" + strings.Repeat("y", 70<<10) + "\r\n" +
		strings.Repeat("w", 10) + "\n" + strings.Repeat("v", 9) + "\nc"
	for _, max := range []int{10, 11, 0} {
		a := NewReader(strings.NewReader(in), max)
		b := NewReader(strings.NewReader(in), max)
		for {
			want, err1 := a.Next()
			got, err2 := b.NextBytes()
			if !errors.Is(err1, err2) && err1 != err2 {
				t.Fatalf("max %d: errors %v and %v", max, err1, err2)
			}
			if err1 != nil {
				break
			}
			if got.Num != want.Num || string(got.Text) != want.Text || got.TooLong != want.TooLong {
				t.Fatalf("max %d: NextBytes = %d %.20q %v, Next = %d %.20q %v", max, got.Num, got.Text, got.TooLong,
					want.Num, want.Text, want.TooLong)
			}
		}
	}
}
