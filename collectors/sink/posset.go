package sink

import "sort"

// PosSet is a set of (stream, position) pairs: which records a place (Kafka, the spool)
// already holds. It is built once, then only queried.
type PosSet struct {
	m      map[string][]int64
	sorted bool
	n      int
}

// NewPosSet returns an empty set.
func NewPosSet() *PosSet { return &PosSet{m: map[string][]int64{}, sorted: true} }

// Add adds (stream, pos).
func (s *PosSet) Add(stream string, pos int64) {
	s.m[stream] = append(s.m[stream], pos)
	s.sorted = false
	s.n++
}

// Len is the number of pairs added.
func (s *PosSet) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

func (s *PosSet) seal() {
	if s.sorted {
		return
	}
	for _, ps := range s.m {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	s.sorted = true
}

// Has reports whether (stream, pos) is in the set. A nil set is empty.
func (s *PosSet) Has(stream string, pos int64) bool {
	if s == nil || s.n == 0 {
		return false
	}
	s.seal()
	ps := s.m[stream]
	i := sort.Search(len(ps), func(i int) bool { return ps[i] >= pos })
	return i < len(ps) && ps[i] == pos
}
