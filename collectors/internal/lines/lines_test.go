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
