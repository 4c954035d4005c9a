// Package ssreplay replays a directory of recorded `ss -tinHOe state established`
// snapshots as tcp_sample/1 records: one file per sampling tick, named by the tick's time
// in unix milliseconds (`<ts_ms>.txt`), as `ccab sim --raw` writes them per host
// (`DIR/ss/<host>/<ts_ms>.txt`).
//
// Each file is read with the ss parser (package ss) in timestamp order; every record gets
// ts_ms from the file name and the host fields of the caller's record.Meta. Sockets can be
// sampled again (SampleRate, the netlink sampler's salted 4-tuple hash), but by default all
// are kept: the files usually hold only sockets that were already sampled upstream (the
// simulator writes only the sockets it sampled). The files do not say at which rate that
// was, so the caller passes it (SourceSampleRate, default 1): records carry sample_rate =
// SourceSampleRate × SampleRate.
//
// Reading a directory is I/O; Snapshots (names → ticks) and ReadSnapshot (text → records)
// are pure and tested directly.
package ssreplay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
	"github.com/ccab-dev/ccab/collectors/ss"
)

// Config configures a Replayer.
type Config struct {
	Dir              string  // directory of <ts_ms>.txt snapshots
	SampleRate       float64 // fraction of each snapshot's connections kept, in (0, 1]; default 1
	SourceSampleRate float64 // probability with which the files' sockets were selected upstream, in (0, 1]; default 1
	Salt, BootID     string  // key sock_id (and the sampling hash), as for the netlink sampler
	DefaultState     string  // state of sockets printed without a State column; default ESTAB
}

// Validate reports the first problem of c.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("ss replay: no directory")
	case !(c.SampleRate > 0 && c.SampleRate <= 1):
		return fmt.Errorf("ss replay: sample rate %v is not in (0, 1]", c.SampleRate)
	case !(c.SourceSampleRate > 0 && c.SourceSampleRate <= 1):
		return fmt.Errorf("ss replay: source sample rate %v is not in (0, 1]", c.SourceSampleRate)
	}
	return nil
}

// Snapshot is one file of the directory: the tick it holds.
type Snapshot struct {
	Name string
	TsMs int64
}

// Snapshots picks the snapshot files among names (a directory listing) and orders them by
// time, then name. Other names are returned in bad (a file that is not <digits>.txt or
// <digits>: its tick is unknown).
func Snapshots(names []string) (snaps []Snapshot, bad []string) {
	for _, n := range names {
		stem := strings.TrimSuffix(n, ".txt")
		ts, err := strconv.ParseInt(stem, 10, 64)
		if err != nil || stem == "" || stem[0] < '0' || stem[0] > '9' || ts < 0 {
			bad = append(bad, n)
			continue
		}
		snaps = append(snaps, Snapshot{Name: n, TsMs: ts})
	}
	sort.Slice(snaps, func(i, j int) bool {
		if snaps[i].TsMs != snaps[j].TsMs {
			return snaps[i].TsMs < snaps[j].TsMs
		}
		return snaps[i].Name < snaps[j].Name
	})
	return snaps, bad
}

// FileStats counts what one snapshot gave.
type FileStats struct {
	Records       int
	SkippedRate   int               // sockets not in the replay's own sample
	SkippedParse  map[ss.Reason]int // entries the ss parser refused, by reason (lines of them)
	FirstParseErr error             // the first of those, for the log
}

// Reader turns snapshots into records. Not safe for concurrent use (the sock_id hasher is
// reused).
type Reader struct {
	cfg  Config
	key  *anon.SockHasher
	keep sampler.Selection
}

