// Package sampler samples TCP sockets every interval over netlink sock_diag (package
// netlink) and turns them into tcp_sample/1 records. It never runs ss.
//
// One tick:
//
//  1. dump IPv4 and IPv6 sockets of every configured network namespace, streamed one
//     message at a time; the kernel applies the state filter and the local-port filter
//     (bytecode), the sampler checks both again;
//  2. choose a deterministic subset: a socket is in the sample when a salted 64-bit hash of
//     its 4-tuple, read as a fraction of 2^64, is below SampleRate. The same connection
//     hashes the same on every tick, so a sampled connection stays sampled for its life;
//  3. keep work bounded: at most MaxPerTick records (the ones with the smallest hashes: a
//     bottom-k sample, which keeps the subset uniform and stable from tick to tick), and
//     at most MaxTickTime of dumping (the dump stops there; Truncated says so);
//  4. remember the last record of every sampled connection; a connection that is gone
//     from a complete dump is forgotten and its last record goes to the Closed queue
//     (nothing more is emitted for it), where per-connection analyses take it.
//
// sample_rate in each record is the probability with which that socket was sampled at
// that tick: SampleRate, or less when the cap bound (then the (k+1)-th smallest hash,
// which makes 1/sample_rate an unbiased weight for bottom-k sampling).
package sampler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/netns"
	"github.com/ccab-dev/ccab/collectors/netlink"
	"github.com/ccab-dev/ccab/collectors/record"
)

// Defaults.
const (
	DefaultInterval    = 10 * time.Second
	DefaultMaxPerTick  = 20000
	DefaultMaxTickTime = 2 * time.Second
	DefaultKeepClosed  = 10000
	DefaultMaxTracked  = 100000
)

// BootIDPath holds the kernel's boot id, the second key of sock_id.
const BootIDPath = "/proc/sys/kernel/random/boot_id"

// Config configures a Sampler. The zero value of every field means its default.
type Config struct {
	Interval      time.Duration // between ticks in Run; default 10 s
	SampleRate    float64       // fraction of connections sampled, in (0, 1]; default 1
	Salt          string        // fleet-wide secret: keys sock_id and the sampling hash
	BootID        string        // keys sock_id; default: read from /proc/sys/kernel/random/boot_id
	States        []string      // ss state names (ESTAB, CLOSE-WAIT, ..., or "all"); default ESTAB
	LocalPorts    []uint16      // only sockets with one of these local ports; empty: any
	MinBytesAcked uint64        // only "bulk" connections with at least this many bytes acked; 0: any
	MaxPerTick    int           // records per tick; default 20000; negative: no cap
	MaxTickTime   time.Duration // dumping time per tick; default 2 s; negative: no limit
	Namespaces    []string      // netns names (/run/netns/NAME) or paths (/proc/PID/ns/net); "" or empty: the process's own
	KeepClosed    int           // last records of closed connections kept for Closed(); default 10000; negative: do not track connections
	MaxTracked    int           // connections remembered at once; default 100000

	// OnTick, when set, is called by Run after every tick with its stats and error.
	OnTick func(TickStats, error)

	// Observe, when set, is called in Tick for every record with the inode of the socket's
	// network namespace and its socket cookie (the close-time capture remembers cc by them).
	Observe func(netns, cookie uint64, r *record.TCPSample)
}

// TickStats counts what one tick did.
type TickStats struct {
	Sockets         int     // sockets the kernel returned (after its state and port filters)
	Sampled         int     // records returned
	SkippedFilter   int     // dropped by a filter: state, local port, bytes_acked below MinBytesAcked, no tcp_info
	SkippedRate     int     // not in the sample (hash above SampleRate)
	SkippedCap      int     // in the sample but over MaxPerTick
	Truncated       bool    // the dump hit MaxTickTime: sockets after that point were not seen
	Interrupted     bool    // the kernel flagged a dump inconsistent (sockets came and went meanwhile)
	DecodeErrors    int     // messages that could not be decoded (or had a malformed attribute)
	NamespaceErrors int     // namespaces whose dump failed
	Closed          int     // remembered connections that disappeared
	ClosedDropped   int     // closed connections whose last record did not fit the Closed queue
	Tracked         int     // connections remembered after the tick
	EffectiveRate   float64 // sample_rate of this tick's records
	DumpDuration    time.Duration
	NetlinkBytes    int64
}

