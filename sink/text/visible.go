package text

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxShownBytes is how much of one value from the wire the report prints;
// past it the value is cut and its length said. A 60 KB session id must
// not bury the report.
const maxShownBytes = 120

// visible makes a value taken from the wire safe for a terminal: control
// characters (C0, DEL, C1), format characters that reorder text (bidi
// overrides, zero-width) and invalid UTF-8 are written as escapes (\x1b,
// \u202e), so a crafted Mcp-Session-Id cannot set a terminal's title or
// clear its screen; and it is shortened to maxShownBytes, with its length
// on the wire.
func visible(s string) string {
	n := len(s)
	s = Escape(s)
	if len(s) <= maxShownBytes {
		return s
	}
	cut := maxShownBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], n)
}

// Escape writes what visible escapes, without shortening: for any text
// that may quote input, such as a decoder's error message.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && needsEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// visibleWords is visible for prose that quotes wire values (an
// explanation): each word is escaped and shortened on its own, so the
// prose stays whole, and the one punctuation mark that follows a value
// ("id X,") is kept and not counted in its length.
func visibleWords(s string) string {
	words := strings.Split(s, " ")
	for i, w := range words {
		value := w
		if n := len(w); n > 1 && strings.IndexByte(",.;:)", w[n-1]) >= 0 {
			value = w[:n-1]
		}
		words[i] = visible(value) + w[len(value):]
	}
	return strings.Join(words, " ")
}