// NewReader returns a Reader for cfg (defaults filled in).
func NewReader(cfg Config) (*Reader, error) {
	if cfg.SampleRate == 0 {
		cfg.SampleRate = 1
	}
	if cfg.SourceSampleRate == 0 {
		cfg.SourceSampleRate = 1
	}
	if cfg.DefaultState == "" {
		cfg.DefaultState = "ESTAB"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Reader{cfg: cfg, key: anon.SockKey{Salt: cfg.Salt, BootID: cfg.BootID}.Hasher(),
		keep: sampler.NewSelection(cfg.Salt, cfg.SampleRate)}, nil
}

// RecordSampleRate is the sample_rate the records carry.
func (r *Reader) RecordSampleRate() float64 { return r.cfg.SourceSampleRate * r.cfg.SampleRate }

// ReadSnapshot parses one snapshot's text into records at tick tsMs, stamped with meta
// (its TsMs and SampleRate are replaced). A read error ends the snapshot; the records
// before it are returned with the error.
func (r *Reader) ReadSnapshot(text io.Reader, tsMs int64, meta record.Meta) ([]record.TCPSample, FileStats, error) {
	meta.TsMs = tsMs
	meta.SampleRate = r.RecordSampleRate()
	st := FileStats{SkippedParse: map[ss.Reason]int{}}
	var recs []record.TCPSample
	sc := ss.NewScanner(text)
	for sc.Scan() {
		e := sc.Entry()
		sock, err := ss.ParseEntry(e, ss.Options{DefaultState: r.cfg.DefaultState})
		if err != nil {
			reason := ss.Reason("error")
			var pe *ss.ParseError
			if errors.As(err, &pe) {
				reason = pe.Reason
			}
			st.SkippedParse[reason] += e.LastLine - e.FirstLine + 1
			if st.FirstParseErr == nil {
				st.FirstParseErr = fmt.Errorf("%s: %w", e.Lines(), err)
			}
			continue
		}
		if !r.keep.Keep(sock.Local, sock.Peer) {
			st.SkippedRate++
			continue
		}
		recs = append(recs, sock.Record(r.key, meta))
	}
	st.Records = len(recs)
	if err := sc.Err(); err != nil {
		return recs, st, fmt.Errorf("read snapshot: %w", err)
	}
	return recs, st, nil
}

// Replayer follows a snapshot directory: each Poll reads the snapshots newer than the last
// one it read.
type Replayer struct {
	*Reader
	last int64           // TsMs of the last snapshot read; -1 before the first
	done map[string]bool // files read, or counted as stale
}

// New returns a Replayer for cfg.
func New(cfg Config) (*Replayer, error) {
	r, err := NewReader(cfg)
	if err != nil {
		return nil, err
	}
	return &Replayer{Reader: r, last: -1, done: map[string]bool{}}, nil
}

// PollStats counts what one Poll did.
type PollStats struct {
	Files    int      // snapshots read
	BadNames []string // files whose name is not a tick (each reported once)
	Stale    int      // snapshots that appeared after a newer one was read: not read
	Failed   int      // snapshots that could not be opened or read
}

// Poll reads the directory's snapshots newer than the last one read, oldest first, and
// hands each one's records to emit (also when there are none). It stops at the first error
// of emit (the records of that snapshot count as read) or when ctx is done.
func (p *Replayer) Poll(ctx context.Context, meta func() record.Meta,
	emit func(Snapshot, []record.TCPSample, FileStats) error) (PollStats, error) {
	var ps PollStats
	ents, err := os.ReadDir(p.cfg.Dir)
	if err != nil {
		return ps, fmt.Errorf("ss replay: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	snaps, bad := Snapshots(names)
	for _, n := range bad {
		if !p.done[n] {
			p.done[n] = true
			ps.BadNames = append(ps.BadNames, n)
		}
	}
	for _, s := range snaps {
		if ctx.Err() != nil {
			return ps, ctx.Err()
		}
		if p.done[s.Name] {
			continue
		}
		p.done[s.Name] = true
		if s.TsMs <= p.last {
			ps.Stale++
			continue
		}
		recs, st, err := p.readFile(s, meta())
		if err != nil {
			ps.Failed++
			st.FirstParseErr = errors.Join(st.FirstParseErr, err)
		}
		ps.Files++
		p.last = s.TsMs
		if err := emit(s, recs, st); err != nil {
			return ps, err
		}
	}
	return ps, nil
}

func (p *Replayer) readFile(s Snapshot, meta record.Meta) ([]record.TCPSample, FileStats, error) {
	f, err := os.Open(filepath.Join(p.cfg.Dir, s.Name))
	if err != nil {
		return nil, FileStats{SkippedParse: map[ss.Reason]int{}}, fmt.Errorf("ss replay: %w", err)
	}
	defer f.Close()
	recs, st, err := p.ReadSnapshot(f, s.TsMs, meta)
	if err != nil {
		err = fmt.Errorf("ss replay: %s: %w", s.Name, err)
	}
	return recs, st, err
}