// Sampler samples sockets. Tick and Run must not be called concurrently; Closed may be
// called from any goroutine.
type Sampler struct {
	cfg       Config
	states    netlink.StateSet
	ports     map[uint16]bool
	key       *anon.SockHasher // Tick and Run are not concurrent: one hasher
	hashSeed  uint64
	threshold uint64 // hash < threshold: in the sample
	spaces    []*space
	tick      uint64
	tracked   map[trackKey]*trackedConn

	mu            sync.Mutex
	closed        []record.TCPSample
	closedDropped int
}

type space struct {
	name  string // as configured; "" for the process's own
	conn  dumper
	inode uint64           // network namespace inode (0: unknown)
	key   *anon.SockHasher // sock_id keyed by the namespace too
}

// dumper is what a Sampler needs of a *netlink.Conn (tests replay recorded dumps).
type dumper interface {
	Dump(ctx context.Context, req netlink.Request, fn func(msg []byte) error) (netlink.DumpStats, error)
	Close() error
}

// trackKey identifies a connection: the socket cookie tells a new connection on a reused
// 4-tuple from the old one; the namespace keeps equal 4-tuples of two namespaces apart.
type trackKey struct {
	ns          int
	cookie      uint64
	local, peer netip.AddrPort
}

type trackedConn struct {
	last record.TCPSample
	seen uint64 // last tick the socket was in the dump
}

// New checks cfg, fills its defaults and opens a sock_diag socket in every namespace.
func New(cfg Config) (*Sampler, error) {
	return newSampler(cfg, func(name string) (dumper, error) { return netlink.Open(netns.Path(name)) })
}

func newSampler(cfg Config, open func(name string) (dumper, error)) (*Sampler, error) {
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("sampler: interval %s is negative", cfg.Interval)
	}
	if cfg.SampleRate == 0 {
		cfg.SampleRate = 1
	}
	if !(cfg.SampleRate > 0 && cfg.SampleRate <= 1) {
		return nil, fmt.Errorf("sampler: sample rate %v is not in (0, 1]", cfg.SampleRate)
	}
	if cfg.MaxPerTick == 0 {
		cfg.MaxPerTick = DefaultMaxPerTick
	}
	if cfg.MaxTickTime == 0 {
		cfg.MaxTickTime = DefaultMaxTickTime
	}
	if cfg.KeepClosed == 0 {
		cfg.KeepClosed = DefaultKeepClosed
	}
	if cfg.MaxTracked <= 0 {
		cfg.MaxTracked = DefaultMaxTracked
	}
	if cfg.BootID == "" {
		if b, err := os.ReadFile(BootIDPath); err == nil {
			cfg.BootID = strings.TrimSpace(string(b))
		}
	}
	states, err := netlink.ParseStates(cfg.States)
	if err != nil {
		return nil, fmt.Errorf("sampler: states: %w", err)
	}
	s := &Sampler{
		cfg:       cfg,
		states:    states,
		key:       anon.SockKey{Salt: cfg.Salt, BootID: cfg.BootID}.Hasher(),
		hashSeed:  seedHash(cfg.Salt),
		threshold: rateThreshold(cfg.SampleRate),
		tracked:   map[trackKey]*trackedConn{},
	}
	if len(cfg.LocalPorts) > 0 {
		s.ports = map[uint16]bool{}
		for _, p := range cfg.LocalPorts {
			s.ports[p] = true
		}
	}
	names := cfg.Namespaces
	if len(names) == 0 {
		names = []string{""}
	}
	for _, name := range names {
		c, err := open(name)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sampler: namespace %s: %w", nsLabel(name), err)
		}
		sp := &space{name: name, conn: c, key: s.key}
		if n, ok := c.(interface{ NetnsInode() uint64 }); ok && n.NetnsInode() != 0 {
			sp.inode = n.NetnsInode()
			sp.key = s.key.WithNetns(sp.inode)
		}
		s.spaces = append(s.spaces, sp)
	}
	return s, nil
}

func nsLabel(name string) string {
	if name == "" {
		return "(own)"
	}
	return name
}

// NetnsInodes returns the inode of each configured namespace, in configuration order (0
// where it could not be read).
func (s *Sampler) NetnsInodes() []uint64 {
	out := make([]uint64, len(s.spaces))
	for i, sp := range s.spaces {
		out[i] = sp.inode
	}
	return out
}

// Config returns the configuration with its defaults filled in.
func (s *Sampler) Config() Config { return s.cfg }

// Close releases the netlink sockets.
func (s *Sampler) Close() error {
	var errs []error
	for _, sp := range s.spaces {
		if err := sp.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close namespace %s: %w", nsLabel(sp.name), err))
		}
	}
	return errors.Join(errs...)
}

// candidate is a socket chosen so far in a tick.
type candidate struct {
	hash uint64
	seq  int // dump order, to return records in the order the kernel listed them
	ns   int
	sock *netlink.Socket
}

