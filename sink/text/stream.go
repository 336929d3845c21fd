package text

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/replaywatch/replaywatch/detector"
)

// Stream is a detector.Sink for a process that never ends (the agent): it
// prints each violation and unknown outcome the moment it is found, in the
// report's layout, instead of buffering for a summary.
type Stream struct {
	w io.Writer
	n int
}

// NewStream returns a Stream printing to w.
func NewStream(w io.Writer) *Stream { return &Stream{w: w} }

// Violation implements detector.Sink.
func (s *Stream) Violation(v *detector.Violation) {
	s.n++
	var b strings.Builder
	writeViolation(&b, strconv.Itoa(s.n), v) // numbered as they come: no total yet
	io.WriteString(s.w, b.String())
}

// UnknownOutcome implements detector.Sink.
func (s *Stream) UnknownOutcome(u *detector.UnknownOutcome) {
	fmt.Fprintf(s.w, "\nUNKNOWN OUTCOME  %s  session %s  %s id %s tool %s: %s%s\n", stamp(u.Time), orDash(u.SessionID), orDash(u.Method), orDash(u.JSONRPCID), orDash(u.Tool), visibleWords(u.Reason), sourceTag(u.Source))
}

// Resume implements detector.Sink; the stream prints findings only.
func (s *Stream) Resume(*detector.ResumeAttempt) {}

// Session implements detector.Sink.
func (s *Stream) Session(*detector.SessionSummary) {}

// Unverifiable implements detector.Sink.
func (s *Stream) Unverifiable(*detector.Unverifiable) {}
