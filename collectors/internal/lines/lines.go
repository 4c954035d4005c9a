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
	r.buf = r.buf[:0]
	tooLong := false
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(r.buf)+len(chunk) > r.maxLen {
			if room := r.maxLen - len(r.buf); room > 0 {
				r.buf = append(r.buf, chunk[:room]...)
			}
			tooLong = true
		} else {
			r.buf = append(r.buf, chunk...)
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(r.buf) == 0 && !tooLong {
				return Line{}, io.EOF
			}
		default:
			return Line{}, err
		}
		r.num++
		text := bytes.TrimSuffix(r.buf, []byte("\n"))
		text = bytes.TrimSuffix(text, []byte("\r"))
		return Line{Num: r.num, Text: string(text), TooLong: tooLong}, nil
	}
}
