// Package closecap captures every TCP connection once, when the kernel destroys its
// socket, and turns it into a tcp_conn/1 record with the connection's final counters.
//
// It listens to the sock_diag destroy broadcasts (SKNLGRP_INET_TCP_DESTROY and
// SKNLGRP_INET6_TCP_DESTROY, what `ss -E` shows) of every configured network namespace.
// On Linux 6.18 an event carries the inet_diag_msg header (addresses, ports, socket
// cookie; state CLOSE; no uid/inode), INET_DIAG_PROTOCOL and the whole struct tcp_info
// (280 bytes) — but no INET_DIAG_CONG and no BBRINFO. So cc comes from the poller's
// sighting of the same socket (Book), else from the namespace's default
// net.ipv4.tcp_congestion_control at close time; cc_source says which.
//
// Sampling is the poller's (sampler.Selection: the same salted 4-tuple hash and rate), so
// a connection is in both paths or in neither, and sock_id is the poller's (keyed by the
// namespace inode), so the two paths name one connection alike.
package closecap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ccab-dev/ccab/collectors/anon"
	"github.com/ccab-dev/ccab/collectors/internal/netns"
	"github.com/ccab-dev/ccab/collectors/netlink"
	"github.com/ccab-dev/ccab/collectors/record"
	"github.com/ccab-dev/ccab/collectors/sampler"
)

// Defaults.
const (
	DefaultMaxBatch   = 1024
	DefaultCCRefresh  = time.Second
	DefaultBookMaxAge = time.Minute
	DefaultCoalesce   = 50 * time.Millisecond
)

// Config configures a Capture. Zero values mean the defaults.
type Config struct {
	SampleRate float64  // in (0, 1]; default 1; the poller's
	Salt       string   // the poller's salt: keys the sampling hash and sock_id
	BootID     string   // keys sock_id; default: /proc/sys/kernel/random/boot_id
	LocalPorts []uint16 // only sockets with one of these local ports (also filtered in the kernel)
	Namespaces []string // netns names or paths; "" or empty: the process's own

	RcvBuf   int  // receive buffer per namespace; default netlink.DefaultDestroyRcvBuf
	NoFilter bool // do not attach the in-kernel BPF filter
	// NoHashFilter keeps the sampling hash out of the kernel (classic filter only). By
	// default, below rate 1, an eBPF filter drops unsampled events in the kernel when the
	// process may load one (CAP_BPF or CAP_SYS_ADMIN).
	NoHashFilter bool

	Book       *Book         // the poller's sightings (cc, first seen); nil: none
	BookMaxAge time.Duration // sweep Book entries not seen for this long; default 1 min
	CCRefresh  time.Duration // how often namespace default cc is re-read; default 1 s
	MaxBatch   int           // records per emitted batch at most; default 1024
	Coalesce   time.Duration // a reader wakes at most once per this (events queue in the socket meanwhile); default 50 ms; negative: no wait
	ProcSys    string        // default "/proc/sys"
	// BPFCCDir is where the agent pins ccab's BPF congestion controls (rollout/bpfcc): a
	// connection whose cc has a pin there is recorded with cc_impl "ccab-bpf", others "kernel".
	// Default /sys/fs/bpf/ccab-cc.
	BPFCCDir string
	// Policy looks a connection up by socket cookie in the socket policy's records
	// (rollout/sockpolicy's conn_policy): the generation of the policy that set its
	// congestion control, and whether setting it succeeded. nil: no socket policy.
	Policy func(cookie uint64) (generation uint64, set, found bool)

	// ipv4Only joins the IPv4 group only (tests).
	ipv4Only bool
}

// Stats are cumulative counters, safe to read at any time.
type Stats struct {
	Events       atomic.Uint64 // destroy events received (after the in-kernel filter)
	Filtered     atomic.Uint64 // events dropped in user space: no peer, local port
	Sampled      atomic.Uint64 // events in the sample (the hash)
	Emitted      atomic.Uint64 // records handed to emit
	Dropped      atomic.Uint64 // events the kernel dropped (receive buffer full; SK_MEMINFO_DROPS)
	Overruns     atomic.Uint64 // ENOBUFS errors reported on the sockets
	DecodeErrors atomic.Uint64 // events that could not be decoded (or had no tcp_info)
	CCSocket     atomic.Uint64 // records whose cc came from the poller's sighting
	CCDefault    atomic.Uint64 // records whose cc is the namespace default
	CCUnknown    atomic.Uint64 // records without cc
	PolicySet    atomic.Uint64 // records whose cc a socket policy set (policy_generation)
	PolicyFailed atomic.Uint64 // records a socket policy matched but could not set (no policy_generation)
}

