package decode

import (
	"encoding/binary"
	"math/bits"
)

// xxh64 is XXH64 (seed 0), streaming. Event.DataHash uses it: it only has to
// tell payloads apart within one session, not resist a forger, and at one
// hash per SSE event SHA-256 and its 64 hex digits cost more than the rest of
// the event's bookkeeping. Standard library only, so it is written out here
// (the algorithm is public domain; see github.com/Cyan4973/xxHash).
type xxh64 struct {
	v     [4]uint64
	total uint64
	mem   [32]byte
	n     int // bytes held in mem
}

const (
	xxPrime1 uint64 = 11400714785074694791
	xxPrime2 uint64 = 14029467366897019727
	xxPrime3 uint64 = 1609587929392839161
	xxPrime4 uint64 = 9650029242287828579
	xxPrime5 uint64 = 2870177450012600261
)

func (x *xxh64) reset() {
	// Seed 0: the constants wrap around, which a constant expression may not.
	p1, p2 := xxPrime1, xxPrime2
	*x = xxh64{v: [4]uint64{p1 + p2, p2, 0, -p1}}
}

func xxRound(acc, input uint64) uint64 {
	acc += input * xxPrime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxPrime1
}

func xxMergeRound(acc, val uint64) uint64 {
	val = xxRound(0, val)
	acc ^= val
	return acc*xxPrime1 + xxPrime4
}

// stripes consumes whole 32-byte stripes of b and returns the rest.
func (x *xxh64) stripes(b []byte) []byte {
	v1, v2, v3, v4 := x.v[0], x.v[1], x.v[2], x.v[3]
	for len(b) >= 32 {
		v1 = xxRound(v1, binary.LittleEndian.Uint64(b[0:8]))
		v2 = xxRound(v2, binary.LittleEndian.Uint64(b[8:16]))
		v3 = xxRound(v3, binary.LittleEndian.Uint64(b[16:24]))
		v4 = xxRound(v4, binary.LittleEndian.Uint64(b[24:32]))
		b = b[32:]
	}
	x.v = [4]uint64{v1, v2, v3, v4}
	return b
}

func (x *xxh64) write(b []byte) {
	x.total += uint64(len(b))
	if x.n > 0 {
		k := copy(x.mem[x.n:], b)
		x.n += k
		b = b[k:]
		if x.n < 32 {
			return
		}
		x.stripes(x.mem[:])
		x.n = 0
	}
	b = x.stripes(b)
	x.n = copy(x.mem[:], b)
}

func (x *xxh64) sum() uint64 {
	var h uint64
	if x.total >= 32 {
		v1, v2, v3, v4 := x.v[0], x.v[1], x.v[2], x.v[3]
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = xxMergeRound(h, v1)
		h = xxMergeRound(h, v2)
		h = xxMergeRound(h, v3)
		h = xxMergeRound(h, v4)
	} else {
		h = x.v[2] + xxPrime5
	}
	h += x.total
	b := x.mem[:x.n]
	for ; len(b) >= 8; b = b[8:] {
		h ^= xxRound(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}

// xxSum64 is the XXH64 of b in one call.
func xxSum64(b []byte) uint64 {
	var x xxh64
	x.reset()
	x.write(b)
	return x.sum()
}
