package link

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Drop causes (label "cause").
const (
	DropLoss   = "loss"    // random (Bernoulli) loss
	DropGE     = "ge_loss" // Gilbert–Elliott loss
	DropBuffer = "buffer"  // droptail: the bottleneck buffer was full
	DropMemory = "memory"  // the link held --max-held-bytes already (safety cap)
	DropWrite  = "write"   // the kernel refused the write into the TUN device
)

// Metrics are the link's Prometheus metrics, all named ccab_link_* with a label
// direction = up (A→B) | down (B→A). Packets are counted as MTU-sized segments (a GSO
// super-packet of 44 segments counts 44), bytes are IP bytes.
type Metrics struct {
	Registry *prometheus.Registry

	RxPackets, RxBytes               *prometheus.CounterVec
	DeliveredPackets, DeliveredBytes *prometheus.CounterVec
	DroppedPackets, DroppedBytes     *prometheus.CounterVec // + cause
	TunReads, TunWrites              *prometheus.CounterVec
	QueuedPackets, QueuedBytes       *prometheus.GaugeVec // bottleneck queue
	HeldBytes                        *prometheus.GaugeVec // queue + delay line
	Sojourn                          *prometheus.HistogramVec
	Lateness                         *prometheus.HistogramVec
	Config                           *prometheus.GaugeVec
}

// NewMetrics registers every metric in a fresh registry (with Go and process collectors).
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d := []string{"direction"}
	cv := func(name, help string, labels []string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ccab_link_" + name, Help: help}, labels)
		r.MustRegister(c)
		return c
	}
	gv := func(name, help string, labels []string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ccab_link_" + name, Help: help}, labels)
		r.MustRegister(g)
		return g
	}
	m := &Metrics{Registry: r}
	m.RxPackets = cv("rx_packets_total", "Segments read from the ingress TUN device (a GSO packet counts its MTU-sized segments).", d)
	m.RxBytes = cv("rx_bytes_total", "IP bytes of the segments read from the ingress TUN device.", d)
	m.DeliveredPackets = cv("delivered_packets_total", "Segments written into the egress TUN device.", d)
	m.DeliveredBytes = cv("delivered_bytes_total", "IP bytes of the delivered segments.", d)
	m.DroppedPackets = cv("dropped_packets_total", "Segments dropped, by cause: loss, ge_loss, buffer, memory, write.", []string{"direction", "cause"})
	m.DroppedBytes = cv("dropped_bytes_total", "IP bytes of the dropped segments, by cause.", []string{"direction", "cause"})
	m.TunReads = cv("tun_reads_total", "read() calls that returned a packet (GSO packets included).", d)
	m.TunWrites = cv("tun_writes_total", "write() calls into the egress TUN device.", d)
	m.QueuedPackets = gv("queued_packets", "Segments in the bottleneck queue (arrived, not yet serialized), at the last arrival or release.", d)
	m.QueuedBytes = gv("queued_bytes", "IP bytes in the bottleneck queue (what --buffer-bytes limits).", d)
	m.HeldBytes = gv("held_bytes", "IP bytes held by the link: bottleneck queue plus delay line.", d)
	m.Sojourn = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ccab_link_sojourn_seconds",
		Help:    "Time a segment spends in the bottleneck (queueing + serialization), without the fixed delay.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18), // 50 µs … 6.5 s
	}, d)
	m.Lateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "ccab_link_release_lateness_seconds",
		Help:    "How late a write happened after its segments' scheduled delivery time (timer and scheduling error; early releases within --release-slack-us count 0).",
		Buckets: prometheus.ExponentialBuckets(1e-6, 2, 20), // 1 µs … 0.5 s
	}, d)
	r.MustRegister(m.Sojourn, m.Lateness)
	m.Config = gv("config_info", "The configuration of each direction (value 1).",
		[]string{"direction", "delay_ms", "rate_bps", "trace", "buffer_bytes", "loss", "ge_p", "ge_r"})
	return m
}