// Capture listens to destroy events. Run once.
type Capture struct {
	cfg    Config
	sel    sampler.Selection
	spaces []*space
	impl   *ImplCache
	Stats  Stats
}

type space struct {
	name     string
	conn     *netlink.DestroyConn
	key      *anon.SockHasher
	inode    uint64
	ccDef    atomic.Value // string: the namespace's default cc
	ccDefErr atomic.Value // string: why it could not be read
}

// New opens a destroy listener in every namespace (entering another namespace needs
// CAP_SYS_ADMIN; the error then wraps os.ErrPermission).
func New(cfg Config) (*Capture, error) {
	if cfg.SampleRate == 0 {
		cfg.SampleRate = 1
	}
	if !(cfg.SampleRate > 0 && cfg.SampleRate <= 1) {
		return nil, fmt.Errorf("closecap: sample rate %v is not in (0, 1]", cfg.SampleRate)
	}
	if cfg.BootID == "" {
		if b, err := os.ReadFile(sampler.BootIDPath); err == nil {
			cfg.BootID = strings.TrimSpace(string(b))
		}
	}
	if cfg.BookMaxAge <= 0 {
		cfg.BookMaxAge = DefaultBookMaxAge
	}
	if cfg.CCRefresh <= 0 {
		cfg.CCRefresh = DefaultCCRefresh
	}
	if cfg.Coalesce == 0 {
		cfg.Coalesce = DefaultCoalesce
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.ProcSys == "" {
		cfg.ProcSys = "/proc/sys"
	}
	if cfg.BPFCCDir == "" {
		cfg.BPFCCDir = "/sys/fs/bpf/ccab-cc"
	}
	c := &Capture{cfg: cfg, sel: sampler.NewSelection(cfg.Salt, cfg.SampleRate), impl: NewImplCache(cfg.BPFCCDir)}
	names := cfg.Namespaces
	if len(names) == 0 {
		names = []string{""}
	}
	base := anon.SockKey{Salt: cfg.Salt, BootID: cfg.BootID}.Hasher()
	for _, name := range names {
		dcfg := netlink.DestroyConfig{RcvBuf: cfg.RcvBuf, LocalPorts: cfg.LocalPorts, NoFilter: cfg.NoFilter, IPv4Only: cfg.ipv4Only}
		if cfg.SampleRate < 1 && !cfg.NoHashFilter {
			dcfg.Hash = &netlink.HashFilter{Seed: c.sel.Seed(), Threshold: c.sel.Threshold()}
		}
		dc, err := netlink.OpenDestroy(netns.Path(name), dcfg)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("closecap: namespace %s: %w", label(name), err)
		}
		sp := &space{name: name, conn: dc, inode: dc.NetnsInode(), key: base.WithNetns(dc.NetnsInode())}
		sp.ccDef.Store("")
		sp.ccDefErr.Store("")
		c.spaces = append(c.spaces, sp)
		c.refreshCC(sp)
	}
	return c, nil
}

func label(name string) string {
	if name == "" {
		return "(own)"
	}
	return name
}

// Close releases the sockets. Run closes them itself when it returns.
func (c *Capture) Close() error {
	var errs []error
	for _, sp := range c.spaces {
		errs = append(errs, sp.conn.Close())
	}
	return errors.Join(errs...)
}

// NetnsInodes returns the inode of each namespace, in configuration order.
func (c *Capture) NetnsInodes() []uint64 {
	out := make([]uint64, len(c.spaces))
	for i, sp := range c.spaces {
		out[i] = sp.inode
	}
	return out
}

// HashInKernel reports whether the sampling hash runs in the kernel (eBPF) on every
// listener, and the first reason why not.
func (c *Capture) HashInKernel() (bool, error) {
	for _, sp := range c.spaces {
		if ok, err := sp.conn.HashInKernel(); !ok {
			return false, err
		}
	}
	return true, nil
}

// RcvBuf returns the first listener's effective receive buffer and whether it was forced.
func (c *Capture) RcvBuf() (int, bool) { return c.spaces[0].conn.RcvBuf() }

// SetRcvBuf changes every listener's receive buffer (tests shrink it).
func (c *Capture) SetRcvBuf(n int) error {
	for _, sp := range c.spaces {
		if err := sp.conn.SetRcvBuf(n); err != nil {
			return err
		}
	}
	return nil
}

