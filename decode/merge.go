package decode

// runHeap is the merger's buffer: a min-heap of sorted runs of items rather
// than of single items. A worker's batch is almost always already in order
// (it emits as capture time advances), so it becomes one run; the heap then
// orders a few thousand run heads that stay in cache instead of a million
// items that do not, and a pop is O(log runs).
type runHeap struct {
	runs []*sortedRun
	n    int // items held
	// spare holds emptied batches for the workers to fill again: a batch
	// is a few KiB, and one per 256 observations was a good part of the
	// decoder's allocated bytes.
	spare [][]item
}

// maxSpareBatches bounds runHeap.spare.
const maxSpareBatches = 64

type sortedRun struct {
	items []item
	pos   int  // items[pos:] are still held
	whole bool // items is a worker's whole batch, reusable once emptied
}

func (r *sortedRun) head() *item { return &r.items[r.pos] }

func (h *runHeap) len() int { return h.n }

// push takes ownership of items, cut into maximal sorted runs.
func (h *runHeap) push(items []item) {
	if len(items) == 0 {
		return
	}
	if isSortedRun(items) {
		// The usual case: the batch is one run and can be reused whole.
		h.pushRun(&sortedRun{items: items, whole: true})
		h.n += len(items)
		return
	}
	start := 0
	for i := 1; i <= len(items); i++ {
		if i == len(items) || items[i].less(&items[i-1]) {
			h.pushRun(&sortedRun{items: items[start:i:i]})
			start = i
		}
	}
	h.n += len(items)
}

func isSortedRun(items []item) bool {
	for i := 1; i < len(items); i++ {
		if items[i].less(&items[i-1]) {
			return false
		}
	}
	return true
}

// takeSpare returns an emptied batch to fill, or nil.
func (h *runHeap) takeSpare() []item {
	n := len(h.spare)
	if n == 0 {
		return nil
	}
	b := h.spare[n-1]
	h.spare[n-1] = nil
	h.spare = h.spare[:n-1]
	return b
}

func (h *runHeap) pushRun(r *sortedRun) {
	h.runs = append(h.runs, r)
	i := len(h.runs) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h.runs[i].head().less(h.runs[parent].head()) {
			break
		}
		h.runs[i], h.runs[parent] = h.runs[parent], h.runs[i]
		i = parent
	}
}

// min is the smallest item held; only valid when len() > 0.
func (h *runHeap) min() *item { return h.runs[0].head() }

// pop removes and returns the smallest item; only valid when len() > 0.
func (h *runHeap) pop() item {
	r := h.runs[0]
	it := r.items[r.pos]
	r.items[r.pos] = item{} // let the observation go once delivered
	r.pos++
	h.n--
	if r.pos == len(r.items) {
		if r.whole && len(h.spare) < maxSpareBatches {
			// Every item was cleared as it was popped.
			h.spare = append(h.spare, r.items[:0])
		}
		last := len(h.runs) - 1
		h.runs[0] = h.runs[last]
		h.runs[last] = nil
		h.runs = h.runs[:last]
	}
	h.siftDown()
	return it
}

func (h *runHeap) siftDown() {
	runs := h.runs
	i := 0
	for {
		l := 2*i + 1
		if l >= len(runs) {
			return
		}
		m := l
		if r := l + 1; r < len(runs) && runs[r].head().less(runs[l].head()) {
			m = r
		}
		if !runs[m].head().less(runs[i].head()) {
			return
		}
		runs[i], runs[m] = runs[m], runs[i]
		i = m
	}
}
