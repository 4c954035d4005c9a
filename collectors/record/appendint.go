package record

import (
	"math/bits"
)

// appendInt appends v in decimal, the same bytes as strconv.AppendInt(b, v, 10), written in
// place two digits at a time (strconv formats into its own buffer and copies it: a third of
// the encoder's time on access-log records, whose fields are mostly integers).
func appendInt(b []byte, v int64) []byte {
	u := uint64(v)
	if v < 0 {
		b = append(b, '-')
		u = -u // two's complement: also right for math.MinInt64
	}
	return appendUint(b, u)
}

// pow10s[i] is 10^i.
var pow10s = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
	1e17, 1e18, 1e19}

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

func appendUint(b []byte, u uint64) []byte {
	if u < 10 {
		return append(b, byte('0'+u))
	}
	// digits: floor(log10(u)) + 1, from the bit length (Bit Twiddling Hacks' IntegerLog10)
	t := bits.Len64(u) * 1233 >> 12
	n := t + 1
	if u < pow10s[t] {
		n = t
	}
	l := len(b)
	if cap(b)-l >= n {
		b = b[:l+n]
	} else {
		b = append(b, make([]byte, n)...)
	}
	i := l + n
	for u >= 100 {
		q := u / 100
		r := (u - q*100) * 2
		i -= 2
		b[i], b[i+1] = digitPairs[r], digitPairs[r+1]
		u = q
	}
	if u >= 10 {
		r := u * 2
		b[i-2], b[i-1] = digitPairs[r], digitPairs[r+1]
	} else {
		b[i-1] = byte('0' + u)
	}
	return b
}
