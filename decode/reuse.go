// Reused observations (Config.ReuseObservations): the decoder's most common
// outputs come from free lists and go back once delivered.

package decode

import (
	"sync"
	"unsafe"
)

// The free lists' shape. A list moves values between the delivering
// goroutine, which hands them back, and the workers, which take them, a
// chunk of reuseChunk at a time, so its lock is taken once per chunk. It
// keeps at most maxFreeChunks chunks; values past that go to the collector.
// (sync.Pool did this job before: it cost more per value, and every
// collection emptied it, so the values after a collection were new ones.)
const (
	reuseChunk    = 256
	maxFreeChunks = 16
)

// freeList holds chunks of zeroed values of one observation type, and the
// emptied chunks' slices for reuse.
type freeList[T any] struct {
	mu          sync.Mutex
	full, empty [][]*T
}

// take swaps a worker's emptied chunk for a full one; it returns an empty
// chunk when the list has none.
func (f *freeList[T]) take(emptied []*T) []*T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.full); n > 0 {
		c := f.full[n-1]
		f.full[n-1] = nil
		f.full = f.full[:n-1]
		if emptied != nil && len(f.empty) < maxFreeChunks {
			f.empty = append(f.empty, emptied[:0])
		}
		return c
	}
	return emptied[:0]
}

// give swaps a full chunk for an emptied one to fill next (nil when the
// list has none).
func (f *freeList[T]) give(full []*T) []*T {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.full) < maxFreeChunks {
		f.full = append(f.full, full)
	} else {
		clear(full) // the list is full: these go to the collector
		return full[:0]
	}
	if n := len(f.empty); n > 0 {
		c := f.empty[n-1]
		f.empty[n-1] = nil
		f.empty = f.empty[:n-1]
		return c
	}
	return nil
}

// spares is one goroutine's side of a free list: the values it can take
// (a worker), or those it handed back and has not given yet (the
// delivering goroutine).
type spares[T any] struct{ vals []*T }

func (s *spares[T]) get(f *freeList[T]) *T {
	if len(s.vals) == 0 {
		if s.vals = f.take(s.vals); len(s.vals) == 0 {
			return new(T)
		}
	}
	n := len(s.vals) - 1
	v := s.vals[n]
	s.vals[n] = nil
	s.vals = s.vals[:n]
	return v
}

// put zeroes v, so that the list keeps nothing of its exchange alive.
func (s *spares[T]) put(f *freeList[T], v *T) {
	var zero T
	*v = zero
	if s.vals == nil {
		s.vals = make([]*T, 0, reuseChunk)
	}
	if s.vals = append(s.vals, v); len(s.vals) == reuseChunk {
		s.vals = f.give(s.vals)
	}
}

// freeLists are a pipeline's free lists, one per reused type.
type freeLists struct {
	events    freeList[eventObservation]
	bodies    freeList[bodyObservation]
	ends      freeList[endObservation]
	responses freeList[responseObservation]
	requests  freeList[requestObservation]
}

// spareSet is one goroutine's side of every free list.
type spareSet struct {
	events    spares[eventObservation]
	bodies    spares[bodyObservation]
	ends      spares[endObservation]
	responses spares[responseObservation]
	requests  spares[requestObservation]
}

// newOf returns a zeroed value, from the free list when the pipeline
// reuses observations.
func newOf[T any](w *worker, s *spares[T], f *freeList[T]) *T {
	if w.cfg.ReuseObservations {
		return s.get(f)
	}
	return new(T)
}

func (w *worker) eventObservation() *eventObservation {
	return newOf(w, &w.spare.events, &w.p.reused.events)
}
func (w *worker) bodyObservation() *bodyObservation {
	return newOf(w, &w.spare.bodies, &w.p.reused.bodies)
}
func (w *worker) endObservation() *endObservation { return newOf(w, &w.spare.ends, &w.p.reused.ends) }
func (w *worker) responseObservation() *responseObservation {
	return newOf(w, &w.spare.responses, &w.p.reused.responses)
}
func (w *worker) requestObservation() *requestObservation {
	return newOf(w, &w.spare.requests, &w.p.reused.requests)
}

// dropBody hands back a body observation the worker made and did not emit.
func (w *worker) dropBody(bo *bodyObservation) { w.spare.bodies.put(&w.p.reused.bodies, bo) }

// release hands a delivered observation back to its free list if it came
// from one; the delivering goroutine's only. o is the first field of its
// event, body or end observation, so o's address is that observation's. An
// End is the last observation of its exchange to point to its request and
// response (emitEnd), so they go back with it.
func (p *Pipeline) release(o *Observation) {
	if !o.reusable {
		return
	}
	b, f := &p.back, &p.reused
	switch o.Kind {
	case KindEvent:
		b.events.put(&f.events, (*eventObservation)(unsafe.Pointer(o)))
	case KindBody:
		b.bodies.put(&f.bodies, (*bodyObservation)(unsafe.Pointer(o)))
	case KindEnd:
		eo := (*endObservation)(unsafe.Pointer(o))
		if eo.resp != nil {
			b.responses.put(&f.responses, eo.resp)
		}
		if eo.req != nil {
			b.requests.put(&f.requests, eo.req)
		}
		b.ends.put(&f.ends, eo)
	}
}