// refreshCC reads the namespace's net.ipv4.tcp_congestion_control (net sysctls are those
// of the reading thread's namespace).
func (c *Capture) refreshCC(sp *space) {
	var v []byte
	err := netns.Do(netns.Path(sp.name), func() error {
		var err error
		v, err = os.ReadFile(c.cfg.ProcSys + "/net/ipv4/tcp_congestion_control")
		return err
	})
	if err != nil {
		sp.ccDefErr.Store(err.Error())
		return
	}
	sp.ccDef.Store(strings.TrimSpace(string(v)))
}

// Run listens until ctx is done and hands records to emit, from one goroutine: what each
// namespace's reader drained from its socket at one wakeup, merged with what else is
// waiting, at most MaxBatch records per call. meta is called once per batch (nil: empty
// host fields); its SampleRate is ignored: records carry the configured rate. The sockets
// are closed when Run returns.
func (c *Capture) Run(ctx context.Context, meta func() record.Meta, emit func([]record.TCPConn)) error {
	defer c.Close()
	ch := make(chan []record.TCPConn, 64)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errc := make(chan error, len(c.spaces))
	for _, sp := range c.spaces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.read(rctx, sp, ch); err != nil {
				errc <- fmt.Errorf("closecap: namespace %s: %w", label(sp.name), err)
				stop()
			}
		}()
	}
	go func() { wg.Wait(); close(ch) }()

	refresh := time.NewTicker(c.cfg.CCRefresh)
	defer refresh.Stop()
	out := func(batch []record.TCPConn) {
		var m record.Meta
		if meta != nil {
			m = meta()
		}
		m.SampleRate = c.cfg.SampleRate
		for i := range batch {
			m.StampConn(&batch[i])
		}
		c.Stats.Emitted.Add(uint64(len(batch)))
		if emit != nil {
			emit(batch)
		}
	}
	for {
		select {
		case recs, ok := <-ch:
			if !ok {
				select {
				case err := <-errc:
					return err
				default:
				}
				return ctx.Err()
			}
		merge:
			for len(recs) < c.cfg.MaxBatch {
				select {
				case more, ok := <-ch:
					if !ok {
						break merge
					}
					recs = append(recs, more...)
				default:
					break merge
				}
			}
			for len(recs) > c.cfg.MaxBatch {
				out(recs[:c.cfg.MaxBatch:c.cfg.MaxBatch])
				recs = recs[c.cfg.MaxBatch:]
			}
			out(recs)
		case <-refresh.C:
			for _, sp := range c.spaces {
				c.refreshCC(sp)
			}
			if c.cfg.Book != nil {
				c.cfg.Book.Sweep(time.Now().Add(-c.cfg.BookMaxAge).UnixMilli())
			}
		}
	}
}

// dropsEvery is how often a reader reads the kernel's drop counter without an ENOBUFS.
const dropsEvery = time.Second

// read receives one namespace's events until ctx is done, one slice of records per wakeup.
func (c *Capture) read(ctx context.Context, sp *space, ch chan<- []record.TCPConn) error {
	lastDrops := time.Now()
	countDrops := func() {
		lastDrops = time.Now()
		if d, err := sp.conn.Drops(); err == nil {
			c.Stats.Dropped.Add(d)
		}
	}
	defer countDrops()
	for ctx.Err() == nil {
		// Each wakeup costs more than the events it reads (Go's scheduler, epoll, a thread
		// switch: ~100 µs on a busy 2-core host, whether 1 or 1,000 events wait), so a reader
		// that just read lets events queue in the socket for Coalesce before it reads again.
		// The receive buffer (16 MiB, ~25,000 events) holds far more than that.
		wakeAt := time.Now().Add(c.cfg.Coalesce)
		var recs []record.TCPConn
		var now int64 // one clock read per wakeup: the events were queued within microseconds
		n, err := sp.conn.Recv(func(msg []byte) {
			if now == 0 {
				now = time.Now().UnixMilli()
			}
			if r, ok := c.event(sp, msg, now); ok {
				recs = append(recs, r)
			}
		})
		if len(recs) > 0 {
			select {
			case ch <- recs:
			case <-ctx.Done():
			}
		}
		switch {
		case errors.Is(err, netlink.ErrOverrun):
			c.Stats.Overruns.Add(1)
			countDrops()
		case err != nil:
			var de *netlink.DecodeError
			if errors.As(err, &de) {
				c.Stats.DecodeErrors.Add(1)
				continue
			}
			return err
		}
		if time.Since(lastDrops) >= dropsEvery {
			countDrops()
		}
		if d := time.Until(wakeAt); n > 0 && d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
	}
	return nil
}

