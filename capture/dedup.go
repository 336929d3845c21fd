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
// of a merged read of several files (readMerged). Keys are found by a
// 64-bit fingerprint and then compared whole: a map keyed by the
// fingerprint costs a fraction of one keyed by a large struct (hashing and
// comparing all of its bytes three times per packet), and two keys that
// share a fingerprint are told apart (the older is then not recognised: a
// copy missed, which loses nothing).
type recentSet[K comparable] struct {
	index map[uint64]int32 // fingerprint -> its key's place in ring
	ring  []recentKey[K]
	next  int // where the next key goes in ring, once it is full
}

type recentKey[K comparable] struct {
	print uint64
	key   K
}

func newRecentSet[K comparable](size int) recentSet[K] {
	return recentSet[K]{index: make(map[uint64]int32, size), ring: make([]recentKey[K], 0, size)}
}

// seen reports whether k (of fingerprint print) is among the remembered
// keys, and remembers it otherwise.
func (r *recentSet[K]) seen(print uint64, k K) bool {
	if i, ok := r.index[print]; ok && r.ring[i].key == k {
		return true
	}
	slot := len(r.ring)
	if slot < cap(r.ring) {
		r.ring = append(r.ring, recentKey[K]{print, k})
	} else {
		slot = r.next
		if old := r.ring[slot].print; r.index[old] == int32(slot) {
			delete(r.index, old)
		}
		r.ring[slot] = recentKey[K]{print, k}
		r.next = (r.next + 1) % len(r.ring)
	}
	r.index[print] = int32(slot)
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
		// data offset, flags, window; urgent pointer, options
		k.rest = maphash.Bytes(d.seed, hdr[18:]) ^ uint64(binary.BigEndian.Uint32(hdr[12:16]))
	}
	return d.check(k)
}

func (d *dupWindow) check(k dupKey) bool {
	if d.recentSet.seen(k.fingerprint(), k) {
		d.dropped++
		return true
	}
	return false
}

// fingerprint mixes every field of k into 64 bits (splitmix64's finalizer
// after each word), for recentSet's index.
func (k *dupKey) fingerprint() uint64 {
	h := mix64(k.key.hash() ^ uint64(k.seq)<<32 ^ uint64(k.ack))
	h = mix64(h ^ uint64(k.length)<<32 ^ uint64(k.ipID)<<16 ^ uint64(k.checksum) ^ boolBit(k.fromLo)<<63)
	return mix64(h ^ k.rest)
}

func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
