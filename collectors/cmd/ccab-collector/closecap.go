package main

import (
	"sync"

	"context"
	"errors"
	"fmt"
	"github.com/ccab-dev/ccab/rollout/sockpolicy"
	"log/slog"
	"os"
	"time"

	"github.com/ccab-dev/ccab/collectors/closecap"
	"github.com/ccab-dev/ccab/collectors/config"
	"github.com/ccab-dev/ccab/collectors/metrics"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sink"
)

// closeCap is the close-time capture as a source of the sink (close_capture.enabled with
// tcp_info.enabled): tcp_conn/1 records from the kernel's TCP destroy events, sampled and
// keyed like the poller's records.
type closeCap struct {
	c      *closecap.Capture
	topic  string
	stream string
	pos    int64
	m      *metrics.Metrics
	log    *slog.Logger
	last   closeCounts

	// rate-limited loss warning: at most one line per lossLogEvery, with what was lost since
	// the previous line
	now         func() time.Time
	lastLossLog time.Time
	unlogged    closeCounts // dropped and decode since the last warning
}

// lossLogEvery is the least time between two "close-time capture lost events" warnings.
const lossLogEvery = time.Minute

type closeCounts struct {
	events, filtered, sampled, emitted, dropped, overruns, decode, ccSocket, ccDefault, ccUnknown uint64
	policySet, policyFailed                                                                       uint64
}

