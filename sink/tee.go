package sink

import "github.com/replaywatch/replaywatch/detector"

// Tee hands every record to each of sinks in turn. It is an
// detector.EventSink too, forwarding stream events to the sinks that take
// them, so per-event records are built only when one does.
func Tee(sinks ...detector.Sink) detector.Sink {
	t := tee{sinks: sinks}
	for _, s := range sinks {
		if es, ok := s.(detector.EventSink); ok {
			t.events = append(t.events, es)
		}
	}
	if len(t.events) == 0 {
		return plainTee{t}
	}
	return &t
}

type tee struct {
	sinks  []detector.Sink
	events []detector.EventSink
}

// plainTee hides StreamEvent when no sink wants events.
type plainTee struct{ t tee }

func (p plainTee) Violation(v *detector.Violation)           { p.t.Violation(v) }
func (p plainTee) Resume(a *detector.ResumeAttempt)          { p.t.Resume(a) }
func (p plainTee) Session(s *detector.SessionSummary)        { p.t.Session(s) }
func (p plainTee) UnknownOutcome(u *detector.UnknownOutcome) { p.t.UnknownOutcome(u) }
func (p plainTee) Unverifiable(u *detector.Unverifiable)     { p.t.Unverifiable(u) }

func (t *tee) Violation(v *detector.Violation) {
	for _, s := range t.sinks {
		s.Violation(v)
	}
}

func (t *tee) Resume(a *detector.ResumeAttempt) {
	for _, s := range t.sinks {
		s.Resume(a)
	}
}

func (t *tee) Session(ss *detector.SessionSummary) {
	for _, s := range t.sinks {
		s.Session(ss)
	}
}

func (t *tee) UnknownOutcome(u *detector.UnknownOutcome) {
	for _, s := range t.sinks {
		s.UnknownOutcome(u)
	}
}

func (t *tee) Unverifiable(u *detector.Unverifiable) {
	for _, s := range t.sinks {
		s.Unverifiable(u)
	}
}

// StreamEvent implements detector.EventSink.
func (t *tee) StreamEvent(e *detector.StreamEvent) {
	for _, s := range t.events {
		s.StreamEvent(e)
	}
}
