package record

import (
	"fmt"
	"io"
)

// Encoder writes records as JSON lines (one object per line, fields in contract order).
type Encoder struct {
	w   io.Writer
	buf []byte
}

// NewEncoder returns an Encoder writing to w. Callers that care about throughput pass a
// buffered writer and flush it themselves.
func NewEncoder(w io.Writer) *Encoder {
	return &Encoder{w: w}
}

// Encode writes one record (a *TCPSample or *HTTPRequest) followed by a newline. Nothing
// is written when the record cannot be encoded.
func (e *Encoder) Encode(rec any) error {
	var err error
	b := e.buf[:0]
	switch r := rec.(type) {
	case *TCPSample:
		b, err = AppendTCP(b, r)
	case *HTTPRequest:
		b, err = AppendHTTP(b, r)
	case *TCPConn:
		b, err = AppendConn(b, r)
	case TCPSample:
		b, err = AppendTCP(b, &r)
	case TCPConn:
		b, err = AppendConn(b, &r)
	case HTTPRequest:
		b, err = AppendHTTP(b, &r)
	default:
		return fmt.Errorf("record: cannot encode %T", rec)
	}
	if err != nil {
		return err
	}
	b = append(b, '\n')
	e.buf = b
	if _, err := e.w.Write(b); err != nil {
		return fmt.Errorf("record: encode: %w", err)
	}
	return nil
}
