package main

import (
	"bytes"
	"strings"
)

// sseEvent is one complete server-sent event: its id ("" when it has
// none) and its data lines joined by newlines.
type sseEvent struct {
	id, data string
}

// sseParser splits an SSE byte stream into events across reads (comment
// lines, such as ": ok", are not events).
type sseParser struct {
	line []byte // partial line from the last read
	cur  sseEvent
	in   bool // a field of the current event was seen
}

// feed parses the next bytes of the stream and returns the events they
// complete.
func (s *sseParser) feed(p []byte) []sseEvent {
	var out []sseEvent
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.line = append(s.line, p...)
			break
		}
		s.line = append(s.line, p[:i]...)
		p = p[i+1:]
		line := strings.TrimSuffix(string(s.line), "\r")
		s.line = s.line[:0]
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if s.in {
				out = append(out, s.cur)
			}
			s.cur, s.in = sseEvent{}, false
		case name == "": // a comment
		case name == "id":
			s.cur.id, s.in = value, true
		case name == "data":
			if s.cur.data != "" {
				s.cur.data += "\n"
			}
			s.cur.data += value
			s.in = true
		default:
			s.in = true
		}
	}
	return out
}
