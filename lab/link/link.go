// Package link is a userspace network link between two network namespaces, in the spirit of
// Mahimahi: a TUN device in each namespace, and per direction a loss stage, a droptail
// bottleneck (constant rate or a Mahimahi delivery trace) and a fixed one-way delay.
//
// Per direction one goroutine reads packets from the ingress TUN device and schedules them
// (their departure from the bottleneck is computed on arrival: the link is a FIFO whose
// departures never go backwards), and one goroutine on a locked OS thread sleeps on a
// timerfd armed for the head of the queue and writes every segment that is due. GSO
// super-packets (IFF_VNET_HDR + TUNSETOFFLOAD) are scheduled per MTU-sized segment; when only
// part of one is due it is cut into runs of segments with fresh headers, written in place.
// See lab/link/README.md.
package link

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/prometheus/client_golang/prometheus"
)

// DirConfig is one direction of the link.
type DirConfig struct {
	Delay       time.Duration // fixed one-way delay added after the bottleneck
	RateBps     float64       // bottleneck rate in bits/s of IP bytes; 0 = unlimited
	Trace       *Trace        // a delivery trace instead of RateBps (nil: constant rate)
	TraceName   string        // for the config metric and logs
	BufferBytes int64         // droptail bottleneck buffer in IP bytes; 0 = unlimited
	Loss        float64       // random loss probability per segment
	GEP, GER    float64       // Gilbert–Elliott good→bad and bad→good probabilities per segment (0: off)
	GELossBad   float64       // loss probability in the bad state (default 1 when GEP > 0)
	GELossGood  float64       // loss probability in the good state
}

// Config is the whole link. Up is A→B, Down is B→A.
type Config struct {
	A, B         Endpoint
	Up, Down     DirConfig
	Seed         uint64
	Slack        time.Duration // release segments due within this much of now (batching); capped at the delay
	Offload      bool          // GSO/TSO through the TUN devices (IFF_VNET_HDR + TUNSETOFFLOAD)
	MaxHeldBytes int64         // safety cap per direction on bytes held (queue + delay line)
	RTPriority   int           // > 0: the releasing threads run SCHED_FIFO at this priority (less wake-up jitter on a busy host)
	Metrics      *Metrics
	Log          *slog.Logger
}

// Link is an open link: both devices exist. Run moves packets until its context ends.
type Link struct {
	cfg  Config
	fa   int // TUN descriptors
	fb   int
	stop int // eventfd: readable once the link stops
	up   *direction
	down *direction
	clk  *clock
}