// event turns one destroy message received at now (unix ms: ts_ms) into a record, or says
// why not (counted).
func (c *Capture) event(sp *space, msg []byte, now int64) (record.TCPConn, bool) {
	c.Stats.Events.Add(1)
	h, err := netlink.DecodeHeader(msg)
	if err != nil {
		c.Stats.DecodeErrors.Add(1)
		return record.TCPConn{}, false
	}
	if h.Peer.Port() == 0 || !c.portOK(h.Local.Port()) {
		c.Stats.Filtered.Add(1)
		return record.TCPConn{}, false
	}
	if !c.sel.Keep(h.Local, h.Peer) {
		return record.TCPConn{}, false
	}
	c.Stats.Sampled.Add(1)
	s, err := netlink.Decode(msg)
	if err != nil {
		c.Stats.DecodeErrors.Add(1)
		return record.TCPConn{}, false
	}
	r, ok := s.ConnRecord()
	if !ok {
		c.Stats.DecodeErrors.Add(1)
		return record.TCPConn{}, false
	}
	r.TsMs = now
	r.SockID = sp.key.SockIDOf(h.Local, h.Peer, h.Cookie)
	r.PeerPrefix = anon.PeerPrefix(h.Peer.Addr())
	var e bookEntry
	var seen bool
	if c.cfg.Book != nil {
		e, seen = c.cfg.Book.take(sp.inode, h.Cookie)
	}
	switch {
	case r.CC != "": // the event carried INET_DIAG_CONG (not on 6.18; a later kernel might)
		r.CCSource = record.CCSourceSocket
		c.Stats.CCSocket.Add(1)
	case seen:
		r.CC, r.CCSource = e.cc, record.CCSourceSocket
		if e.ccVersion != 0 {
			r.CCVersion = record.Int(e.ccVersion)
		}
		c.Stats.CCSocket.Add(1)
	default:
		if d, _ := sp.ccDef.Load().(string); d != "" {
			r.CC, r.CCSource = d, record.CCSourceNetnsDefault
			if d == "bbr2" {
				r.CCVersion = record.Int(2)
			}
			c.Stats.CCDefault.Add(1)
		} else {
			r.CCSource = record.CCSourceUnknown
			c.Stats.CCUnknown.Add(1)
		}
	}
	if seen && e.firstMs > 0 && now >= e.firstMs {
		r.SeenDurationMs = record.Int(now - e.firstMs)
	}
	r.CCImpl = c.impl.Of(r.CC, now)
	if c.cfg.Policy != nil {
		if gen, set, found := c.cfg.Policy(h.Cookie); found && set {
			r.PolicyGeneration = record.Int(int64(gen))
			c.Stats.PolicySet.Add(1)
		} else if found {
			c.Stats.PolicyFailed.Add(1)
		}
	}
	return r, true
}

// ImplCache tells which implementation runs a congestion control: "ccab-bpf" when rollout/bpfcc
// pinned it under dir (<dir>/<cc>/link), "kernel" otherwise ("" for an unknown cc). Answers are
// kept for a second (a stat per closed connection would be wasted work). The close capture
// (tcp_conn/1) and the poller (tcp_sample/1, collectors/ccmodel) both ask it.
type ImplCache struct {
	dir string
	mu  sync.Mutex
	m   map[string]implEntry
}

type implEntry struct {
	impl string
	atMs int64
}

// NewImplCache answers from the pins under dir ("": /sys/fs/bpf/ccab-cc, rollout/bpfcc's default).
func NewImplCache(dir string) *ImplCache {
	if dir == "" {
		dir = "/sys/fs/bpf/ccab-cc"
	}
	return &ImplCache{dir: dir}
}

// Of is cc's implementation at nowMs (unix ms).
func (c *ImplCache) Of(cc string, nowMs int64) string {
	if cc == "" || c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[cc]; ok && nowMs-e.atMs < 1000 && nowMs >= e.atMs {
		return e.impl
	}
	impl := record.CCImplKernel
	if _, err := os.Stat(filepath.Join(c.dir, cc, "link")); err == nil {
		impl = record.CCImplBPF
	}
	if c.m == nil {
		c.m = map[string]implEntry{}
	}
	c.m[cc] = implEntry{impl: impl, atMs: nowMs}
	return impl
}

func (c *Capture) portOK(p uint16) bool {
	if len(c.cfg.LocalPorts) == 0 {
		return true
	}
	for _, q := range c.cfg.LocalPorts {
		if q == p {
			return true
		}
	}
	return false
}
