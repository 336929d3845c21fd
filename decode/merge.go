package decode

// runHeap is the merger's buffer: a min-heap of sorted runs of items rather
// than of single items. A worker's batch is almost always already in order
// (it emits as capture time advances), so it becomes one run; the heap then
// orders a few thousand run heads that stay in cache instead of a million
// items that do not, and a pop is O(log runs).
//
// A worker's batches usually also follow each other in order, so a batch
// that starts at or after the end of its worker's last run is chained to that
// run instead of becoming a run of its own (pushFrom). The heap then holds
// about one run per worker rather than one per batch in the reorder window
// (hundreds), and a pop, which nearly always switches between the workers'
// runs, sifts through a heap of that size.
type runHeap struct {
	runs []*sortedRun
	n    int // items held
	// tails[src] is the run that batches from src are chained to, while
	// it is in the heap.
	tails []*sortedRun
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
	// next are whole batches that follow items in order, taken in turn
	// once items is emptied.
	next [][]item
	src  int // the tails index it is chained from, or -1
}

func (r *sortedRun) head() *item { return &r.items[r.pos] }

// last is the largest item of the run.
func (r *sortedRun) last() *item {
	if n := len(r.next); n > 0 {
		b := r.next[n-1]
		return &b[len(b)-1]
	}
	return &r.items[len(r.items)-1]
}

func (h *runHeap) len() int { return h.n }

// push takes ownership of items, cut into maximal sorted runs.
func (h *runHeap) push(items []item) { h.pushFrom(items, -1) }

// pushFrom is push for items from source src (a worker; -1 for none): a
// sorted batch that starts at or after the end of src's last run still held
// is chained to that run.
func (h *runHeap) pushFrom(items []item, src int) {
	if len(items) == 0 {
		return
	}
	h.n += len(items)
	var tail *sortedRun
	if src >= 0 && src < len(h.tails) {
		tail = h.tails[src]
	}
	if isSortedRun(items) {
		// The usual case: the batch is one run and can be reused whole.
		if tail != nil && !items[0].less(tail.last()) {
			// Its head is not the run's, so the heap is unchanged.
			tail.next = append(tail.next, items)
			return
		}
		r := &sortedRun{items: items, whole: true, src: src}
		h.pushRun(r)
		h.setTail(src, r)
		return
	}
	start := 0
	for i := 1; i <= len(items); i++ {
		if i == len(items) || items[i].less(&items[i-1]) {
			r := &sortedRun{items: items[start:i:i], src: src}
			h.pushRun(r)
			h.setTail(src, r)
			start = i
		}
	}
}

// setTail makes r the run src's batches are chained to.
func (h *runHeap) setTail(src int, r *sortedRun) {
	if src < 0 {
		r.src = -1
		return
	}
	for len(h.tails) <= src {
		h.tails = append(h.tails, nil)
	}
	if old := h.tails[src]; old != nil {
		old.src = -1
	}
	h.tails[src] = r
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
		if len(r.next) > 0 {
			// The run goes on with its next batch, whose head is
			// larger: sift it down.
			r.items, r.pos, r.whole = r.next[0], 0, true
			r.next[0] = nil
			r.next = r.next[1:]
			if len(r.next) == 0 {
				r.next = nil
			}
			h.siftDown()
			return it
		}
		if r.src >= 0 {
			h.tails[r.src] = nil
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
