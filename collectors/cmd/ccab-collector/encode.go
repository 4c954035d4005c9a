package main

import (
	"github.com/ccab-dev/ccab/collectors/record"
)

// encodeTCP returns s as one line of JSON without the newline.
func encodeTCP(s *record.TCPSample) ([]byte, error) {
	return record.AppendTCP(make([]byte, 0, 1024), s)
}
