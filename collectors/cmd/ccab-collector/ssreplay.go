package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ccab-dev/ccab/collectors/config"
	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sink"
	"github.com/ccab-dev/ccab/collectors/ssreplay"
)

// ssReplay is the replay of recorded ss snapshots (ss_replay.dir) as a source of the sink.
// It can wait for the sink (like the tailer, it reads files), so it submits rather than
// offers.
type ssReplay struct {
	r        *ssreplay.Replayer
	interval time.Duration
	topic    string
	stream   string // one per process: positions count this process's records
	pos      int64
	m        *metrics.Metrics
	log      *slog.Logger
}

func newSSReplay(cfg config.Config, m *metrics.Metrics, log *slog.Logger) (*ssReplay, error) {
	c := cfg.SSReplay
	if c.Dir == "" {
		return nil, nil
	}
	if fi, err := os.Stat(c.Dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = fmt.Errorf("not a directory")
		}
		return nil, fmt.Errorf("ss_replay.dir %q: %w", c.Dir, err)
	}
	var bootID string
	if b, err := os.ReadFile(filepath.Join(cfg.ProcFS, "sys/kernel/random/boot_id")); err == nil {
		bootID = strings.TrimSpace(string(b))
	}
	r, err := ssreplay.New(ssreplay.Config{Dir: c.Dir, SampleRate: c.SampleRate, SourceSampleRate: c.SourceSampleRate,
		Salt: cfg.TCPInfo.Salt, BootID: bootID, DefaultState: c.State})
	if err != nil {
		return nil, err
	}
	log.Info("replaying ss snapshots", "dir", c.Dir, "sample_rate", c.SampleRate,
		"source_sample_rate", c.SourceSampleRate, "record_sample_rate", r.RecordSampleRate())
	return &ssReplay{r: r, interval: c.Interval.Std(), topic: cfg.Kafka.TopicTCP, m: m, log: log,
		stream: fmt.Sprintf("r:%d:%d", os.Getpid(), time.Now().UnixNano())}, nil
}

// run polls the directory until ctx is done (or for reps polls): every snapshot newer than
// the last one read becomes one batch for the sink. With reps, an unreadable directory
// ends the run with an error; without, it is counted and tried again.
func (s *ssReplay) run(ctx context.Context, reps int, host *config.Host, sk *sink.Sink) error {
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for i := 0; reps == 0 || i < reps; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		ps, err := s.r.Poll(ctx, host.Meta, func(snap ssreplay.Snapshot, recs []record.TCPSample, st ssreplay.FileStats) error {
			return s.submit(ctx, sk, snap, recs, st)
		})
		s.m.ReplayFiles.WithLabelValues("read").Add(float64(ps.Files))
		s.m.ReplayFiles.WithLabelValues("stale").Add(float64(ps.Stale))
		s.m.ReplayFiles.WithLabelValues("bad_name").Add(float64(len(ps.BadNames)))
		s.m.ReplayErrors.WithLabelValues("read").Add(float64(ps.Failed))
		if len(ps.BadNames) > 0 {
			s.log.Warn("files without a tick in their name are not replayed", "files", strings.Join(ps.BadNames, ","))
		}
		if ps.Stale > 0 {
			s.log.Warn("snapshots older than one already replayed are not replayed", "files", ps.Stale)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if reps != 0 {
				return err
			}
			s.m.ReplayErrors.WithLabelValues("readdir").Inc()
			s.log.Warn("ss replay poll failed", "err", err)
		}
	}
	return nil
}

func (s *ssReplay) submit(ctx context.Context, sk *sink.Sink, snap ssreplay.Snapshot, recs []record.TCPSample, st ssreplay.FileStats) error {
	skipped := st.SkippedRate
	s.m.ReplaySkipped.WithLabelValues("rate").Add(float64(st.SkippedRate))
	for reason, n := range st.SkippedParse {
		s.m.ReplaySkipped.WithLabelValues(string(reason)).Add(float64(n))
		skipped += n
	}
	if st.FirstParseErr != nil {
		s.log.Warn("snapshot lines skipped", "file", snap.Name, "first", st.FirstParseErr)
	}
	b := sink.Batch{Msgs: make([]sink.Message, 0, len(recs))}
	var arena []byte
	for i := range recs {
		if cap(arena)-len(arena) < 2048 {
			arena = make([]byte, 0, 32<<10)
		}
		start := len(arena)
		out, err := record.AppendTCP(arena, &recs[i])
		if err != nil {
			s.m.RecordsDropped.WithLabelValues(metrics.DropEncode).Inc()
			continue
		}
		arena = out
		s.pos++
		b.Msgs = append(b.Msgs, sink.Message{Topic: s.topic, Value: arena[start:len(arena):len(arena)], Stream: s.stream, Pos: s.pos})
	}
	s.m.ReplayRecords.Add(float64(len(b.Msgs)))
	s.log.Debug("snapshot replayed", "file", snap.Name, "ts_ms", snap.TsMs, "records", len(b.Msgs), "skipped", skipped)
	if len(b.Msgs) == 0 {
		return nil
	}
	return sk.Submit(ctx, b)
}
