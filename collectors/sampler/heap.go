package sampler

// maxHeap holds the candidates with the smallest hashes seen so far, largest on top, so
// that a smaller hash can replace the largest in O(log k).
type maxHeap struct{ items []candidate }

func (h *maxHeap) Len() int           { return len(h.items) }
func (h *maxHeap) max() uint64        { return h.items[0].hash }
func (h *maxHeap) less(i, j int) bool { return h.items[i].hash > h.items[j].hash }

func (h *maxHeap) push(c candidate) {
	h.items = append(h.items, c)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

// replaceMax swaps the top for c and returns the old top.
func (h *maxHeap) replaceMax(c candidate) candidate {
	out := h.items[0]
	h.items[0] = c
	n := len(h.items)
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h.items[i], h.items[m] = h.items[m], h.items[i]
		i = m
	}
	return out
}
