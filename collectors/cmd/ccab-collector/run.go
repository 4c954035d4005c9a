package main

// `ccab-collector run`: the long-running collector. It only wires the components:
//
//	nginx tailer ─┐
//	tcp_info ─────┤
//	close capture ┼─► sink (bounded queue → Kafka | disk spool) ─► Kafka
//	ss replay ────┘
//
// plus /metrics and the host stamp (config.Host). Shutdown on SIGTERM/SIGINT (or after
// --reps polls): stop the sources, let the sink deliver or spool everything, then write
// the tailer's final checkpoint.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/ccab-dev/ccab/collectors/config"
	"github.com/ccab-dev/ccab/collectors/internal/cli"
	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/nginxlog"
	"github.com/ccab-dev/ccab/collectors/sink"
	"github.com/ccab-dev/ccab/collectors/tailer"
)

func runCommand() cli.Command {
	return cli.Command{Name: "run", Summary: "tail nginx logs, sample tcp_info and replay ss snapshots into Kafka, spooling to disk when it is away", Run: runMain}
}

func runMain(ctx context.Context, env cli.Env, args []string) int {
	cfg, err := config.Load(args, env.Getenv, env.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return cli.ExitOK
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "run: %v\n", err)
		return cli.ExitUsage
	}
	log, err := newLogger(cfg, env.Stderr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "run: %v\n", err)
		return cli.ExitUsage
	}
	tuneGC(env.Getenv, log)
	if err := collect(ctx, cfg, env.Stdout, log); err != nil {
		log.Error("collector stopped", "err", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

func newLogger(cfg config.Config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", cfg.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch cfg.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q is neither text nor json", cfg.LogFormat)
}

// GC defaults of `run`. Most of what the collector allocates is records on their way to
// Kafka: short-lived, with a small live heap. Collecting at 400% growth instead of Go's
// 100% takes about a third off the CPU time of a busy tailer; the soft memory limit makes
// the collector collect harder before it nears systemd's MemoryMax (512M in the unit).
// GOGC and GOMEMLIMIT in the environment override both.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 384 << 20
)

func tuneGC(getenv func(string) string, log *slog.Logger) {
	gogc, limit := getenv("GOGC"), getenv("GOMEMLIMIT")
	if gogc == "" {
		debug.SetGCPercent(defaultGCPercent)
		gogc = strconv.Itoa(defaultGCPercent)
	}
	if limit == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
		limit = strconv.Itoa(defaultMemoryLimit)
	}
	log.Debug("garbage collector", "gogc", gogc, "gomemlimit", limit)
}

// lateOutput lets the tailer be made (it loads its checkpoint, which the sink needs) before
// the sink it writes to.
type lateOutput struct{ s *sink.Sink }

func (o *lateOutput) Submit(ctx context.Context, b sink.Batch) error { return o.s.Submit(ctx, b) }
func (o *lateOutput) SafeMs() int64                                  { return o.s.SafeMs() }

