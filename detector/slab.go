package detector

// slabSize is how many values a slab allocates at once.
const slabSize = 4

// slab hands out pointers to values allocated slabSize at a time. A session
// opens a stream for nearly every request (each POST answered with SSE),
// and exchanges point at them; one allocation for several saves most of
// those allocations. A slab belongs to one session, so its arrays go with
// the session's state.
type slab[T any] struct {
	free []T
}

// new returns a pointer to a zero T.
func (b *slab[T]) new() *T {
	if len(b.free) == 0 {
		b.free = make([]T, slabSize)
	}
	p := &b.free[0]
	b.free = b.free[1:]
	return p
}
