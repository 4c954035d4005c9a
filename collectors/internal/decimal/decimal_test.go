package decimal

import (
	"errors"
	"testing"
)

func TestScaleInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		exp  int
		want int64
	}{
		{"5.613", 3, 5613},
		{"0.027", 3, 27},
		{"0.01", 3, 10},
		{"10.62", 3, 10620},
		{"1.486", 3, 1486},
		{"30", 3, 30000},
		{"226.666", 0, 227},
		{"226.5", 0, 227},
		{"226.4999", 0, 226},
		{"0.4", 0, 0},
		{"0.5", 0, 1},
		{"0.0004", 3, 0},
		{"0.0005", 3, 1},
		{"10.8", 6, 10800000},
		{"1.33", 9, 1330000000},
		{"12871.1", 6, 12871100000},
		{"1763769601.532", 3, 1763769601532},
		{"1763769602.004", 3, 1763769602004},
		{"0.000", 3, 0},
		{"007", 0, 7},
		{"1.23e+03", 3, 1230000},
		{"4294967.295", 3, 4294967295},
		{"-2.5", 0, -3},
		{"9223372036854775807", 0, 9223372036854775807},
		{"5.", 0, 5},
		{".5", 1, 5},
		{"1e-500", 0, 0},
	} {
		got, err := ScaleInt(tc.in, tc.exp)
		if err != nil || got != tc.want {
			t.Errorf("ScaleInt(%q, %d) = %d, %v; want %d", tc.in, tc.exp, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		exp  int
		want error
	}{
		{"", 0, ErrSyntax}, {".", 0, ErrSyntax}, {"1.2.3", 0, ErrSyntax}, {"abc", 0, ErrSyntax},
		{"NaN", 0, ErrSyntax}, {"Inf", 0, ErrSyntax}, {"0x10", 0, ErrSyntax}, {"1e", 0, ErrSyntax},
		{"1e99999", 0, ErrSyntax}, {"9223372036854775808", 0, ErrRange}, {"1e19", 0, ErrRange},
		{"99999999999999999", 3, ErrRange}, {"1 ", 0, ErrSyntax}, {"--1", 0, ErrSyntax},
	} {
		if _, err := ScaleInt(tc.in, tc.exp); !errors.Is(err, tc.want) {
			t.Errorf("ScaleInt(%q, %d) err = %v; want %v", tc.in, tc.exp, err, tc.want)
		}
	}
}

func TestScaleFloat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		exp  int
		want float64
	}{
		{"0.912", 3, 912}, {"0.250", 3, 250}, {"0.000", 3, 0}, {"2.88672", 0, 2.88672},
		{"1.25", 0, 1.25}, {"0.0005", 3, 0.5}, {"1e-999", 0, 0}, {"0.1", 0, 0.1},
	} {
		got, err := ScaleFloat(tc.in, tc.exp)
		if err != nil || got != tc.want {
			t.Errorf("ScaleFloat(%q, %d) = %v, %v; want %v", tc.in, tc.exp, got, err, tc.want)
		}
	}
	for _, in := range []string{"1e999", "nan", "+Inf", "0x1p3", ""} {
		if _, err := ScaleFloat(in, 0); err == nil {
			t.Errorf("ScaleFloat(%q) succeeded", in)
		}
	}
}

func TestUint(t *testing.T) {
	if v, err := Uint("14600"); v != 14600 || err != nil {
		t.Errorf("Uint(14600) = %d, %v", v, err)
	}
	for _, in := range []string{"", "-1", "+1", "1.0", "99999999999999999999", " 1"} {
		if _, err := Uint(in); err == nil {
			t.Errorf("Uint(%q) succeeded", in)
		}
	}
}
