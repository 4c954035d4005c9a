// Package metrics holds every Prometheus metric of ccab-collector in one registry, all named
// ccab_collector_*. Components get a *Metrics and count what they receive, send, drop and
// fail on; an error inside a loop increments a counter here and is never only logged.
package metrics

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

// Prefix is the common prefix of every metric.
const Prefix = "ccab_collector_"

// Drop reasons (label "reason" of RecordsDropped). A dropped record is gone for good.
const (
	DropSpoolFull  = "spool_full"  // shed with the oldest spool segment
	DropQueueFull  = "queue_full"  // a shedding source met a full queue
	DropRejected   = "rejected"    // Kafka refused the record for good (e.g. too large)
	DropEncode     = "encode"      // the record could not be encoded as JSON
	DropSpoolWrite = "spool_write" // the spool could not be written (disk error)
	// close-time capture: connections whose tcp_conn/1 record was never made (counted as
	// destroy events; see close_dropped_total and close_decode_errors_total)
	DropCloseRcvBuf = "close_rcvbuf" // the kernel dropped the event: the listener's receive buffer was full
	DropCloseDecode = "close_decode" // the event could not be decoded
)

// Metrics is every metric of one collector process.
type Metrics struct {
	Registry *prometheus.Registry

	// netlink sampler (fed by collectors/sampler)
	SocketsSeen    prometheus.Counter
	SocketsSampled prometheus.Counter
	DumpDuration   prometheus.Histogram

	// close-time capture (collectors/closecap)
	CloseEvents       prometheus.Counter     // destroy events received (after the in-kernel filter)
	CloseFiltered     prometheus.Counter     // dropped in user space: no peer, local port
	CloseSampled      prometheus.Counter     // in the sample (the salted 4-tuple hash)
	CloseEmitted      prometheus.Counter     // tcp_conn/1 records handed to the sink
	CloseDropped      prometheus.Counter     // events the kernel dropped: receive buffer full (SK_MEMINFO_DROPS)
	CloseOverruns     prometheus.Counter     // ENOBUFS errors on the destroy sockets
	CloseDecodeErrors prometheus.Counter     // events that could not be decoded
	CloseCC           *prometheus.CounterVec // source: socket, netns_default, unknown
	ClosePolicy       *prometheus.CounterVec // outcome: set, failed
	CloseUp           prometheus.Gauge       // 1 while the destroy listeners run
	CloseHashInKernel prometheus.Gauge       // 1 when the eBPF filter applies the sampling hash

	// ss snapshot replay (collectors/ssreplay)
	ReplayFiles   *prometheus.CounterVec // result: read, stale, bad_name
	ReplayRecords prometheus.Counter
	ReplaySkipped *prometheus.CounterVec // reason: the ss parser's, or rate
	ReplayErrors  *prometheus.CounterVec // op: readdir, read

	// nginx tailer
	LogLinesRead       prometheus.Counter
	LogBytesRead       prometheus.Counter
	ParseErrors        *prometheus.CounterVec // reason
	NginxFormatOK      prometheus.Gauge       // 0: the log_format was refused, the tailer is off
	PollDuration       prometheus.Histogram
	TailedFiles        prometheus.Gauge
	Rotations          *prometheus.CounterVec // kind: rename, truncate, rewrite
	PartialLines       *prometheus.CounterVec // what: flushed (rotated away incomplete)
	TailErrors         *prometheus.CounterVec // op: open, stat, read, glob
	CheckpointWrites   prometheus.Counter
	CheckpointErrors   prometheus.Counter
	CheckpointLagBytes prometheus.Gauge // bytes read but not yet durably delivered

	// sink
	RecordsReceived  *prometheus.CounterVec // topic: records the sink accepted from sources
	RecordsProduced  *prometheus.CounterVec // topic: acknowledged by Kafka (live)
	RecordsSpooled   *prometheus.CounterVec // topic: written to the disk spool
	RecordsReplayed  *prometheus.CounterVec // topic: acknowledged by Kafka from the spool
	RecordsDropped   *prometheus.CounterVec // reason
	RecordsDuplicate *prometheus.CounterVec // where: kafka, spool (skipped after an unclean stop)
	ProduceErrors    *prometheus.CounterVec // reason
	SpoolEntries     *prometheus.CounterVec // reason the sink switched to the spool
	QueueRecords     prometheus.Gauge
	InflightRecords  prometheus.Gauge
	KafkaUp          prometheus.Gauge
	SpoolBytes       prometheus.Gauge
	SpoolSegments    prometheus.Gauge
	SpoolCorrupt     *prometheus.CounterVec // reason: torn, bad_json, checksum
	SpoolErrors      *prometheus.CounterVec // op: write, sync, read, state, remove
	SpoolMode        prometheus.Gauge       // 1 while new records go to the spool
	RecoveryScanned  prometheus.Counter
	RecoveryDone     prometheus.Gauge
	RecoveryErrors   prometheus.Counter
	DeliverySafeMs   prometheus.Gauge
	UncleanStops     prometheus.Counter // processes of this spool that died without shutting down (kept in <spool>/run.json)

	// host metadata
	RolloutStateOK     prometheus.Gauge
	RolloutStateErrors *prometheus.CounterVec // reason: missing, unreadable, bad_json
	RolloutGeneration  prometheus.Gauge
}

