package record

import (
	"encoding/binary"
	"math/bits"
)

// appendInt appends v in decimal, the same bytes as strconv.AppendInt(b, v, 10), written two
// digits at a time straight into b (strconv formats into its own buffer and copies it: a third
// of the encoder's time on access-log records, whose fields are mostly integers): below 10^8
// in 32-bit arithmetic, one append per number up to four digits; above, in groups of eight.
func appendInt(b []byte, v int64) []byte {
	u := uint64(v)
	if v < 0 {
		b = append(b, '-')
		u = -u // two's complement: also right for math.MinInt64
	}
	return appendUint(b, u)
}

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

func appendUint(b []byte, u uint64) []byte {
	if u < 1e8 {
		return appendUint32(b, uint32(u))
	}
	// the digits above the last eight, then the last eight (zero-padded)
	hi := u / 1e8
	lo := uint32(u - hi*1e8)
	if hi < 1e8 {
		b = appendUint32(b, uint32(hi))
	} else { // ≥ 10^16: at most four more digits above
		top := hi / 1e8
		b = appendUint32(b, uint32(top))
		b = append8(b, uint32(hi-top*1e8))
	}
	return append8(b, lo)
}

// appendUint32 appends u < 10^8 without leading zeros: one append of the whole number.
func appendUint32(b []byte, u uint32) []byte {
	switch {
	case u < 10:
		return append(b, byte('0'+u))
	case u < 100:
		return append(b, digitPairs[2*u], digitPairs[2*u+1])
	case u < 1000:
		q := u / 100
		r := (u - q*100) * 2
		return append(b, byte('0'+q), digitPairs[r], digitPairs[r+1])
	case u < 10000:
		q := u / 100
		l, r := q*2, (u-q*100)*2
		return append(b, digitPairs[l], digitPairs[l+1], digitPairs[r], digitPairs[r+1])
	}
	hi := u / 10000
	b = appendUint32(b, hi) // 1 to 4 digits
	return append4(b, u-hi*10000)
}

// append4 appends u < 10^4 as exactly four digits.
func append4(b []byte, u uint32) []byte {
	q := u / 100
	l, r := q*2, (u-q*100)*2
	return append(b, digitPairs[l], digitPairs[l+1], digitPairs[r], digitPairs[r+1])
}

// append8 appends u < 10^8 as exactly eight digits.
func append8(b []byte, u uint32) []byte {
	hi := u / 10000
	return append4(append4(b, hi), u-hi*10000)
}

// appendIntW is appendInt for a writer that appends at least 7 more bytes after the number
// (the record encoders: a key follows every integer): it may write up to 8 bytes past the
// number within b's capacity, which that text then overwrites. A number below 10^8 is
// converted to eight digits in one word (digits8) and stored with one 8-byte write.
func appendIntW(b []byte, v int64) []byte {
	if v < 0 || cap(b)-len(b) < 24 {
		return appendInt(b, v)
	}
	u := uint64(v)
	if u < 1e8 {
		return putTrimmed(b, uint32(u))
	}
	hi := u / 1e8
	lo := uint32(u - hi*1e8)
	if hi < 1e8 {
		b = putTrimmed(b, uint32(hi))
	} else { // ≥ 10^16
		top := hi / 1e8
		b = put8(putTrimmed(b, uint32(top)), uint32(hi-top*1e8))
	}
	return put8(b, lo)
}

// digits8 returns the eight decimal digits of u < 10^8 as ASCII in a little-endian word (the
// first digit in the lowest byte): the two halves of four digits, then pairs, then digits,
// each split by a multiplication that stays inside its lane (x*5243>>19 is x/100 for
// x < 10^4; x*103>>10 is x/10 for x < 100).
func digits8(u uint32) uint64 {
	hi := u / 10000
	x := uint64(hi) | uint64(u-hi*10000)<<32
	q := (x * 5243 >> 19) & 0x0000007f0000007f
	x = (x-q*100)<<16 | q
	q = (x * 103 >> 10) & 0x000f000f000f000f
	x = (x-q*10)<<8 | q
	return x | 0x3030303030303030
}

// putTrimmed writes u < 10^8 without leading zeros; cap(b)-len(b) ≥ 8. The length comes
// from u's bit length (short latency), not from the digits: the next field's position does
// not wait for the multiplications of digits8.
func putTrimmed(b []byte, u uint32) []byte {
	n := digitCount(u)
	l := len(b)
	binary.LittleEndian.PutUint64(b[l:l+8], digits8(u)>>(64-8*n))
	return b[:l+n]
}

// digitCount is the number of decimal digits of u < 10^8 (1 for 0): floor(log10(u)) + 1 from
// the bit length (Bit Twiddling Hacks' IntegerLog10).
func digitCount(u uint32) int {
	t := bits.Len32(u) * 1233 >> 12
	if u >= pow10u32[t] {
		t++
	}
	return max(t, 1)
}

// pow10u32[i] is 10^i.
var pow10u32 = [10]uint32{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000}

// put8 writes u < 10^8 as exactly eight digits; cap(b)-len(b) ≥ 8.
func put8(b []byte, u uint32) []byte {
	l := len(b)
	binary.LittleEndian.PutUint64(b[l:l+8], digits8(u))
	return b[:l+8]
}