// newCloseCap subscribes to the destroy events. When that is not permitted (a namespace
// that cannot be entered; joining the groups itself needs no privilege on Linux 6.18) it
// logs a warning, sets close_capture_up 0 and returns nil: the poller runs on.
func newCloseCap(cfg config.Config, ports []uint16, book *closecap.Book, m *metrics.Metrics, log *slog.Logger) (*closeCap, error) {
	if !cfg.TCPInfo.Enabled || !cfg.CloseCapture.Enabled {
		return nil, nil
	}
	c, err := closecap.New(closecap.Config{
		SampleRate: cfg.TCPInfo.SampleRate, Salt: cfg.TCPInfo.Salt, LocalPorts: ports,
		Namespaces: cfg.TCPInfo.Namespaces, RcvBuf: int(cfg.CloseCapture.RcvBuf),
		NoFilter: !cfg.CloseCapture.BPFFilter, Book: book,
		BookMaxAge: 6 * cfg.TCPInfo.Interval.Std(), Coalesce: coalesce(cfg.CloseCapture.Coalesce.Std()),
		Policy: policyLookup(cfg.CloseCapture.SockPolicyPinDir, log),
	})
	if errors.Is(err, os.ErrPermission) {
		m.CloseUp.Set(0)
		log.Warn("close-time capture disabled: not permitted", "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("close-time capture: %w", err)
	}
	m.CloseUp.Set(1)
	rb, forced := c.RcvBuf()
	hashed, herr := c.HashInKernel()
	if hashed {
		m.CloseHashInKernel.Set(1)
	}
	log.Info("close-time capture", "namespaces", len(c.NetnsInodes()), "rcvbuf", rb, "rcvbuf_forced", forced,
		"bpf_filter", cfg.CloseCapture.BPFFilter, "hash_in_kernel", hashed, "topic", cfg.Kafka.TopicConn)
	if herr != nil {
		log.Info("close-time capture: the sampling hash runs in user space (the eBPF filter needs CAP_BPF or CAP_SYS_ADMIN)", "err", herr)
	}
	return &closeCap{c: c, topic: cfg.Kafka.TopicConn, m: m, log: log, now: time.Now,
		stream: fmt.Sprintf("c:%d:%d", os.Getpid(), time.Now().UnixNano())}, nil
}

// sync adds what the capture counted since the last call to the Prometheus counters. Lost
// connections (events the kernel dropped for a full receive buffer, events that could not be
// decoded) are also records_dropped_total{reason="close_rcvbuf"|"close_decode"}, and logged:
// one warning per lossLogEvery at most.
func (cc *closeCap) sync() {
	st := &cc.c.Stats
	now := closeCounts{st.Events.Load(), st.Filtered.Load(), st.Sampled.Load(), st.Emitted.Load(), st.Dropped.Load(),
		st.Overruns.Load(), st.DecodeErrors.Load(), st.CCSocket.Load(), st.CCDefault.Load(), st.CCUnknown.Load(),
		st.PolicySet.Load(), st.PolicyFailed.Load()}
	l := cc.last
	m := cc.m
	m.CloseEvents.Add(float64(now.events - l.events))
	m.CloseFiltered.Add(float64(now.filtered - l.filtered))
	m.CloseSampled.Add(float64(now.sampled - l.sampled))
	m.CloseEmitted.Add(float64(now.emitted - l.emitted))
	m.CloseDropped.Add(float64(now.dropped - l.dropped))
	m.CloseOverruns.Add(float64(now.overruns - l.overruns))
	m.CloseDecodeErrors.Add(float64(now.decode - l.decode))
	m.RecordsDropped.WithLabelValues(metrics.DropCloseRcvBuf).Add(float64(now.dropped - l.dropped))
	m.RecordsDropped.WithLabelValues(metrics.DropCloseDecode).Add(float64(now.decode - l.decode))
	m.CloseCC.WithLabelValues(record.CCSourceSocket).Add(float64(now.ccSocket - l.ccSocket))
	m.CloseCC.WithLabelValues(record.CCSourceNetnsDefault).Add(float64(now.ccDefault - l.ccDefault))
	m.CloseCC.WithLabelValues(record.CCSourceUnknown).Add(float64(now.ccUnknown - l.ccUnknown))
	cc.unlogged.dropped += now.dropped - l.dropped
	cc.unlogged.decode += now.decode - l.decode
	m.ClosePolicy.WithLabelValues("set").Add(float64(now.policySet - l.policySet))
	m.ClosePolicy.WithLabelValues("failed").Add(float64(now.policyFailed - l.policyFailed))
	cc.last = now
	cc.logLosses(now, false)
}

// logLosses warns about the events lost since the last warning, if any, when lossLogEvery has
// passed (or final: the capture stopped).
func (cc *closeCap) logLosses(total closeCounts, final bool) {
	u := cc.unlogged
	if u.dropped == 0 && u.decode == 0 {
		return
	}
	t := cc.now()
	if !final && !cc.lastLossLog.IsZero() && t.Sub(cc.lastLossLog) < lossLogEvery {
		return
	}
	rb, _ := cc.c.RcvBuf()
	cc.log.Warn("close-time capture lost connections",
		"kernel_dropped", u.dropped, "undecodable", u.decode, "since_last_warning", sinceText(cc.lastLossLog, t),
		"kernel_dropped_total", total.dropped, "undecodable_total", total.decode, "rcvbuf", rb,
		"hint", "kernel drops mean the destroy listener's receive buffer filled: raise close_capture.rcvbuf (CAP_NET_ADMIN or net.core.rmem_max) or lower close_capture.coalesce")
	cc.lastLossLog = t
	cc.unlogged = closeCounts{}
}

func sinceText(last, now time.Time) string {
	if last.IsZero() {
		return "start"
	}
	return now.Sub(last).Round(time.Second).String()
}

// run captures until ctx is done. Like the sampler it never waits for the sink (a full
// queue drops the batch, counted by the sink) unless the spool blocks.
func (cc *closeCap) run(ctx context.Context, host *config.Host, sk *sink.Sink) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				cc.sync()
			}
		}
	}()
	err := cc.c.Run(ctx, host.Meta, func(recs []record.TCPConn) {
		b := sink.Batch{Msgs: make([]sink.Message, 0, len(recs))}
		for i := range recs {
			v, err := record.AppendConn(make([]byte, 0, 1024), &recs[i])
			if err != nil {
				cc.m.RecordsDropped.WithLabelValues(metrics.DropEncode).Inc()
				continue
			}
			cc.pos++
			b.Msgs = append(b.Msgs, sink.Message{Topic: cc.topic, Value: v, Stream: cc.stream, Pos: cc.pos})
		}
		if sk.BlockWhenFull() {
			_ = sk.Submit(ctx, b)
		} else {
			_ = sk.Offer(b)
		}
	})
	cc.sync()
	cc.logLosses(cc.last, true)
	cc.m.CloseUp.Set(0)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// coalesce maps the configuration's "0 or negative: no wait" to closecap's.
func coalesce(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// policyLookup reads the socket policy's per-connection records pinned in dir by ccab-agent
// (rollout/sockpolicy), opening them when first there: the agent may start after the
// collector. "" : no lookup.
func policyLookup(dir string, log *slog.Logger) func(cookie uint64) (uint64, bool, bool) {
	if dir == "" {
		return nil
	}
	var (
		mu       sync.Mutex
		conns    *sockpolicy.Conns
		lastTry  time.Time
		reported bool
	)
	return func(cookie uint64) (uint64, bool, bool) {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			if time.Since(lastTry) < 5*time.Second {
				return 0, false, false
			}
			lastTry = time.Now()
			c, err := sockpolicy.OpenConns(dir)
			if err != nil {
				if !reported {
					log.Info("socket policy records not there (yet): policy_generation stays absent", "err", err)
					reported = true
				}
				return 0, false, false
			}
			conns = c
			log.Info("socket policy records opened", "dir", dir)
		}
		p, found, err := conns.Lookup(cookie)
		if err != nil || !found {
			return 0, false, false
		}
		return p.Generation, p.Result == 0, true
	}
}
