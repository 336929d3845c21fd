package decode

// Header values repeat: the same host, content types, session id and
// protocol version on every request of a session. Interning them per worker
// saves an allocation for each, which matters at hundreds of thousands of
// exchanges a second.
const (
	// maxInternLen bounds the values interned; longer ones are copied.
	maxInternLen = 128
	// maxInterned bounds the table; when full it is cleared, so memory stays
	// bounded whatever the traffic (a cleared table only costs allocations).
	maxInterned = 4096
)

// interner hands out one shared string per distinct short value. Not safe
// for concurrent use: each worker has its own.
type interner struct {
	m map[string]string
}

func (in *interner) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > maxInternLen {
		return string(b)
	}
	if s, ok := in.m[string(b)]; ok {
		return s
	}
	if in.m == nil {
		in.m = make(map[string]string, 64)
	} else if len(in.m) >= maxInterned {
		clear(in.m)
	}
	s := string(b)
	in.m[s] = s
	return s
}