// Open creates the TUN devices (A, then B) and the two directions.
func Open(cfg Config) (*Link, error) {
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxHeldBytes <= 0 {
		cfg.MaxHeldBytes = 1 << 30
	}
	for _, d := range []DirConfig{cfg.Up, cfg.Down} {
		if err := d.validate(); err != nil {
			return nil, err
		}
	}
	fa, err := openTUN(cfg.A, cfg.Offload)
	if err != nil {
		return nil, fmt.Errorf("side A (%s in %q): %w", cfg.A.Dev, cfg.A.Netns, err)
	}
	fb, err := openTUN(cfg.B, cfg.Offload)
	if err != nil {
		unix.Close(fa)
		return nil, fmt.Errorf("side B (%s in %q): %w", cfg.B.Dev, cfg.B.Netns, err)
	}
	l := &Link{cfg: cfg, fa: fa, fb: fb, clk: newClock()}
	l.stop, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err == nil {
		l.up, err = newDirection("up", cfg.Up, fa, fb, l.stop, cfg, l.clk, 1)
	}
	if err == nil {
		l.down, err = newDirection("down", cfg.Down, fb, fa, l.stop, cfg, l.clk, 2)
	}
	if err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

func (d DirConfig) validate() error {
	switch {
	case d.Delay < 0:
		return errors.New("delay must be ≥ 0")
	case d.RateBps < 0:
		return errors.New("rate must be ≥ 0 (0 = unlimited)")
	case d.BufferBytes < 0:
		return errors.New("buffer must be ≥ 0 (0 = unlimited)")
	case d.Loss < 0 || d.Loss > 1 || d.GEP < 0 || d.GEP > 1 || d.GER < 0 || d.GER > 1 ||
		d.GELossBad < 0 || d.GELossBad > 1 || d.GELossGood < 0 || d.GELossGood > 1:
		return errors.New("probabilities must be in [0, 1]")
	case d.GEP > 0 && d.GER == 0:
		return errors.New("Gilbert–Elliott needs r > 0 (else the bad state never ends)")
	}
	return nil
}

// Run moves packets until ctx is done (or a device fails), then stops both directions and
// closes the devices (which removes them).
func (l *Link) Run(done <-chan struct{}) error {
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for _, d := range []*direction{l.up, l.down} {
		wg.Add(2)
		go func() { defer wg.Done(); errc <- d.readLoop() }()
		go func() { defer wg.Done(); d.writeLoop() }()
	}
	var err error
	select {
	case <-done:
	case err = <-errc:
	}
	l.up.halt()
	l.down.halt()
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(l.stop, one[:]) // wakes both readers
	wg.Wait()
	l.closeFiles()
	return err
}

func (l *Link) closeFiles() {
	for _, d := range []*direction{l.up, l.down} {
		if d != nil && d.tfd >= 0 {
			unix.Close(d.tfd)
			d.tfd = -1
		}
	}
	unix.Close(l.fa)
	unix.Close(l.fb)
	if l.stop > 0 {
		unix.Close(l.stop)
	}
}

// Stats are a direction's totals (segments and IP bytes).
type Stats struct {
	RxPackets        int64            `json:"rx_packets"`
	RxBytes          int64            `json:"rx_bytes"`
	DeliveredPackets int64            `json:"delivered_packets"`
	DeliveredBytes   int64            `json:"delivered_bytes"`
	Dropped          map[string]int64 `json:"dropped_packets"` // by cause
}

// Stats returns the totals of both directions.
func (l *Link) Stats() (up, down Stats) { return l.up.stats(), l.down.stats() }

// ---------------------------------------------------------------------------------------------

// clock is CLOCK_MONOTONIC in nanoseconds (the timerfd's clock), read through Go's vDSO
// monotonic time.
type clock struct {
	base  time.Time
	mono0 int64
}

func newClock() *clock {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return &clock{base: time.Now(), mono0: ts.Nano()}
}

func (c *clock) now() int64 { return c.mono0 + int64(time.Since(c.base)) }

const (
	bigBuf   = vnetHdrLen + 65536 + 256
	smallBuf = 2048
	maxHdr   = vnetHdrLen + 60 + 60
)

type entry struct {
	buf   []byte // vnet header + packet (a slice of big or small)
	big   []byte // owned big buffer, if any
	small []byte // owned small buffer (reused)
	m     pktMeta
	hdr   [maxHdr]byte
	dep   []int64 // departure of each segment from the bottleneck; -1 = dropped
	next  int     // next segment to release
	size  int     // IP bytes held
}

type run struct {
	e    *entry
	i, j int
	due  int64
}

type lossStage struct {
	m     lossModel
	cause string
}

type direction struct {
	name    string
	inFd    int
	stopFd  int
	outFd   int
	delay   int64
	slack   int64
	sh      shaper
	losses  []lossStage
	limit   int64
	maxHeld int64
	clk     *clock
	log     *slog.Logger
	tfd     int
	rtPrio  int

	mu      sync.Mutex
	q       []*entry
	head    int
	cur     int // departure cursor: q[cur] segment curSeg is the first not yet departed
	curSeg  int
	qBytes  int64
	qPkts   int64
	held    int64
	free    []*entry
	bigFree [][]byte
	armed   bool
	stopped bool
	quit    atomic.Bool // set by halt; the reader checks it between reads (it may never poll under load)
	pending []*entry    // released entries, recycled at the writer's next turn
	causes  []string    // scratch

	rxP, rxB, dlP, dlB, reads, writes prometheus.Counter
	qP, qB, heldG                     prometheus.Gauge
	sojourn, late                     prometheus.Observer
	dropP, dropB                      map[string]prometheus.Counter
	totals                            struct{ rxP, rxB, dlP, dlB int64 }
	dropTotals                        map[string]int64
}

func newDirection(name string, c DirConfig, inFd, outFd, stopFd int, cfg Config, clk *clock, stream uint64) (*direction, error) {
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	d := &direction{
		name: name, inFd: inFd, stopFd: stopFd, outFd: outFd, delay: int64(c.Delay), slack: int64(cfg.Slack),
		limit: c.BufferBytes, maxHeld: cfg.MaxHeldBytes, clk: clk, log: cfg.Log, tfd: tfd, rtPrio: cfg.RTPriority,
		dropP: map[string]prometheus.Counter{}, dropB: map[string]prometheus.Counter{},
		dropTotals: map[string]int64{},
	}
	if d.slack > d.delay {
		d.slack = d.delay // a segment never leaves before its departure from the bottleneck
	}
	switch {
	case c.Trace != nil:
		d.sh = newTraceRate(c.Trace, clk.now())
	case c.RateBps > 0:
		d.sh = &constRate{bps: uint64(c.RateBps)}
	default:
		d.sh = unlimited{}
		d.limit = 0 // no bottleneck, no queue
	}
	rng := func(k uint64) *rand.Rand { return rand.New(rand.NewPCG(cfg.Seed, stream<<8|k)) }
	if c.Loss > 0 {
		d.losses = append(d.losses, lossStage{&bernoulli{p: c.Loss, rng: rng(1)}, DropLoss})
	}
	if c.GEP > 0 {
		d.losses = append(d.losses, lossStage{&gilbertElliott{p: c.GEP, r: c.GER, lossGood: c.GELossGood,
			lossBad: c.GELossBad, rng: rng(2)}, DropGE})
	}
	m := cfg.Metrics
	d.rxP, d.rxB = m.RxPackets.WithLabelValues(name), m.RxBytes.WithLabelValues(name)
	d.dlP, d.dlB = m.DeliveredPackets.WithLabelValues(name), m.DeliveredBytes.WithLabelValues(name)
	d.reads, d.writes = m.TunReads.WithLabelValues(name), m.TunWrites.WithLabelValues(name)
	d.qP, d.qB, d.heldG = m.QueuedPackets.WithLabelValues(name), m.QueuedBytes.WithLabelValues(name), m.HeldBytes.WithLabelValues(name)
	d.sojourn, d.late = m.Sojourn.WithLabelValues(name), m.Lateness.WithLabelValues(name)
	for _, cause := range []string{DropLoss, DropGE, DropBuffer, DropMemory, DropWrite} {
		d.dropP[cause] = m.DroppedPackets.WithLabelValues(name, cause)
		d.dropB[cause] = m.DroppedBytes.WithLabelValues(name, cause)
	}
	rate := strconv.FormatFloat(c.RateBps, 'f', -1, 64)
	if c.Trace != nil {
		rate = strconv.FormatFloat(c.Trace.MeanBps(), 'f', 0, 64)
	}
	m.Config.WithLabelValues(name, strconv.FormatFloat(c.Delay.Seconds()*1000, 'f', -1, 64), rate, c.TraceName,
		strconv.FormatInt(d.limit, 10), strconv.FormatFloat(c.Loss, 'f', -1, 64),
		strconv.FormatFloat(c.GEP, 'f', -1, 64), strconv.FormatFloat(c.GER, 'f', -1, 64)).Set(1)
	return d, nil
}

func (d *direction) stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{RxPackets: d.totals.rxP, RxBytes: d.totals.rxB, DeliveredPackets: d.totals.dlP,
		DeliveredBytes: d.totals.dlB, Dropped: map[string]int64{}}
	for k, v := range d.dropTotals {
		s.Dropped[k] = v
	}
	return s
}

