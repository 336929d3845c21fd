// Reused observations (Config.ReuseObservations): the decoder's most common
// outputs come from pools and go back once delivered.

package decode

import (
	"sync"
	"unsafe"
)

// pool holds zeroed values of one observation type, delivered and handed
// back.
type pool[T any] struct{ sync.Pool }

func (p *pool[T]) get() *T {
	if v, ok := p.Get().(*T); ok {
		return v
	}
	return new(T)
}

// put zeroes v, so that the pool keeps nothing of its exchange alive.
func (p *pool[T]) put(v *T) {
	var zero T
	*v = zero
	p.Put(v)
}

var (
	eventPool    pool[eventObservation]
	bodyPool     pool[bodyObservation]
	endPool      pool[endObservation]
	responsePool pool[responseObservation]
	requestPool  pool[requestObservation]
)

// newOf returns a zeroed value, from p when the pipeline reuses
// observations.
func newOf[T any](w *worker, p *pool[T]) *T {
	if w.cfg.ReuseObservations {
		return p.get()
	}
	return new(T)
}

func (w *worker) eventObservation() *eventObservation { return newOf(w, &eventPool) }
func (w *worker) bodyObservation() *bodyObservation   { return newOf(w, &bodyPool) }
func (w *worker) endObservation() *endObservation     { return newOf(w, &endPool) }
func (w *worker) responseObservation() *responseObservation {
	return newOf(w, &responsePool)
}
func (w *worker) requestObservation() *requestObservation { return newOf(w, &requestPool) }

// release hands a delivered observation back to its pool if it came from
// one. o is the first field of its event, body or end observation, so o's
// address is that observation's. An End is the last observation of its
// exchange to point to its request and response (emitEnd), so they go back
// with it.
func release(o *Observation) {
	if !o.reusable {
		return
	}
	switch o.Kind {
	case KindEvent:
		eventPool.put((*eventObservation)(unsafe.Pointer(o)))
	case KindBody:
		bodyPool.put((*bodyObservation)(unsafe.Pointer(o)))
	case KindEnd:
		eo := (*endObservation)(unsafe.Pointer(o))
		if eo.resp != nil {
			responsePool.put(eo.resp)
		}
		if eo.req != nil {
			requestPool.put(eo.req)
		}
		endPool.put(eo)
	}
}
