package decode

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// MinHashKeyBytes is the shortest hash key accepted: a key guessed as
// easily as the values it protects protects nothing.
const MinHashKeyBytes = 16

// digester hashes user data (Authorization values, tool arguments, SSE
// event data) as HMAC-SHA-256 under the deployment's hash key, so that a
// stored hash of a low-entropy value (a PIN, a card number) cannot be
// reversed by guessing without the key. Without a key it is plain SHA-256:
// reproducible values for tests and tools; the CLI always gives a key.
// Not safe for concurrent use: one per worker (in its Peeker).
type digester struct {
	mac   hash.Hash
	keyed bool
	sum   [sha256.Size]byte
}

func newDigester(key []byte) *digester {
	if len(key) == 0 {
		return &digester{mac: sha256.New()}
	}
	return &digester{mac: hmac.New(sha256.New, key), keyed: true}
}

func (d *digester) digest(b []byte) [sha256.Size]byte {
	d.mac.Reset()
	d.mac.Write(b)
	d.mac.Sum(d.sum[:0])
	return d.sum
}

// keyed64 keys a 64-bit content hash (XXH64 of event data, fast enough
// for every event but no secret): the first 8 bytes of its digest. Equal
// data still gives equal values within a deployment. Without a key, h
// itself.
func (d *digester) keyed64(h uint64) uint64 {
	if !d.keyed {
		return h
	}
	var raw [8]byte
	binary.BigEndian.PutUint64(raw[:], h)
	sum := d.digest(raw[:])
	return binary.BigEndian.Uint64(sum[:8])
}

// HashValue is the hex keyed SHA-256 (HashKey) of v as given: for values
// that arrive already reduced to text, such as a span's hash of an event's
// data, so that what is stored is keyed like every other hash.
func (pk *Peeker) HashValue(v []byte) string {
	return hexDigest(pk.digester().digest(v))
}

// HashJSON is the hex keyed SHA-256 of the JSON value v in canonical form
// (the hash of a call's arguments, however they were spelled).
func (pk *Peeker) HashJSON(v []byte) string { return pk.hash(v) }