// arm sets the timerfd to fire at t (absolute CLOCK_MONOTONIC ns); called with mu held.
func (d *direction) arm(t int64) {
	if t <= 0 {
		t = 1
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(t)}
	_ = unix.TimerfdSettime(d.tfd, unix.TFD_TIMER_ABSTIME, &spec, nil)
	d.armed = true
}

func (d *direction) disarm() {
	var spec unix.ItimerSpec
	_ = unix.TimerfdSettime(d.tfd, unix.TFD_TIMER_ABSTIME, &spec, nil)
	d.armed = false
}

// halt stops the writer (the reader is woken by the link's stop eventfd).
func (d *direction) halt() {
	d.quit.Store(true)
	d.mu.Lock()
	d.stopped = true
	d.arm(1)
	d.mu.Unlock()
}

// realtime puts the calling (locked) thread in SCHED_FIFO when configured.
func (d *direction) realtime(role string) {
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if d.rtPrio > 0 {
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: uint32(d.rtPrio)}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			d.log.Warn("SCHED_FIFO", "direction", d.name, "thread", role, "err", err)
		}
	}
}

// advance moves the departure cursor past every segment that left the bottleneck by now.
func (d *direction) advance(now int64) {
	for d.cur < len(d.q) {
		e := d.q[d.cur]
		for d.curSeg < e.m.nseg {
			t := e.dep[d.curSeg]
			if t >= 0 {
				if t > now {
					return
				}
				d.qBytes -= int64(e.m.segBytes(d.curSeg))
				d.qPkts--
			}
			d.curSeg++
		}
		d.cur++
		d.curSeg = 0
	}
}

func (d *direction) drop(cause string, segs, bytes int) {
	d.dropP[cause].Add(float64(segs))
	d.dropB[cause].Add(float64(bytes))
	d.dropTotals[cause] += int64(segs)
}

