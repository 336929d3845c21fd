package decode

import (
	"crypto/sha256"
	"encoding/hex"
)

// Identifiers the detector keys its state on (Mcp-Session-Id, Last-Event-ID,
// SSE event ids) are kept whole up to MaxIDBytes. A longer one, which no
// SDK makes but a hostile or broken peer may send (a 60 KB session id on
// every request), is replaced by its first idPrefixBytes bytes, "~", and
// the hex SHA-256 of the whole: the same long id always gives the same
// short one, so a resume still matches the event it names, and every id
// the detector, the merger and the sink hold is at most BoundedIDBytes.
const (
	MaxIDBytes     = 256
	idPrefixBytes  = 64
	BoundedIDBytes = idPrefixBytes + 1 + 2*sha256.Size
)

// boundedID is b as a string, or its short form when it is over
// MaxIDBytes; in interns the short ones.
func boundedID(in *interner, b []byte) string {
	if len(b) <= MaxIDBytes {
		return in.str(b)
	}
	return longID(b)
}

func longID(b []byte) string {
	sum := sha256.Sum256(b)
	out := make([]byte, 0, BoundedIDBytes)
	out = append(out, b[:idPrefixBytes]...)
	out = append(out, '~')
	return string(hex.AppendEncode(out, sum[:]))
}

// BoundID is boundedID for ids that other sources (spans) read: s, or its
// short form when it is over MaxIDBytes.
func BoundID(s string) string {
	if len(s) <= MaxIDBytes {
		return s
	}
	return longID([]byte(s))
}
