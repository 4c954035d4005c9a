package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prefix is the common prefix of every metric of ccab-agent.
const Prefix = "ccab_agent_"

// Metrics is every metric of one agent process, in one registry. An error inside the loop
// increments a counter here and is never only logged.
type Metrics struct {
	Registry *prometheus.Registry

	Assignments   *prometheus.CounterVec // result: applied, refused, error, stale, reconfirmed, other_host
	Refusals      *prometheus.CounterVec // reason: too_large, malformed, signature, wrong_host, generation_jump, unknown_cc, not_available, bbr_version, no_policy_enforcer, prefix_set_unavailable, prefix_set_stale, prefix_set_incomplete, prefix_set_invalid
	Errors        *prometheus.CounterVec // op: sysctl, qdisc, state_file, netns, kafka_consume, kafka_produce, read
	StatusSent    *prometheus.CounterVec // state: acknowledged by Kafka
	StatusDropped *prometheus.CounterVec // reason: buffer_full, produce_failed
	Heartbeats    prometheus.Counter
	Reasserts     prometheus.Counter // state-file cc re-applied at start (kernel had reset it)
	KafkaUp       prometheus.Gauge
	Generation    prometheus.Gauge
	BBRVersion    prometheus.Gauge
	// PrefixSetPrefixes is the size of the last prefix set verified for an assignment/3.
	PrefixSetPrefixes prometheus.Gauge
}

// NewMetrics registers every metric in a fresh registry (plus the Go and process collectors).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: Prefix + name, Help: help}, labels)
		r.MustRegister(c)
		return c
	}
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Name: Prefix + name, Help: help})
		r.MustRegister(x)
		return x
	}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Name: Prefix + name, Help: help})
		r.MustRegister(x)
		return x
	}
	return &Metrics{
		Registry: r,
		Assignments: cv("assignments_total", "Assignments for this host, by result: applied, refused, error, "+
			"stale (generation not newer than the applied one: ignored), reconfirmed (same generation "+
			"re-reported after a restart), other_host (keyed to this host but for another: refused).", "result"),
		Refusals: cv("refusals_total", "Refused assignments, by reason: too_large, malformed, signature (forged, "+
			"tampered or unsigned), wrong_host, generation_jump, unknown_cc, not_available, bbr_version, "+
			"no_policy_enforcer, prefix_set_unavailable (no --prefix-sets-topic), prefix_set_stale (an older "+
			"version than applied), prefix_set_incomplete (chunks missing), prefix_set_invalid (a chunk forged "+
			"or tampered, a sha256 or count mismatch, bad prefixes, over the bounds).", "reason"),
		Errors: cv("errors_total", "Failures, by operation: sysctl, qdisc, state_file, netns, kafka_consume, "+
			"kafka_produce, read, sockpolicy, prefix_set_fetch.", "op"),
		StatusSent:        cv("status_sent_total", "agent_status/1 records acknowledged by Kafka, by state.", "state"),
		StatusDropped:     cv("status_dropped_total", "agent_status/1 records lost, by reason: buffer_full, produce_failed.", "reason"),
		Heartbeats:        c("heartbeats_total", "Heartbeats built (sent or not)."),
		Reasserts:         c("reasserts_total", "Times the state file's algorithm was re-applied at start because the kernel had another."),
		KafkaUp:           g("kafka_up", "1 while the assignments topic answers, 0 while the agent retries."),
		Generation:        g("generation", "Generation of the last applied assignment."),
		BBRVersion:        g("bbr_version", "BBR version of the effective algorithm when it is bbr/bbr2 (1, 2, 3), else 0."),
		PrefixSetPrefixes: g("prefix_set_prefixes", "Prefixes of the last prefix set (assignment/3) fetched and verified."),
	}
}

// Serve serves /metrics on addr until ctx is done; it returns the bound address.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics: listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return ln.Addr().String(), nil
}
