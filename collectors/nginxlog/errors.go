package nginxlog

import (
	"errors"
	"fmt"
)

// Reason is the category of a line that could not be parsed; the CLI counts skipped lines
// by Reason.
type Reason string

// Reasons a line is skipped.
const (
	ReasonNoMatch  Reason = "no_match"  // the line does not have the log_format's shape
	ReasonBadJSON  Reason = "bad_json"  // not one JSON object
	ReasonBadValue Reason = "bad_value" // a variable holds something its field cannot take
)

// ParseError is returned by Parser.Parse.
type ParseError struct {
	Reason Reason
	Err    error
}

func (e *ParseError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }

func (e *ParseError) Unwrap() error { return e.Err }

// ErrAmbiguous is returned by NewParser for a log_format in which a client-controlled
// value (a header, the request line) can hold the text around it so that the line splits
// in more than one way, and a field the record reads would depend on the split.
var ErrAmbiguous = errors.New("log_format is ambiguous")
