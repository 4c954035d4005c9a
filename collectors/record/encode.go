package record

import (
	"encoding/json"
	"fmt"
	"io"
)

// Encoder writes records as JSON lines (one object per line, fields in contract order).
type Encoder struct {
	enc *json.Encoder
}

// NewEncoder returns an Encoder writing to w. Callers that care about throughput pass a
// buffered writer and flush it themselves.
func NewEncoder(w io.Writer) *Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &Encoder{enc: enc}
}

// Encode writes one record (a *TCPSample or *HTTPRequest) followed by a newline.
func (e *Encoder) Encode(rec any) error {
	switch rec.(type) {
	case *TCPSample, *HTTPRequest, TCPSample, HTTPRequest:
	default:
		return fmt.Errorf("record: cannot encode %T", rec)
	}
	if err := e.enc.Encode(rec); err != nil {
		return fmt.Errorf("record: encode: %w", err)
	}
	return nil
}