// readLoop runs on its own locked OS thread: it drains the ingress device with non-blocking
// reads and sleeps in poll(2) on the device and the stop eventfd when there is nothing to
// read. Keeping it off Go's netpoller means an arrival is timestamped as soon as the kernel
// wakes this thread (which --rt-priority can make SCHED_FIFO).
func (d *direction) readLoop() error {
	runtime.LockOSThread() // never unlocked: the thread (maybe SCHED_FIFO) exits with the goroutine
	d.realtime("read")
	buf := make([]byte, bigBuf)
	fds := []unix.PollFd{{Fd: int32(d.inFd), Events: unix.POLLIN}, {Fd: int32(d.stopFd), Events: unix.POLLIN}}
	for !d.quit.Load() {
		n, err := rawRW(unix.SYS_READ, d.inFd, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			fds[0].Revents, fds[1].Revents = 0, 0
			if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
				return fmt.Errorf("%s: poll: %w", d.name, err)
			}
			if fds[1].Revents != 0 {
				return nil
			}
			continue
		}
		if err != nil {
			d.mu.Lock()
			stopped := d.stopped
			d.mu.Unlock()
			if stopped {
				return nil
			}
			return fmt.Errorf("%s: read: %w", d.name, err)
		}
		now := d.clk.now()
		d.reads.Inc()
		m := parseMeta(buf[:n])
		if m.size == 0 {
			continue
		}
		total := m.runBytes(0, m.nseg)
		d.rxP.Add(float64(m.nseg))
		d.rxB.Add(float64(total))

		d.mu.Lock()
		d.totals.rxP += int64(m.nseg)
		d.totals.rxB += int64(total)
		d.advance(now)
		if d.held+int64(m.size) > d.maxHeld {
			d.drop(DropMemory, m.nseg, total)
			d.mu.Unlock()
			continue
		}
		// Loss and droptail decisions, per segment in order.
		d.causes = d.causes[:0]
		acc, live := d.qBytes, 0
		for k := 0; k < m.nseg; k++ {
			cause := ""
			for _, l := range d.losses {
				if l.m.lose() && cause == "" {
					cause = l.cause
				}
			}
			b := int64(m.segBytes(k))
			if cause == "" && d.limit > 0 && acc+b > d.limit {
				cause = DropBuffer
			}
			if cause == "" {
				acc += b
				live++
			}
			d.causes = append(d.causes, cause)
		}
		if live < m.nseg && m.nseg > 1 && !m.split {
			// A GSO packet we cannot cut goes whole or not at all.
			for k := range d.causes {
				if d.causes[k] == "" {
					d.causes[k] = DropBuffer
				}
			}
			live = 0
		}
		for k, c := range d.causes {
			if c != "" {
				d.drop(c, 1, m.segBytes(k))
			}
		}
		if live == 0 {
			d.mu.Unlock()
			continue
		}
		e := d.newEntry()
		e.m = m
		if n <= smallBuf {
			e.buf = append(e.small[:0], buf[:n]...)
			e.small = e.buf
		} else {
			e.big, e.buf = buf, buf[:n]
			if k := len(d.bigFree); k > 0 {
				buf = d.bigFree[k-1]
				d.bigFree = d.bigFree[:k-1]
			} else {
				buf = nil
			}
		}
		if m.nseg > 1 {
			copy(e.hdr[:], e.buf)
		}
		if cap(e.dep) < m.nseg {
			e.dep = make([]int64, m.nseg, m.nseg+8)
		}
		e.dep = e.dep[:m.nseg]
		e.next, e.size = 0, m.size
		for k, c := range d.causes {
			if c != "" {
				e.dep[k] = -1
				continue
			}
			b := m.segBytes(k)
			t := d.sh.depart(now, b)
			e.dep[k] = t
			d.qBytes += int64(b)
			d.qPkts++
			d.sojourn.Observe(float64(t-now) / 1e9)
		}
		d.q = append(d.q, e)
		d.held += int64(e.size)
		if !d.armed && !d.stopped {
			d.arm(d.nextDue(d.q[d.head]))
		}
		d.qP.Set(float64(d.qPkts))
		d.qB.Set(float64(d.qBytes))
		d.heldG.Set(float64(d.held))
		d.mu.Unlock()
		if buf == nil {
			buf = make([]byte, bigBuf)
		}
	}
	return nil
}

func (d *direction) newEntry() *entry {
	if k := len(d.free); k > 0 {
		e := d.free[k-1]
		d.free = d.free[:k-1]
		return e
	}
	return &entry{small: make([]byte, 0, smallBuf)}
}

