package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"strconv"
)

// A small validating JSON scanner for the JSON-RPC peek. encoding/json
// decodes every value it passes over through reflection; the peek only needs
// a handful of top-level members, so it walks the structure and slices out
// the raw values it wants. Member names are matched exactly (JSON-RPC is
// case-sensitive, unlike encoding/json's struct matching).

var errJSONSyntax = errors.New("decode: invalid JSON")

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the index just past the JSON value that starts at b[i].
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return i, errJSONSyntax
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		if depth >= maxCanonDepth {
			return i, errCanonDepth
		}
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, nil
		}
		for {
			var err error
			if closer == '}' {
				if i >= len(b) || b[i] != '"' {
					return i, errJSONSyntax
				}
				if i, err = skipString(b, i); err != nil {
					return i, err
				}
				i = skipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return i, errJSONSyntax
				}
				i = skipSpace(b, i+1)
			}
			if i, err = skipValue(b, i, depth+1); err != nil {
				return i, err
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, errJSONSyntax
			}
			if b[i] == closer {
				return i + 1, nil
			}
			if b[i] != ',' {
				return i, errJSONSyntax
			}
			i = skipSpace(b, i+1)
		}
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	}
	return i, errJSONSyntax
}

func skipLiteral(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return i, errJSONSyntax
	}
	return i + len(lit), nil
}

func skipString(b []byte, i int) (int, error) {
	i++
	for {
		i = plainString(b, i)
		if i >= len(b) || b[i] < 0x20 {
			return len(b), errJSONSyntax
		}
		if b[i] == '"' {
			return i + 1, nil
		}
		if i+1 >= len(b) {
			return len(b), errJSONSyntax
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if len(b)-i < 6 {
				return len(b), errJSONSyntax
			}
			for _, h := range b[i+2 : i+6] {
				if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
					return i, errJSONSyntax
				}
			}
			i += 6
		default:
			return i, errJSONSyntax
		}
	}
}

// Masks for plainString's word-at-a-time test.
const (
	lo8     = 0x0101010101010101
	hi8     = 0x8080808080808080
	quote8  = '"' * lo8
	bslash8 = '\\' * lo8
	space8  = 0x20 * lo8
)

// plainString returns the index of the first byte at or after i that ends
// the plain run of a string token: a quote, a backslash or a control byte
// (len(b) when there is none). Payloads are mostly long plain strings, so
// it tests eight bytes at a time (bytes.IndexAny builds its byte set on
// every call), and the word that holds the stop byte says where it is;
// only the last few bytes of b are looked at one by one.
func plainString(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, e := x^quote8, x^bslash8
		// A high bit is set in each byte of q or e that is zero, and of x
		// that is below 0x20, and may be set in bytes above such a byte
		// (a borrow runs upwards), never below it: the lowest one, in
		// the first byte as loaded little-endian, is exact.
		if m := ((q-lo8)&^q | (e-lo8)&^e | (x-space8)&^x) & hi8; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(b) && b[i] != '"' && b[i] != '\\' && b[i] >= 0x20 {
		i++
	}
	return i
}

func skipNumber(b []byte, i int) (int, error) {
	start := i
	if b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return start, errJSONSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return start, errJSONSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return start, errJSONSyntax
		}
	}
	return i, nil
}

// eachMember calls fn for every member of the object b (one whole JSON value,
// surrounding space allowed) with its raw key token and raw value.
func eachMember(b []byte, fn func(key, value []byte)) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errJSONSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return trailingSpaceOnly(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errJSONSyntax
		}
		end, err := skipString(b, i)
		if err != nil {
			return err
		}
		key := b[i:end]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return errJSONSyntax
		}
		i = skipSpace(b, i+1)
		start := i
		if i, err = skipValue(b, i, 1); err != nil {
			return err
		}
		fn(key, b[start:i])
		var done bool
		if i, done, err = nextItem(b, i, '}'); done || err != nil {
			return err
		}
	}
}

// eachElement calls fn for every element of the array b.
func eachElement(b []byte, fn func(value []byte)) error {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return errJSONSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return trailingSpaceOnly(b, i+1)
	}
	for {
		start := i
		var err error
		if i, err = skipValue(b, i, 1); err != nil {
			return err
		}
		fn(b[start:i])
		var done bool
		if i, done, err = nextItem(b, i, ']'); done || err != nil {
			return err
		}
	}
}

// nextItem steps over the comma after a member or element; done says the
// closer ended the top-level object or array (and only space follows it).
func nextItem(b []byte, i int, closer byte) (next int, done bool, err error) {
	i = skipSpace(b, i)
	switch {
	case i >= len(b):
		return i, true, errJSONSyntax
	case b[i] == closer:
		return i, true, trailingSpaceOnly(b, i+1)
	case b[i] != ',':
		return i, true, errJSONSyntax
	}
	return skipSpace(b, i+1), false, nil
}

func trailingSpaceOnly(b []byte, i int) error {
	if skipSpace(b, i) != len(b) {
		return errJSONSyntax
	}
	return nil
}

// memberName returns the name in a raw key token, decoded when escaped
// (nil when it does not decode).
func memberName(key []byte) []byte {
	if bytes.IndexByte(key, '\\') < 0 {
		return key[1 : len(key)-1]
	}
	s, ok := jsonString(key)
	if !ok {
		return nil
	}
	return []byte(s)
}

// keyIs compares a raw key token with a name; escaped keys are decoded.
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return len(key) == len(name)+2 && string(key[1:len(key)-1]) == name
	}
	s, ok := jsonString(key)
	return ok && s == name
}

// knownStrings are values the peek sees over and over (MCP method names,
// protocol revisions); returning the interned copy saves an allocation each.
var knownStrings = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"2.0", "initialize", "notifications/initialized", "ping", "tools/list", "tools/call",
		"resources/list", "resources/read", "resources/templates/list", "resources/subscribe",
		"resources/unsubscribe", "prompts/list", "prompts/get", "logging/setLevel",
		"completion/complete", "sampling/createMessage", "elicitation/create", "roots/list",
		"notifications/progress", "notifications/message", "notifications/cancelled",
		"notifications/resources/updated", "notifications/resources/list_changed",
		"notifications/tools/list_changed", "notifications/prompts/list_changed",
		"notifications/roots/list_changed", "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28",
	} {
		m[s] = s
	}
	return m
}()

// jsonString decodes a raw JSON string token; ok is false for other values.
func jsonString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		body := raw[1 : len(raw)-1]
		if s, ok := knownStrings[string(body)]; ok {
			return s, true
		}
		return string(body), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonInt reads an integral JSON number.
func jsonInt(raw []byte) (int, bool) {
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		f, ferr := strconv.ParseFloat(string(raw), 64)
		if ferr != nil || f != float64(int(f)) {
			return 0, false
		}
		return int(f), true
	}
	return n, true
}
