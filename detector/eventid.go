package detector

import "strings"

// idShape is a known event-id format. Ids are opaque in the spec; a shape
// only adds order the observer could not see (which stream an id belongs to,
// its position). The per-session index is the ground truth; shapes refine it.
type idShape uint8

const (
	shapeNone    idShape = iota // no id seen yet
	shapeGoSDK                  // go-sdk: <stream>_<index>, index dense per stream from 0
	shapeTS                     // TypeScript example store: <stream>_<epoch-ms>_<8 base36>
	shapeDecimal                // mcp-go: one decimal counter per server process
	shapeOpaque                 // anything else (Python: random UUIDs): wire order only
	shapeMixed                  // ids of several shapes in one session: trust no shape
)

func (s idShape) String() string {
	return [...]string{"none", "go-sdk", "typescript", "decimal", "opaque", "mixed"}[s]
}

// parsedID is what a shape says about one id.
type parsedID struct {
	shape  idShape
	prefix string // stream part (go-sdk, TypeScript); "" for the go-sdk GET stream
	num    uint64 // go-sdk index, TypeScript epoch-ms, or the decimal value
}

// maxDecimalDigits keeps decimal parsing inside uint64.
const maxDecimalDigits = 19

// parseDecimal accepts 1-19 ASCII digits.
func parseDecimal(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > maxDecimalDigits {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}

func isBase36Lower(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

// tsEpochDigits is the length of a millisecond epoch from 2001 to 2286.
const tsEpochDigits = 13

// tsGetStreamPrefix starts the ids the TypeScript SDK's example event store
// mints on the standalone GET stream, a stream that store cannot replay.
const tsGetStreamPrefix = "_GET_stream_"

// parseEventID classifies id. It does not allocate: prefix is a substring.
func parseEventID(id string) parsedID {
	if v, ok := parseDecimal(id); ok {
		return parsedID{shape: shapeDecimal, num: v}
	}
	last := strings.LastIndexByte(id, '_')
	if last < 0 {
		return parsedID{shape: shapeOpaque}
	}
	// TypeScript: <stream>_<13 digits>_<8 base36>. The stream may itself
	// contain '_' (the GET stream is "_GET_stream").
	if tail := id[last+1:]; len(tail) == 8 && isBase36Lower(tail) && last > tsEpochDigits {
		mid := id[:last]
		if sep := strings.LastIndexByte(mid, '_'); sep >= 0 && len(mid)-sep-1 == tsEpochDigits {
			if ms, ok := parseDecimal(mid[sep+1:]); ok {
				return parsedID{shape: shapeTS, prefix: mid[:sep], num: ms}
			}
		}
	}
	// go-sdk: exactly one '_' (its parser splits on every '_').
	if strings.IndexByte(id, '_') == last {
		if v, ok := parseDecimal(id[last+1:]); ok {
			return parsedID{shape: shapeGoSDK, prefix: id[:last], num: v}
		}
	}
	return parsedID{shape: shapeOpaque}
}

// merge folds one more id's shape into a session's shape.
func (s idShape) merge(next idShape) idShape {
	switch {
	case s == shapeNone:
		return next
	case s == next:
		return s
	default:
		return shapeMixed
	}
}

// provenCounters is how many streams must begin at index 0 before a
// session's go-sdk-shaped ids are read as one dense counter per stream.
const provenCounters = 2

// countersPerStream says whether the wire has proven that session s's
// go-sdk-shaped ids count each stream from 0 (see session.zeroStarts).
// A store that looks alike (<stream>_<n> with one counter shared by all
// streams, or random numbers) then never has its ids read as dense or
// ordered: what such ids skip or repeat proves nothing.
func (s *session) countersPerStream() bool { return s.zeroStarts >= provenCounters }

// orderProven says whether the wire has proven the order session s's id
// shape promises: per-stream counters for go-sdk ids, a counter for
// decimal ones (see session.decCounter).
func (s *session) orderProven() bool {
	switch s.shape {
	case shapeGoSDK:
		return s.countersPerStream()
	case shapeDecimal:
		return s.decCounter
	}
	return false
}

// hasStreamPrefix says whether ids of this shape name their stream.
func (s idShape) hasStreamPrefix() bool { return s == shapeGoSDK || s == shapeTS }

// An id at least minDrawnIDBytes long with at least minDrawnIDSymbols
// distinct bytes is taken to hold a part drawn at random (a UUID, go-sdk's
// 26-character stream names): two sessions do not mint the same one,
// whatever the server. Counters (mcp-go's decimal ids, a go-sdk stream's
// _0, _1, ... in older releases) repeat across sessions and server
// processes, so one of them seen in one session may be another's own.
const (
	minDrawnIDBytes   = 16
	minDrawnIDSymbols = 10
)

// drawnAtRandom says whether id looks drawn at random (see minDrawnIDBytes).
func drawnAtRandom(id string) bool {
	if len(id) < minDrawnIDBytes {
		return false
	}
	var seen [256]bool
	n := 0
	for i := 0; i < len(id); i++ {
		if !seen[id[i]] {
			seen[id[i]] = true
			n++
		}
	}
	return n >= minDrawnIDSymbols
}
