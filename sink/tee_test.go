package sink

import (
	"testing"

	"github.com/replaywatch/replaywatch/detector"
)

type countSink struct{ n int }

func (c *countSink) Violation(*detector.Violation)           { c.n++ }
func (c *countSink) Resume(*detector.ResumeAttempt)          { c.n++ }
func (c *countSink) Session(*detector.SessionSummary)        { c.n++ }
func (c *countSink) UnknownOutcome(*detector.UnknownOutcome) { c.n++ }
func (c *countSink) Unverifiable(*detector.Unverifiable)     { c.n++ }

type eventSink struct {
	countSink
	events int
}

func (e *eventSink) StreamEvent(*detector.StreamEvent) { e.events++ }

func TestTee(t *testing.T) {
	a, b := &countSink{}, &countSink{}
	if _, ok := Tee(a, b).(detector.EventSink); ok {
		t.Fatal("a tee of sinks without events must not ask the detector for events")
	}
	e := &eventSink{}
	tee := Tee(a, e)
	es, ok := tee.(detector.EventSink)
	if !ok {
		t.Fatal("a tee with an event sink must take events")
	}
	tee.Violation(&detector.Violation{})
	tee.Resume(&detector.ResumeAttempt{})
	tee.Session(&detector.SessionSummary{})
	tee.UnknownOutcome(&detector.UnknownOutcome{})
	tee.Unverifiable(&detector.Unverifiable{})
	es.StreamEvent(&detector.StreamEvent{})
	if a.n != 5 || e.n != 5 || e.events != 1 {
		t.Fatalf("a=%d e=%d events=%d, want 5 5 1", a.n, e.n, e.events)
	}
}
