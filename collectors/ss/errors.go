package ss

import "fmt"

// Reason is the category of an entry that could not be parsed; the CLI counts skipped lines
// by Reason.
type Reason string

// Reasons an entry is skipped.
const (
	ReasonTooLong    Reason = "line_too_long"
	ReasonSocketLine Reason = "bad_socket_line"
	ReasonAddress    Reason = "bad_address"
	ReasonValue      Reason = "bad_value"
	ReasonNotTCP     Reason = "not_tcp"
	ReasonListening  Reason = "listening_socket"
	ReasonNoInfo     Reason = "no_tcp_info"
	ReasonOrphanInfo Reason = "info_without_socket"
)

// ParseError is returned for an entry that cannot be turned into a sample.
type ParseError struct {
	Reason Reason
	Err    error
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }

func (e *ParseError) Unwrap() error { return e.Err }

func errorf(r Reason, format string, args ...any) error {
	return &ParseError{Reason: r, Err: fmt.Errorf(format, args...)}
}
