package sink

import "github.com/replaywatch/replaywatch/detector"

// Tee hands every record to each of sinks in turn. When some of them are
// detector.EventSinks the tee is one too, forwarding stream events to those:
// the detector builds per-event records only when a sink takes them.
func Tee(sinks ...detector.Sink) detector.Sink {
	var events []detector.EventSink
	for _, s := range sinks {
		if es, ok := s.(detector.EventSink); ok {
			events = append(events, es)
		}
	}
	if len(events) == 0 {
		return tee(sinks)
	}
	return eventTee{tee: sinks, events: events}
}

// tee is a Sink that is not an EventSink.
type tee []detector.Sink

func (t tee) Violation(v *detector.Violation) {
	for _, s := range t {
		s.Violation(v)
	}
}

func (t tee) Resume(a *detector.ResumeAttempt) {
	for _, s := range t {
		s.Resume(a)
	}
}

func (t tee) Session(ss *detector.SessionSummary) {
	for _, s := range t {
		s.Session(ss)
	}
}

func (t tee) UnknownOutcome(u *detector.UnknownOutcome) {
	for _, s := range t {
		s.UnknownOutcome(u)
	}
}

func (t tee) Unverifiable(u *detector.Unverifiable) {
	for _, s := range t {
		s.Unverifiable(u)
	}
}

// eventTee adds the stream events.
type eventTee struct {
	tee
	events []detector.EventSink
}

// StreamEvent implements detector.EventSink.
func (t eventTee) StreamEvent(e *detector.StreamEvent) {
	for _, s := range t.events {
		s.StreamEvent(e)
	}
}
