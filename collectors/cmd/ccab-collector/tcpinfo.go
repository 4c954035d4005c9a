package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/ccab-dev/ccab/collectors/ccmodel"
	"github.com/ccab-dev/ccab/collectors/closecap"
	"github.com/ccab-dev/ccab/collectors/config"
	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
	"github.com/ccab-dev/ccab/collectors/sink"
	"github.com/ccab-dev/ccab/rollout/bpfcc"
)

// tcpInfo is the netlink sampler as a source of the sink (tcp_info.enabled).
type tcpInfo struct {
	s      *sampler.Sampler
	ports  []uint16
	book   *closecap.Book // what the close-time capture learns from the poller (cc, first seen)
	enrich *ccmodel.Enricher
	topic  string
	stream string // one per process: positions count this process's records
	pos    int64
	m      *metrics.Metrics
	log    *slog.Logger
}

func newTCPInfo(cfg config.Config, m *metrics.Metrics, log *slog.Logger) (*tcpInfo, error) {
	if !cfg.TCPInfo.Enabled {
		return nil, nil
	}
	var ports []uint16
	for _, p := range cfg.TCPInfo.LocalPorts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("tcp_info.local_ports: %q is not a port", p)
		}
		ports = append(ports, uint16(n))
	}
	book := closecap.NewBook(0)
	// cc_impl, ccab's BPF bbr2/bbr3 model in the bbr_* fields, and policy_generation (the
	// socket policy's records: close_capture.sockpolicy_pin_dir, shared with tcp_conn/1)
	enrich := &ccmodel.Enricher{Impl: closecap.NewImplCache(bpfcc.DefaultDir),
		Policy: policyLookup(cfg.CloseCapture.SockPolicyPinDir, log)}
	sc := sampler.Config{
		Interval: cfg.TCPInfo.Interval.Std(), SampleRate: cfg.TCPInfo.SampleRate, Salt: cfg.TCPInfo.Salt,
		LocalPorts: ports, MinBytesAcked: uint64(max(cfg.TCPInfo.MinBytesAcked, 0)),
		MaxPerTick: cfg.TCPInfo.MaxPerTick, Namespaces: cfg.TCPInfo.Namespaces,
		Observe: func(netns, cookie uint64, r *record.TCPSample) {
			enrich.Sample(cookie, r, time.Now())
			book.Observe(netns, cookie, r)
		},
		OnTick: func(st sampler.TickStats, err error) {
			m.SocketsSeen.Add(float64(st.Sockets))
			m.SocketsSampled.Add(float64(st.Sampled))
			m.DumpDuration.Observe(st.DumpDuration.Seconds())
			if err != nil {
				log.Warn("sampling tick failed", "err", err)
			}
		},
	}
	s, err := sampler.New(sc)
	if err != nil {
		return nil, fmt.Errorf("tcp_info sampler: %w", err)
	}
	return &tcpInfo{s: s, ports: ports, book: book, enrich: enrich, topic: cfg.Kafka.TopicTCP, m: m, log: log,
		stream: fmt.Sprintf("t:%d:%d", os.Getpid(), time.Now().UnixNano())}, nil
}

// run samples until ctx is done (or reps ticks) and offers each tick to the sink: the
// sampler never waits for the sink (a full queue drops the tick, counted), unless the
// spool is configured to block.
func (t *tcpInfo) run(ctx context.Context, reps int, host *config.Host, sk *sink.Sink) error {
	meta := func() record.Meta {
		m := host.Meta()
		m.TsMs = time.Now().UnixMilli()
		return m
	}
	err := t.s.Run(ctx, reps, meta, func(recs []record.TCPSample) {
		b := sink.Batch{Msgs: make([]sink.Message, 0, len(recs))}
		for i := range recs {
			v, err := encodeTCP(&recs[i])
			if err != nil {
				t.m.RecordsDropped.WithLabelValues(metrics.DropEncode).Inc()
				continue
			}
			t.pos++
			b.Msgs = append(b.Msgs, sink.Message{Topic: t.topic, Value: v, Stream: t.stream, Pos: t.pos})
		}
		if sk.BlockWhenFull() {
			_ = sk.Submit(ctx, b)
		} else {
			_ = sk.Offer(b) // a refused batch is counted by the sink
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (t *tcpInfo) close() {
	_ = t.s.Close()
	t.enrich.Close()
}