// tickState is the work of one tick.
type tickState struct {
	st       TickStats
	heap     maxHeap
	capped   bool   // the cap rejected an eligible socket
	minOut   uint64 // smallest hash of an eligible socket the cap rejected
	deadline time.Time
	seq      int
}

// Tick samples once. now is the sampling time (ts_ms of every record); meta gives the host
// fields (pop, host, kernel, arm, rollout_id) — meta.TsMs and meta.SampleRate are not used:
// the records carry now and the rate this tick really sampled with. The error joins the
// namespaces whose dump failed; the records of the others are returned all the same.
func (s *Sampler) Tick(ctx context.Context, meta record.Meta, now time.Time) ([]record.TCPSample, TickStats, error) {
	s.tick++
	start := time.Now()
	t := &tickState{minOut: math.MaxUint64}
	if s.cfg.MaxTickTime > 0 {
		t.deadline = start.Add(s.cfg.MaxTickTime)
	}
	complete := make([]bool, len(s.spaces))
	var errs []error
	for i, sp := range s.spaces {
		complete[i] = true
		for _, fam := range []uint8{netlink.AFInet, netlink.AFInet6} {
			if t.st.Truncated {
				complete[i] = false
				break
			}
			req := netlink.Request{Family: fam, States: s.states, Ext: netlink.ExtTCPSample, LocalPorts: s.cfg.LocalPorts}
			ds, err := sp.conn.Dump(ctx, req, func(msg []byte) error { return s.consider(t, i, msg) })
			t.st.NetlinkBytes += ds.Bytes
			t.st.Interrupted = t.st.Interrupted || ds.Interrupted
			if ds.Stopped {
				complete[i] = false
			}
			if err != nil {
				complete[i] = false
				errs = append(errs, fmt.Errorf("namespace %s: %w", nsLabel(sp.name), err))
				if ctx.Err() != nil {
					break
				}
			}
		}
		if !complete[i] && !t.st.Truncated {
			t.st.NamespaceErrors++
		}
	}
	t.st.DumpDuration = time.Since(start)

	rate := s.cfg.SampleRate
	if t.capped {
		rate = math.Min(rate, float64(t.minOut)/(1<<64))
	}
	t.st.EffectiveRate = rate
	meta.TsMs = now.UnixMilli()
	meta.SampleRate = rate

	cands := t.heap.items
	sort.Slice(cands, func(a, b int) bool { return cands[a].seq < cands[b].seq })
	recs := make([]record.TCPSample, 0, len(cands))
	for i := range cands {
		c := &cands[i]
		r, ok := c.sock.Sample()
		if !ok {
			continue
		}
		meta.StampTCP(&r)
		// A remembered connection keeps its sock_id and prefix: the HMAC is computed once
		// per connection, not once per tick.
		if tc := s.tracked[c.key()]; tc != nil {
			r.SockID, r.PeerPrefix = tc.last.SockID, tc.last.PeerPrefix
		} else {
			r.SockID, r.PeerPrefix = s.spaces[c.ns].key.SockIDOf(c.sock.Local, c.sock.Peer, c.sock.Cookie), anon.PeerPrefix(c.sock.Peer.Addr())
		}
		if s.cfg.Observe != nil {
			s.cfg.Observe(s.spaces[c.ns].inode, c.sock.Cookie, &r)
		}
		recs = append(recs, r)
		s.remember(c, r)
	}
	t.st.Sampled = len(recs)
	s.evict(complete, &t.st)
	t.st.Tracked = len(s.tracked)
	return recs, t.st, errors.Join(errs...)
}

// deadlineEvery is how many messages go by between two looks at the clock.
const deadlineEvery = 256