// New registers every metric in a fresh registry (plus the Go and process collectors).
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{r}
	durBuckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	return &Metrics{
		Registry: r,

		SocketsSeen:    f.counter("sockets_seen_total", "Sockets seen in netlink dumps."),
		SocketsSampled: f.counter("sockets_sampled_total", "Sockets turned into tcp_sample/1 records."),
		DumpDuration:   f.histogram("dump_duration_seconds", "Duration of one netlink dump.", durBuckets),

		CloseEvents:       f.counter("close_events_total", "TCP destroy events received over sock_diag (after the in-kernel filter)."),
		CloseFiltered:     f.counter("close_filtered_total", "Destroy events dropped in user space (no peer, local port not configured)."),
		CloseSampled:      f.counter("close_sampled_total", "Destroy events of sampled connections (the poller's salted 4-tuple hash)."),
		CloseEmitted:      f.counter("close_emitted_total", "tcp_conn/1 records handed to the sink."),
		CloseDropped:      f.counter("close_dropped_total", "Destroy events the kernel dropped because the receive buffer was full (SK_MEMINFO_DROPS)."),
		CloseOverruns:     f.counter("close_enobufs_total", "ENOBUFS errors on the destroy sockets (each means one or more events dropped)."),
		CloseDecodeErrors: f.counter("close_decode_errors_total", "Destroy events that could not be decoded."),
		CloseCC:           f.counterVec("close_cc_total", "tcp_conn/1 records by how cc was learned: socket (the poller saw it), netns_default, unknown.", "source"),
		ClosePolicy:       f.counterVec("close_policy_total", "tcp_conn/1 records a socket policy (rollout/sockpolicy) matched: set (policy_generation recorded) or failed (its algorithm could not be set).", "outcome"),
		CloseUp:           f.gauge("close_capture_up", "1 while the close-time capture listens to destroy events, 0 when it could not start."),
		CloseHashInKernel: f.gauge("close_hash_in_kernel", "1 when an eBPF socket filter drops unsampled destroy events in the kernel, 0 when they are hashed in user space."),

		ReplayFiles: f.counterVec("replay_files_total", "ss snapshot files of the replay directory, by result: read, "+
			"stale (appeared after a newer one was read: not read), bad_name (no tick in the name: not read).", "result"),
		ReplayRecords: f.counter("replay_records_total", "tcp_sample/1 records made from replayed ss snapshots."),
		ReplaySkipped: f.counterVec("replay_skipped_total", "Replayed ss lines that gave no record, by reason "+
			"(the ss parser's, or rate: not in the replay's own sample).", "reason"),
		ReplayErrors: f.counterVec("replay_errors_total", "ss replay I/O errors, by operation (readdir, read: a snapshot that could not be read to its end).", "op"),

		LogLinesRead: f.counter("log_lines_read_total", "Complete access-log lines read (including lines that failed to parse)."),
		LogBytesRead: f.counter("log_bytes_read_total", "Access-log bytes read."),
		ParseErrors:  f.counterVec("parse_errors_total", "Access-log lines that could not be parsed, by reason.", "reason"),
		NginxFormatOK: f.gauge("nginx_format_ok", "1 when the nginx log_format is usable; 0 when it was refused "+
			"(the reason is logged) and no access log is tailed while the other sources run."),
		PollDuration:       f.histogram("poll_duration_seconds", "Duration of one tailer poll over every followed file.", durBuckets),
		TailedFiles:        f.gauge("tailed_files", "Files the tailer has open (current and rotated-away ones being drained)."),
		Rotations:          f.counterVec("log_rotations_total", "Rotations seen by the tailer, by kind (rename, truncate, rewrite).", "kind"),
		PartialLines:       f.counterVec("log_partial_lines_total", "Incomplete last lines flushed because their file was rotated away.", "what"),
		TailErrors:         f.counterVec("tail_errors_total", "Tailer I/O errors, by operation.", "op"),
		CheckpointWrites:   f.counter("checkpoint_writes_total", "Tailer checkpoints written."),
		CheckpointErrors:   f.counter("checkpoint_errors_total", "Tailer checkpoints that could not be written."),
		CheckpointLagBytes: f.gauge("checkpoint_lag_bytes", "Bytes read by the tailer whose records are not yet acknowledged or spooled."),

		RecordsReceived:  f.counterVec("records_received_total", "Records handed to the sink by the sources, by topic.", "topic"),
		RecordsProduced:  f.counterVec("records_produced_total", "Records acknowledged by Kafka on the live path, by topic.", "topic"),
		RecordsSpooled:   f.counterVec("records_spooled_total", "Records written to the disk spool, by topic.", "topic"),
		RecordsReplayed:  f.counterVec("records_replayed_total", "Spooled records acknowledged by Kafka, by topic.", "topic"),
		RecordsDropped:   f.counterVec("records_dropped_total", "Records lost for good, by reason.", "reason"),
		RecordsDuplicate: f.counterVec("records_duplicate_total", "Records not sent because they were already in Kafka or in the spool (after an unclean stop).", "where"),
		ProduceErrors:    f.counterVec("produce_errors_total", "Records whose produce to Kafka failed, by reason.", "reason"),
		SpoolEntries:     f.counterVec("spool_entries_total", "Times the sink switched from Kafka to the spool, by reason.", "reason"),
		QueueRecords:     f.gauge("queue_records", "Records waiting in the in-memory queue between sources and sink."),
		InflightRecords:  f.gauge("inflight_records", "Records handed to the Kafka client and not yet acknowledged."),
		KafkaUp:          f.gauge("kafka_up", "1 while Kafka acknowledges records, 0 after a stall or failure."),
		SpoolBytes:       f.gauge("spool_bytes", "Bytes in spool segments."),
		SpoolSegments:    f.gauge("spool_segments", "Spool segment files."),
		SpoolCorrupt:     f.counterVec("spool_corrupt_records_total", "Spool records skipped on replay because they were torn or damaged.", "reason"),
		SpoolErrors:      f.counterVec("spool_errors_total", "Spool I/O errors, by operation.", "op"),
		SpoolMode:        f.gauge("spool_mode", "1 while new records go to the spool instead of Kafka."),
		RecoveryScanned:  f.counter("recovery_records_scanned_total", "Records read back from Kafka after an unclean stop."),
		RecoveryDone:     f.gauge("recovery_done", "1 once records already in Kafka are known (always 1 after a clean stop)."),
		RecoveryErrors:   f.counter("recovery_errors_total", "Failed attempts to read back what reached Kafka after an unclean stop."),
		DeliverySafeMs:   f.gauge("delivery_safe_ms", "Every record not yet durably acknowledged was produced at or after this time (unix ms)."),
		UncleanStops: f.counter("unclean_stops_total", "Collector processes of this spool directory that died without shutting down "+
			"(SIGKILL, crash, OOM kill, power loss), found by the next start and kept across restarts in <spool>/run.json. "+
			"Each lost, uncounted, the sampler and close-capture records it held in memory: at most "+
			"queue.max_records + kafka.max_inflight_records, plus the destroy events not yet read (docs/collector/sink.md)."),

		RolloutStateOK:     f.gauge("rollout_state_ok", "1 if the rollout agent's state file was read, 0 if missing or unreadable (arm and rollout_id are then empty)."),
		RolloutStateErrors: f.counterVec("rollout_state_errors_total", "Failed reads of the rollout agent's state file, by reason.", "reason"),
		RolloutGeneration:  f.gauge("rollout_generation", "Generation in the rollout agent's state file."),
	}
}

type factory struct{ r *prometheus.Registry }

// CounterFunc registers a counter whose value fn reads (a count kept by another package).
func (m *Metrics) CounterFunc(name, help string, fn func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: Prefix + name, Help: help}, fn))
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: Prefix + name, Help: help})
	f.r.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: Prefix + name, Help: help}, labels)
	f.r.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: Prefix + name, Help: help})
	f.r.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: Prefix + name, Help: help, Buckets: buckets})
	f.r.MustRegister(h)
	return h
}

// Serve serves /metrics on addr until ctx is done. It returns the bound address at once
// (useful with port 0) and a function that waits for the server to stop.
func (m *Metrics) Serve(ctx context.Context, addr string, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics: listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ccab-collector: metrics at /metrics")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-done:
		}
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}()
	return ln.Addr().String(), func() { <-stopped }, nil
}
