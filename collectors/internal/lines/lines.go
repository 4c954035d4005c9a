// Package lines reads text line by line with line numbers, and survives lines of any length:
// a line longer than the limit is reported as too long (and its tail discarded) instead of
// ending the input, as bufio.Scanner would.
package lines

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// DefaultMaxLen is a generous bound for one ss or nginx line.
const DefaultMaxLen = 1 << 20

// Reader reads lines.
type Reader struct {
	br     *bufio.Reader
	maxLen int
	num    int
	buf    []byte
}

// NewReader returns a Reader over r; lines longer than maxLen bytes are truncated and flagged.
func NewReader(r io.Reader, maxLen int) *Reader {
	if maxLen <= 0 {
		maxLen = DefaultMaxLen
	}
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), maxLen: maxLen}
}

// Line is one line of input, without its "\n" or "\r\n".
type Line struct {
	Num     int // 1-based
	Text    string
	TooLong bool // Text holds only the first maxLen bytes
}

// Next returns the next line, or io.EOF after the last one. Any other error is the
// underlying reader's.
func (r *Reader) Next() (Line, error) {
	l, err := r.NextBytes()
	if err != nil {
		return Line{}, err
	}
	return Line{Num: l.Num, Text: string(l.Text), TooLong: l.TooLong}, nil
}

// BytesLine is a Line whose text is only valid until the next call on the Reader.
type BytesLine struct {
	Num     int
	Text    []byte
	TooLong bool
}

// NextBytes is Next without copying the line: Text points into the Reader's buffers and
// is overwritten by the next call.
func (r *Reader) NextBytes() (BytesLine, error) {
	r.buf = r.buf[:0]
	tooLong := false
	direct := true // the line is one chunk of the bufio buffer: no copy
	var text []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		switch {
		case direct && err == nil && len(chunk) <= r.maxLen:
			text = chunk
		case len(r.buf)+len(chunk) > r.maxLen:
			if room := r.maxLen - len(r.buf); room > 0 {
				r.buf = append(r.buf, chunk[:room]...)
			}
			tooLong = true
		default:
			r.buf = append(r.buf, chunk...)
		}
		direct = false
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(r.buf) == 0 && !tooLong {
				return BytesLine{}, io.EOF
			}
		default:
			return BytesLine{}, err
		}
		if text == nil {
			text = r.buf
		}
		r.num++
		text = bytes.TrimSuffix(text, []byte("\n"))
		text = bytes.TrimSuffix(text, []byte("\r"))
		return BytesLine{Num: r.num, Text: text, TooLong: tooLong}, nil
	}
}
