package ss

import (
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/ccab-dev/ccab/collectors/internal/lines"
)

// Entry is one socket as ss printed it: the socket line and any info lines that follow it,
// joined with single spaces.
type Entry struct {
	FirstLine, LastLine int // 1-based line numbers in the input
	Text                string
	TooLong             bool // some line of the entry was cut at the length limit
	Orphan              bool // info lines with no socket line before them
	// Incomplete marks a socket followed by a line that is neither a socket line nor an
	// indented info line (e.g. wrapped output whose continuation lost its indent): part of
	// its info may be in that line, so what ss hid cannot be told from what was lost.
	Incomplete bool
}

// Lines describes where the entry is, for error messages: "line 3" or "lines 3-4".
func (e Entry) Lines() string {
	if e.LastLine > e.FirstLine {
		return "lines " + strconv.Itoa(e.FirstLine) + "-" + strconv.Itoa(e.LastLine)
	}
	return "line " + strconv.Itoa(e.FirstLine)
}

// Err reports an entry that cannot be parsed for reasons visible before ParseEntry.
func (e Entry) Err() error {
	switch {
	case e.TooLong:
		return errorf(ReasonTooLong, "line or entry longer than %d bytes", lines.DefaultMaxLen)
	case e.Orphan:
		return errorf(ReasonOrphanInfo, "info line with no socket line before it")
	}
	return nil
}

// Scanner groups the lines of ss output into entries. Header lines and blank lines are
// dropped.
type Scanner struct {
	lr      *lines.Reader
	pending *Entry
	parts   []string // the pending entry's lines, joined on flush
	size    int      // bytes in parts
	ready   []Entry
	cur     Entry
	err     error
	done    bool
}

// NewScanner returns a Scanner reading ss text from r.
func NewScanner(r io.Reader) *Scanner {
	return &Scanner{lr: lines.NewReader(r, lines.DefaultMaxLen)}
}

// Scan advances to the next entry; it returns false at the end of the input or on a read
// error (see Err).
func (s *Scanner) Scan() bool {
	for len(s.ready) == 0 && !s.done {
		s.step()
	}
	if len(s.ready) == 0 {
		return false
	}
	s.cur = s.ready[0]
	s.ready = s.ready[1:]
	return true
}

// Entry returns the entry found by the last Scan.
func (s *Scanner) Entry() Entry { return s.cur }

// Err returns the first read error, not counting io.EOF.
func (s *Scanner) Err() error { return s.err }

func (s *Scanner) step() {
	l, err := s.lr.Next()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.err = err
		}
		s.flush()
		s.done = true
		return
	}
	trimmed := strings.TrimSpace(l.Text)
	switch {
	case trimmed == "":
		return
	case isHeader(trimmed):
		s.flush()
		return
	case isInfoLine(l.Text):
		if s.pending == nil {
			s.ready = append(s.ready, Entry{FirstLine: l.Num, LastLine: l.Num, Text: trimmed,
				TooLong: l.TooLong, Orphan: true})
			return
		}
		s.pending.LastLine = l.Num
		s.pending.TooLong = s.pending.TooLong || l.TooLong
		if s.size += len(trimmed) + 1; s.size > lines.DefaultMaxLen {
			s.pending.TooLong = true // keep counting its lines, drop their text
			return
		}
		s.parts = append(s.parts, trimmed)
		return
	}
	if s.pending != nil && !looksLikeSocketLine(trimmed) {
		// Not a socket: a stray line, likely a continuation of the pending socket's info
		// that lost its indent. The socket keeps what it has, marked incomplete; the line
		// is reported on its own (bad_socket_line).
		s.pending.Incomplete = true
		s.flush()
		s.ready = append(s.ready, Entry{FirstLine: l.Num, LastLine: l.Num, Text: trimmed, TooLong: l.TooLong})
		return
	}
	s.flush()
	s.pending = &Entry{FirstLine: l.Num, LastLine: l.Num, TooLong: l.TooLong}
	s.parts = append(s.parts[:0], trimmed)
	s.size = len(trimmed)
}

func (s *Scanner) flush() {
	if s.pending != nil {
		s.pending.Text = strings.Join(s.parts, " ")
		s.ready = append(s.ready, *s.pending)
		s.pending = nil
		s.parts = s.parts[:0]
		s.size = 0
	}
}

// isHeader reports the column header line ("State Recv-Q Send-Q Local Address:Port ...",
// with or without Netid/State/Process).
func isHeader(trimmed string) bool {
	first, _, _ := strings.Cut(trimmed, " ")
	switch first {
	case "State", "Netid", "Recv-Q":
		return strings.Contains(trimmed, "Send-Q")
	}
	return false
}

// isInfoLine reports a line that continues the previous socket: ss starts it with a tab.
// A line that starts with white space but reads like a socket line (two queue sizes first,
// optionally after netid and state) is a socket line.
func isInfoLine(line string) bool {
	if line == "" || (line[0] != '\t' && line[0] != ' ') {
		return false
	}
	f := strings.Fields(line)
	i := 0
	if i < len(f) && isNetid(f[i]) {
		i++
	}
	if i < len(f) && isState(f[i]) {
		i++
	}
	return !(i+1 < len(f) && isUint(f[i]) && isUint(f[i+1]))
}

// looksLikeSocketLine reports a line that starts like a socket line: [Netid] [State]
// Recv-Q Send-Q.
func looksLikeSocketLine(trimmed string) bool {
	f := strings.Fields(trimmed)
	i := 0
	if i < len(f) && isNetid(f[i]) {
		i++
	}
	if i < len(f) && isState(f[i]) {
		i++
	}
	return i+1 < len(f) && isUint(f[i]) && isUint(f[i+1])
}

func isUint(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
