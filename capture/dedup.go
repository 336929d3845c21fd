package capture

import (
	"encoding/binary"
	"hash/maphash"
)

// DuplicateWindow is how many recent TCP segments each Live worker
// remembers to recognise a second copy of one: the same segment captured on
// two interfaces (a pod's veth and the node's bridge) reaches the worker
// twice, from two socket readers, a few batches apart at most. A copy that
// comes later than that is not recognised; reassembly then treats it as a
// retransmission, so no byte is delivered twice, but the connection leaves
// the in-order path and Stats counts what the copy carried.
const DuplicateWindow = 4096

// dupKey is what makes two captured segments copies of one: the same
// connection and direction, sequence and acknowledgement numbers, payload
// length, IPv4 identification and TCP checksum, and the rest of the TCP
// header (flags, window, options), hashed. A retransmission differs (Linux
// gives every IPv4 packet a new ID, and the timestamp option changes); the
// checksum alone would not do, since a packet the host sends carries only a
// partial checksum (the NIC completes it) and that leaves the header and
// payload out. A segment that differs in none of these carries the very
// same bytes, so dropping it loses nothing.
type dupKey struct {
	key      flowKey
	fromLo   bool
	ipID     uint16
	checksum uint16
	seq, ack uint32
	length   uint32
	rest     uint64
}

// recentSet remembers the last keys it was given, at most its capacity,
// the oldest forgotten first: the duplicate checks of Live (dupWindow) and
// of a merged read of several files (readMerged).
type recentSet[K comparable] struct {
	keys map[K]struct{}
	ring []K
	next int // where the next key goes in ring, once it is full
}

func newRecentSet[K comparable](size int) recentSet[K] {
	return recentSet[K]{keys: make(map[K]struct{}, size), ring: make([]K, 0, size)}
}

// seen reports whether k is among the remembered keys, and remembers it
// otherwise.
func (r *recentSet[K]) seen(k K) bool {
	if _, ok := r.keys[k]; ok {
		return true
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, k)
	} else {
		delete(r.keys, r.ring[r.next])
		r.ring[r.next] = k
		r.next = (r.next + 1) % len(r.ring)
	}
	r.keys[k] = struct{}{}
	return false
}

// dupWindow remembers the last DuplicateWindow segments a worker saw.
type dupWindow struct {
	recentSet[dupKey]
	seed maphash.Seed
	// dropped counts the copies dropped.
	dropped uint64
}

func newDupWindow(size int) *dupWindow {
	return &dupWindow{recentSet: newRecentSet[dupKey](size), seed: maphash.MakeSeed()}
}

// seen reports whether s, a segment of b, is a copy of one already handed to
// the worker, and remembers it otherwise.
func (d *dupWindow) seen(b *batch, s *segment) bool {
	hdr := b.arena[s.off:s.body]
	k := dupKey{key: s.key, fromLo: s.fromLo, ipID: s.ipID, seq: s.seq, length: uint32(s.end - s.body)}
	if len(hdr) >= 20 {
		k.ack = binary.BigEndian.Uint32(hdr[8:12])
		k.checksum = binary.BigEndian.Uint16(hdr[16:18])
		var h maphash.Hash
		h.SetSeed(d.seed)
		h.Write(hdr[12:16]) // data offset, flags, window
		h.Write(hdr[18:])   // urgent pointer, options
		k.rest = h.Sum64()
	}
	return d.check(k)
}

func (d *dupWindow) check(k dupKey) bool {
	if d.recentSet.seen(k) {
		d.dropped++
		return true
	}
	return false
}
