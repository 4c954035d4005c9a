// Package strictjson reads the members of a JSON object with their types enforced: a
// missing member, null where a value is required, another type, a number that is not an
// integer literal or out of range, a string out of its length bounds — each is a problem
// naming the member. It serves the rollout agent's inputs (assignment/1, the state file).
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

var intLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// MaxDepth bounds how deep the objects and arrays of an input may nest (CONTRACTS.md).
const MaxDepth = 64

// NoDuplicates returns an error naming the first member name that appears twice in one object
// of the JSON text b, at any depth (readers disagree on which one wins: Go's keeps the last,
// ClickHouse the first), or an object/array nested deeper than MaxDepth. Syntax errors are left
// to the decoder that reads b (nil here).
func NoDuplicates(b []byte) error {
	type frame struct {
		keys      map[string]struct{} // nil for an array
		expectKey bool
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			return nil
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= MaxDepth {
					return fmt.Errorf("nested deeper than %d levels", MaxDepth)
				}
				f := &frame{}
				if t == '{' {
					f.keys, f.expectKey = map[string]struct{}{}, true
				}
				stack = append(stack, f)
				continue
			default: // a closing delimiter completes a value of the enclosing container
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].keys != nil {
					stack[len(stack)-1].expectKey = true
				}
				continue
			}
		case string:
			if top != nil && top.keys != nil && top.expectKey {
				if _, seen := top.keys[t]; seen {
					return fmt.Errorf("duplicate member %.64q", t)
				}
				top.keys[t] = struct{}{}
				top.expectKey = false
				continue
			}
		}
		if top != nil && top.keys != nil { // a scalar value completed a member
			top.expectKey = true
		}
	}
}

// Object decodes b (at most max bytes) as one JSON object and nothing after it, with no
// duplicate member names (NoDuplicates).
func Object(b []byte, max int) (map[string]json.RawMessage, error) {
	if len(b) > max {
		return nil, fmt.Errorf("%d bytes, the limit is %d", len(b), max)
	}
	if err := NoDuplicates(b); err != nil {
		return nil, err
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if raw == nil {
		return nil, errors.New("not a JSON object: null")
	}
	if dec.More() {
		return nil, errors.New("trailing data after the object")
	}
	return raw, nil
}

// Fields reads typed members of a decoded JSON object, collecting one problem per bad member
// (named). Raw is the object's members.
type Fields struct {
	Raw      map[string]json.RawMessage
	problems []string
}

// Err returns the problems found so far, joined, or nil.
func (f *Fields) Err() error {
	if len(f.problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(f.problems, "; "))
}

// Bad records a problem with member name.
func (f *Fields) Bad(name, why string) {
	if len(f.problems) < 12 {
		f.problems = append(f.problems, name+": "+why)
	}
}

// Kind names the JSON type of v for a message.
func Kind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '{':
		return "an object"
	case '[':
		return "an array"
	}
	return "a number"
}

// Str is a required string of minLen..maxLen bytes.
func (f *Fields) Str(name string, minLen, maxLen int) string {
	v, ok := f.Raw[name]
	if !ok {
		f.Bad(name, "missing")
		return ""
	}
	var s string
	if k := Kind(v); k != "a string" {
		f.Bad(name, "want a string, got "+k)
		return ""
	}
	if err := json.Unmarshal(v, &s); err != nil {
		f.Bad(name, "bad string")
		return ""
	}
	switch {
	case len(s) < minLen:
		f.Bad(name, "empty")
	case len(s) > maxLen:
		f.Bad(name, fmt.Sprintf("%d bytes, the limit is %d", len(s), maxLen))
	}
	return s
}

// OptStr is a string or null (nil); present reports whether the member exists. required
// makes a missing member a problem.
func (f *Fields) OptStr(name string, required bool) (s *string, present bool) {
	v, ok := f.Raw[name]
	if !ok {
		if required {
			f.Bad(name, "missing (null to leave it alone)")
		}
		return nil, false
	}
	switch Kind(v) {
	case "null":
		return nil, true
	case "a string":
		var x string
		if err := json.Unmarshal(v, &x); err != nil {
			f.Bad(name, "bad string")
			return nil, true
		}
		return &x, true
	}
	f.Bad(name, "want a string or null, got "+Kind(v))
	return nil, true
}

// Int is a required integer written as one (no fraction, no exponent) in [lo, hi].
func (f *Fields) Int(name string, lo, hi int64) int64 {
	v, ok := f.Raw[name]
	if !ok {
		f.Bad(name, "missing")
		return 0
	}
	lit := string(bytes.TrimSpace(v))
	if !intLiteral.MatchString(lit) {
		if k := Kind(v); k != "a number" {
			f.Bad(name, "want an integer, got "+k)
		} else {
			f.Bad(name, fmt.Sprintf("want an integer, got %.40s", lit))
		}
		return 0
	}
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil || n < lo || n > hi {
		f.Bad(name, fmt.Sprintf("%.40s is outside [%d, %d]", lit, lo, hi))
		return 0
	}
	return n
}
