package main

import (
	"bytes"

	"github.com/ccab-dev/ccab/collectors/record"
)

// encodeTCP returns s as one line of JSON without the newline.
func encodeTCP(s *record.TCPSample) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(1024)
	if err := record.NewEncoder(&buf).Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