// collect runs the collector until ctx is done or the sources finished their reps.
func collect(ctx context.Context, cfg config.Config, stdout io.Writer, log *slog.Logger) error {
	m := metrics.New()
	host, err := config.NewHost(&cfg, m, log)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	log.Info("starting", "pop", cfg.Pop, "host", cfg.Host, "kernel", cfg.Kernel, "output", cfg.Output,
		"brokers", strings.Join(cfg.Kafka.Brokers, ","), "state_dir", cfg.StateDir)

	// Sources that must exist before the sink: the tailer's checkpoint says whether the
	// last run stopped cleanly.
	out := &lateOutput{}
	var tl *tailer.Tailer
	var p *nginxlog.Parser
	if cfg.Nginx.Enabled {
		p, err = nginxlog.NewParserOptions(cfg.Nginx.Format, cfg.Nginx.FormatName,
			nginxlog.Options{FieldMap: cfg.Nginx.FieldMap, Syslog: cfg.Nginx.Syslog})
		switch {
		case err != nil && !cfg.TCPInfo.Enabled && cfg.SSReplay.Dir == "":
			return fmt.Errorf("nginx format: %w", err)
		case err != nil:
			// The TCP side does not depend on the access log: keep it running.
			m.NginxFormatOK.Set(0)
			log.Error("nginx log format refused: not tailing access logs; the other sources keep running", "err", err)
			p = nil
		default:
			m.NginxFormatOK.Set(1)
		}
	}
	if p != nil {
		if miss := p.Missing(); len(miss) > 0 {
			log.Warn("the log format does not log some fields; they will be null", "fields", strings.Join(miss, ","))
		}
		if p.ReadTime() {
			log.Warn("the log format logs no time ($msec, $time_iso8601, $time_local): ts_ms is the time each line is read (ts_source \"read\")")
		}
		m.CounterFunc("http_read_time_records_total", "http_request/1 records whose ts_ms is the time the line was read "+
			"(ts_source \"read\"): the log_format logs no time.", func() float64 { return float64(p.ReadTimeRecords()) })
		tl, err = tailer.New(tailer.Config{
			Paths: cfg.Nginx.Paths, Topic: cfg.Kafka.TopicHTTP,
			PollInterval: cfg.Nginx.PollInterval.Std(), GlobInterval: cfg.Nginx.GlobInterval.Std(),
			RotateGrace: cfg.Nginx.RotateGrace.Std(), CheckpointInterval: cfg.Nginx.CheckpointInterval.Std(),
			CheckpointPath: filepath.Join(cfg.StateDir, "tailer.checkpoint.json"), StartAt: cfg.Nginx.StartAt,
			MaxLineBytes: int(cfg.Nginx.MaxLineBytes), BatchLines: cfg.Nginx.BatchLines, ReadBytes: 256 << 10,
		}, p, host.Meta, out, m, log.With("component", "tailer"))
		if err != nil {
			return err
		}
	}
	tcp, err := newTCPInfo(cfg, m, log.With("component", "sampler"))
	if err != nil {
		return err
	}
	var ccap *closeCap
	if tcp != nil {
		if ccap, err = newCloseCap(cfg, tcp.ports, tcp.book, m, log.With("component", "closecap")); err != nil {
			tcp.close()
			return err
		}
	}
	replay, err := newSSReplay(cfg, m, log.With("component", "ss_replay"))
	if err != nil {
		if tcp != nil {
			tcp.close()
		}
		if ccap != nil {
			ccap.c.Close()
		}
		return err
	}

	kcfg := sink.KafkaConfig{Brokers: cfg.Kafka.Brokers, ClientID: cfg.Kafka.ClientID, Linger: cfg.Kafka.Linger.Std(),
		MaxBufferedRecords: cfg.Kafka.MaxInflight + cfg.Spool.ReplayChunk + 1000, DialTimeout: cfg.Kafka.DialTimeout.Std(),
		Topics: []string{cfg.Kafka.TopicHTTP, cfg.Kafka.TopicTCP, cfg.Kafka.TopicConn}}
	var prod sink.Producer
	var rb sink.Readback
	switch cfg.Output {
	case "kafka":
		cl, err := sink.NewKafkaClient(kcfg, log)
		if err != nil {
			return err
		}
		prod, rb = cl, sink.KafkaReadback(kcfg, cfg.Host, m)
	case "stdout":
		prod = sink.NewWriterProducer(stdout)
	case "discard":
		prod = sink.NewWriterProducer(io.Discard)
	}
	scfg := sink.Config{
		Key: cfg.Host, QueueMaxRecords: cfg.Queue.MaxRecords, MaxInflight: cfg.Kafka.MaxInflight,
		StallTimeout: cfg.Kafka.StallTimeout.Std(), RetryBackoff: cfg.Kafka.RetryBackoff.Std(),
		ShutdownTimeout: cfg.Kafka.ShutdownTimeout.Std(), FsyncInterval: cfg.Spool.FsyncInterval.Std(),
		StateInterval: cfg.Spool.FsyncInterval.Std(), ReplayChunk: cfg.Spool.ReplayChunk,
		Spool: sink.SpoolConfig{Dir: cfg.SpoolDir(), SegmentBytes: int64(cfg.Spool.SegmentBytes),
			MaxBytes: int64(cfg.Spool.MaxBytes), Full: sink.FullPolicy(cfg.Spool.Full)},
		RecoveryLookback: cfg.Recovery.Lookback.Std(), RecoveryTimeout: cfg.Recovery.Timeout.Std(),
	}
	if tl != nil {
		scfg.SourceUnclean, scfg.SourceSafeMs = tl.Unclean()
	}
	sk, err := sink.New(scfg, prod, rb, m, log.With("component", "sink"))
	if err != nil {
		prod.Close()
		return err
	}
	out.s = sk
	sk.Start()

	srvCtx, stopSrv := context.WithCancel(context.Background())
	waitSrv := func() {}
	if cfg.MetricsAddr != "" {
		addr, wait, err := m.Serve(srvCtx, cfg.MetricsAddr, log)
		if err != nil {
			stopSrv()
			sk.Close()
			return err
		}
		waitSrv = wait
		log.Info("metrics", "addr", addr, "path", "/metrics")
	}

	// Sources run until ctx is done or their reps are over.
	srcCtx, stopSrc := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	running := 0
	if tl != nil {
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tl.Run(srcCtx, cfg.Reps)
		}()
	}
	if tcp != nil {
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tcp.run(srcCtx, cfg.Reps, host, sk)
		}()
	}
	if replay != nil {
		running++
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- replay.run(srcCtx, cfg.Reps, host, sk)
		}()
	}
	// The close-time capture runs as long as the other sources do.
	capCtx, stopCap := context.WithCancel(srcCtx)
	capErr := make(chan error, 1)
	if ccap != nil {
		go func() { capErr <- ccap.run(capCtx, host, sk) }()
	} else {
		capErr <- nil
	}
	var firstErr error
	for i := 0; i < running; i++ {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) && firstErr == nil {
			firstErr = err
			log.Error("source failed; stopping", "err", err)
			stopSrc()
		}
	}
	stopCap()
	if err := <-capErr; err != nil && firstErr == nil {
		firstErr = err
		log.Error("close-time capture failed", "err", err)
	}
	stopSrc()
	wg.Wait()
	log.Info("sources stopped; flushing the sink")
	sk.Close()
	if tcp != nil {
		tcp.close()
	}
	if tl != nil {
		if err := tl.Close(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	stopSrv()
	waitSrv()
	log.Info("stopped")
	return firstErr
}