// consider handles one message of the dump.
func (s *Sampler) consider(t *tickState, ns int, msg []byte) error {
	t.st.Sockets++
	if !t.deadline.IsZero() && t.st.Sockets%deadlineEvery == 0 && time.Now().After(t.deadline) {
		t.st.Truncated = true
		return netlink.ErrStop
	}
	h, err := netlink.DecodeHeader(msg)
	if err != nil {
		t.st.DecodeErrors++
		return nil
	}
	if !s.states.Has(h.State) || (s.ports != nil && !s.ports[h.Local.Port()]) ||
		h.State == netlink.StateTimeWait || h.State == netlink.StateNewSynRecv {
		// (TIME-WAIT and request sockets never carry tcp_info: no record.)
		t.st.SkippedFilter++
		return nil
	}
	if s.cfg.KeepClosed > 0 {
		if tc := s.tracked[trackKey{ns, h.Cookie, h.Local, h.Peer}]; tc != nil {
			tc.seen = s.tick
		}
	}
	hv := s.hash(h.Local, h.Peer)
	if hv >= s.threshold {
		t.st.SkippedRate++
		return nil
	}
	limit := s.cfg.MaxPerTick
	// Without a bytes_acked filter every socket with tcp_info is eligible, so a hash that
	// cannot enter the full heap is rejected before its attributes are decoded.
	if s.cfg.MinBytesAcked == 0 && limit > 0 && t.heap.Len() >= limit && hv >= t.heap.max() {
		t.rejectByCap(hv)
		return nil
	}
	sock, err := netlink.Decode(msg)
	if err != nil {
		t.st.DecodeErrors++
		return nil
	}
	if sock.BadAttr != "" {
		t.st.DecodeErrors++ // counted; the socket is still sampled without that attribute
	}
	if sock.Info == nil {
		t.st.SkippedFilter++
		return nil
	}
	if s.cfg.MinBytesAcked > 0 && (!sock.Info.Has(120, 8) || sock.Info.BytesAcked() < s.cfg.MinBytesAcked) {
		t.st.SkippedFilter++
		return nil
	}
	t.seq++
	c := candidate{hash: hv, seq: t.seq, ns: ns, sock: &sock}
	if limit < 0 || t.heap.Len() < limit {
		t.heap.push(c)
		return nil
	}
	if hv >= t.heap.max() {
		t.rejectByCap(hv)
		return nil
	}
	out := t.heap.replaceMax(c)
	t.rejectByCap(out.hash)
	return nil
}

func (c *candidate) key() trackKey {
	return trackKey{c.ns, c.sock.Cookie, c.sock.Local, c.sock.Peer}
}

func (t *tickState) rejectByCap(h uint64) {
	t.st.SkippedCap++
	t.capped = true
	if h < t.minOut {
		t.minOut = h
	}
}

// remember stores the last record of a sampled connection.
func (s *Sampler) remember(c *candidate, r record.TCPSample) {
	if s.cfg.KeepClosed < 0 {
		return
	}
	k := c.key()
	if tc := s.tracked[k]; tc != nil {
		tc.last, tc.seen = r, s.tick
		return
	}
	if len(s.tracked) >= s.cfg.MaxTracked {
		return
	}
	s.tracked[k] = &trackedConn{last: r, seen: s.tick}
}

// evict forgets connections missing from a complete dump of their namespace and queues
// their last records for Closed. A namespace whose dump was cut short or failed proves
// nothing about what is missing, so its connections stay.
func (s *Sampler) evict(complete []bool, st *TickStats) {
	var gone []record.TCPSample
	for k, tc := range s.tracked {
		if tc.seen == s.tick || !complete[k.ns] {
			continue
		}
		gone = append(gone, tc.last)
		delete(s.tracked, k)
	}
	st.Closed = len(gone)
	if len(gone) == 0 {
		return
	}
	sort.Slice(gone, func(a, b int) bool { return gone[a].SockID < gone[b].SockID })
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = append(s.closed, gone...)
	if over := len(s.closed) - s.cfg.KeepClosed; over > 0 {
		s.closed = append(s.closed[:0], s.closed[over:]...) // drop the oldest
		s.closedDropped += over
		st.ClosedDropped = over
	}
}

// Closed returns, and forgets, the last records of the sampled connections that have
// disappeared since the previous call (closed, or moved to a state outside the filter),
// oldest first, and how many did not fit the queue (KeepClosed) meanwhile. Safe to call
// from another goroutine than Run's.
func (s *Sampler) Closed() (recs []record.TCPSample, dropped int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, dropped = s.closed, s.closedDropped
	s.closed, s.closedDropped = nil, 0
	return recs, dropped
}

// Run ticks every Interval, the first time at once, and hands each tick's records to
// emit (not called for an empty tick). reps == 0 runs until ctx is done; otherwise Run
// returns after reps ticks. meta is called before every tick, because the arm can change
// while the collector runs (nil: empty host fields). A failed tick does not stop Run: it
// is reported to Config.OnTick.
func (s *Sampler) Run(ctx context.Context, reps int, meta func() record.Meta, emit func([]record.TCPSample)) error {
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for i := 0; reps == 0 || i < reps; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ticker.C:
			}
		}
		var m record.Meta
		if meta != nil {
			m = meta()
		}
		recs, st, err := s.Tick(ctx, m, time.Now())
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if len(recs) > 0 && emit != nil {
			emit(recs)
		}
		if s.cfg.OnTick != nil {
			s.cfg.OnTick(st, err)
		}
	}
	return nil
}
