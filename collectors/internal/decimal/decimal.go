// Package decimal converts decimal text ("5.613", "1.33", "1763769601.532") into integers and
// floats scaled by a power of ten, exactly: the text's digits are shifted, never multiplied as
// binary floats, so 5.613 ms is 5613 µs and 1763769601.532 s is 1763769601532 ms.
package decimal

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrSyntax and ErrRange are wrapped by the errors this package returns.
var (
	ErrSyntax = errors.New("invalid decimal")
	ErrRange  = errors.New("decimal out of range")
)

// number is sign · digits · 10^exp, digits without leading zeros ("" means zero).
type number struct {
	neg    bool
	digits string
	exp    int
}

// maxExp bounds the exponent so that absurd input ("1e999999999") cannot allocate.
const maxExp = 400

func parse(s string) (number, error) {
	var n number
	orig := s
	if s == "" {
		return n, fmt.Errorf("%w: empty", ErrSyntax)
	}
	if s[0] == '+' || s[0] == '-' {
		n.neg = s[0] == '-'
		s = s[1:]
	}
	mant, expPart, hasExp := strings.Cut(s, "e")
	if !hasExp {
		mant, expPart, hasExp = strings.Cut(s, "E")
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" && frac == "" {
		return n, fmt.Errorf("%w: %q", ErrSyntax, orig)
	}
	if !allDigits(intPart) || !allDigits(frac) {
		return n, fmt.Errorf("%w: %q", ErrSyntax, orig)
	}
	if hasExp {
		e := expPart
		if e != "" && (e[0] == '+' || e[0] == '-') {
			e = e[1:]
		}
		if e == "" || !allDigits(e) || len(e) > 4 {
			return n, fmt.Errorf("%w: exponent of %q", ErrSyntax, orig)
		}
		v, _ := strconv.Atoi(expPart) // cannot fail: ≤ 4 digits with optional sign
		n.exp = v
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	n.exp -= len(frac)
	// Drop trailing zeros into the exponent to keep digits short.
	trimmed := strings.TrimRight(digits, "0")
	n.exp += len(digits) - len(trimmed)
	n.digits = trimmed
	if n.digits == "" {
		n.exp = 0
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ScaleInt returns s·10^exp10 rounded to the nearest integer (halves away from zero).
func ScaleInt(s string, exp10 int) (int64, error) {
	n, err := parse(s)
	if err != nil {
		return 0, err
	}
	if n.digits == "" {
		return 0, nil
	}
	e := n.exp + exp10
	var intDigits string
	roundUp := false
	switch {
	case e >= 0:
		if len(n.digits)+e > 19 {
			return 0, fmt.Errorf("%w: %q", ErrRange, s)
		}
		intDigits = n.digits + strings.Repeat("0", e)
	case -e > len(n.digits):
		// Entirely below the units digit; only 0.5 and above rounds up, and that needs
		// -e == len(digits), handled below.
		return 0, nil
	default:
		cut := len(n.digits) + e
		intDigits = n.digits[:cut]
		roundUp = n.digits[cut] >= '5'
	}
	var v uint64
	if intDigits != "" {
		var err error
		v, err = strconv.ParseUint(intDigits, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %q", ErrRange, s)
		}
	}
	if roundUp {
		v++
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %q", ErrRange, s)
	}
	if n.neg {
		return -int64(v), nil
	}
	return int64(v), nil
}

// ScaleFloat returns s·10^exp10 as the nearest float64.
func ScaleFloat(s string, exp10 int) (float64, error) {
	n, err := parse(s)
	if err != nil {
		return 0, err
	}
	if n.digits == "" {
		return 0, nil
	}
	e := n.exp + exp10
	if e > maxExp || e < -maxExp {
		if e < 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: %q", ErrRange, s)
	}
	text := n.digits + "e" + strconv.Itoa(e)
	if n.neg {
		text = "-" + text
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%w: %q", ErrRange, s)
	}
	return f, nil
}

// Float parses s as a plain decimal float (no hex, no NaN or Inf).
func Float(s string) (float64, error) { return ScaleFloat(s, 0) }

// Uint parses s as a non-negative decimal integer that fits an int64.
func Uint(s string) (int64, error) {
	if s == "" || !allDigits(s) {
		return 0, fmt.Errorf("%w: %q is not an unsigned integer", ErrSyntax, s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q", ErrRange, s)
	}
	return v, nil
}
