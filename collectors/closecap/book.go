package closecap

import (
	"sync"

	"github.com/ccab-dev/ccab/collectors/record"
)

// Book remembers, per live connection the poller sampled, what a destroy event does not
// carry: the socket's own congestion control (INET_DIAG_CONG of the poller's dump), its
// BBR version, and when the poller first saw it. Entries are keyed by the network
// namespace's inode and the socket cookie (the same cookie in the dump and in the destroy
// event; never reused while the socket lives). A destroy event takes its entry out; entries
// of connections whose events were lost are swept after MaxAge without a sighting.
// Safe for concurrent use.
type Book struct {
	mu  sync.Mutex
	m   map[bookKey]*bookEntry
	max int
}

type bookKey struct{ netns, cookie uint64 }

type bookEntry struct {
	cc        string
	ccVersion int64 // 0: unknown
	firstMs   int64 // first poll that saw the connection
	lastMs    int64 // last poll that saw it
}

// DefaultBookMax bounds the Book (about 100 bytes an entry).
const DefaultBookMax = 200000

// NewBook returns an empty Book holding at most max entries (0: DefaultBookMax).
func NewBook(max int) *Book {
	if max <= 0 {
		max = DefaultBookMax
	}
	return &Book{m: map[bookKey]*bookEntry{}, max: max}
}

// Observe records a poller's sample of the socket with that cookie in namespace netns
// (sampler.Config.Observe).
func (b *Book) Observe(netns, cookie uint64, r *record.TCPSample) {
	if r.CC == "" {
		return
	}
	k := bookKey{netns, cookie}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[k]
	if e == nil {
		if len(b.m) >= b.max {
			return
		}
		e = &bookEntry{firstMs: r.TsMs}
		b.m[k] = e
	}
	e.cc, e.lastMs = r.CC, r.TsMs
	e.ccVersion = 0
	if r.CCVersion != nil {
		e.ccVersion = *r.CCVersion
	}
}

// take removes and returns the entry of a destroyed socket.
func (b *Book) take(netns, cookie uint64) (bookEntry, bool) {
	k := bookKey{netns, cookie}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[k]
	if e == nil {
		return bookEntry{}, false
	}
	delete(b.m, k)
	return *e, true
}

// Sweep forgets connections the poller last saw before beforeMs (their destroy event was
// lost, or they are not sampled any more); it returns how many.
func (b *Book) Sweep(beforeMs int64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, e := range b.m {
		if e.lastMs < beforeMs {
			delete(b.m, k)
			n++
		}
	}
	return n
}

// Len returns the number of entries.
func (b *Book) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}