// nextDue is the delivery time of e's next live segment.
func (d *direction) nextDue(e *entry) int64 {
	for k := e.next; k < e.m.nseg; k++ {
		if e.dep[k] >= 0 {
			if !e.m.split && e.m.nseg > 1 {
				return e.dep[e.m.nseg-1] + d.delay
			}
			return e.dep[k] + d.delay
		}
	}
	return 1
}

func (d *direction) recycle() {
	for _, e := range d.pending {
		if e.big != nil {
			if len(d.bigFree) < 64 {
				d.bigFree = append(d.bigFree, e.big)
			}
			e.big = nil
		}
		e.buf = nil
		d.free = append(d.free, e)
	}
	d.pending = d.pending[:0]
}

func (d *direction) writeLoop() {
	runtime.LockOSThread() // never unlocked, as in readLoop
	d.realtime("release")
	var tb [8]byte
	var runs []run
	for {
		if _, err := unix.Read(d.tfd, tb[:]); err != nil && err != unix.EINTR && err != unix.EAGAIN {
			d.log.Error("timerfd read", "direction", d.name, "err", err)
			return
		}
		d.mu.Lock()
		d.recycle()
		if d.stopped {
			d.mu.Unlock()
			return
		}
		now := d.clk.now()
		limit := now + d.slack
		d.advance(now)
		runs = runs[:0]
		for d.head < len(d.q) {
			e := d.q[d.head]
			for e.next < e.m.nseg {
				k := e.next
				if e.dep[k] < 0 {
					e.next++
					continue
				}
				j := k + 1
				if e.m.split || e.m.nseg == 1 {
					if e.dep[k]+d.delay > limit {
						break
					}
					for j < e.m.nseg && e.dep[j] >= 0 && e.dep[j]+d.delay <= limit {
						j++
					}
				} else {
					if e.dep[e.m.nseg-1]+d.delay > limit {
						break
					}
					j = e.m.nseg
				}
				runs = append(runs, run{e: e, i: k, j: j, due: e.dep[j-1] + d.delay})
				e.next = j
			}
			if e.next < e.m.nseg {
				break
			}
			d.held -= int64(e.size)
			d.q[d.head] = nil
			d.head++
			d.pending = append(d.pending, e)
		}
		if d.head == len(d.q) {
			d.q, d.head, d.cur, d.curSeg = d.q[:0], 0, 0, 0
			d.disarm()
		} else {
			if d.head > 256 && d.head*2 > len(d.q) {
				n := copy(d.q, d.q[d.head:])
				clear(d.q[n:])
				d.q = d.q[:n]
				d.cur -= d.head
				d.head = 0
			}
			d.arm(d.nextDue(d.q[d.head]))
		}
		d.qP.Set(float64(d.qPkts))
		d.qB.Set(float64(d.qBytes))
		d.heldG.Set(float64(d.held))
		d.mu.Unlock()

		var dlP, dlB int64
		for _, r := range runs {
			out := r.e.buf
			if r.e.m.nseg > 1 && r.e.m.split {
				out = buildRun(r.e.buf, r.e.hdr[:], &r.e.m, r.i, r.j)
			}
			bytes := r.e.m.runBytes(r.i, r.j)
			err := d.write(out)
			d.writes.Inc()
			if late := d.clk.now() - r.due; late > 0 {
				d.late.Observe(float64(late) / 1e9)
			} else {
				d.late.Observe(0)
			}
			if err != nil {
				d.mu.Lock()
				d.drop(DropWrite, r.j-r.i, bytes)
				d.mu.Unlock()
				continue
			}
			dlP += int64(r.j - r.i)
			dlB += int64(bytes)
		}
		if dlP > 0 {
			d.dlP.Add(float64(dlP))
			d.dlB.Add(float64(dlB))
			d.mu.Lock()
			d.totals.dlP += dlP
			d.totals.dlB += dlB
			d.mu.Unlock()
		}
	}
}

func (d *direction) write(b []byte) error {
	for tries := 0; ; tries++ {
		_, err := rawRW(unix.SYS_WRITE, d.outFd, b)
		if err == unix.EINTR || (err == unix.EAGAIN && tries < 100) {
			if err == unix.EAGAIN {
				time.Sleep(10 * time.Microsecond)
			}
			continue
		}
		return err
	}
}

// rawRW is read(2)/write(2) without telling the Go scheduler: both descriptors are
// non-blocking, so the call never sleeps, and skipping entersyscall/exitsyscall saves ~10 %
// of the link's CPU at Gbit/s rates (it showed in the profile as procyield/casgstatus).
func rawRW(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}
