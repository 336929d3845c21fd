package detector

import (
	"testing"
	"time"
)

// TestParkedFindingRaisedAfterLinkWindow: an unknown_last_event_id_accepted
// waits for the session's broken stream to be resumed, but no longer than
// LinkWindow (nor than its session: TestSpecs covers the capture's end),
// so a live agent raises it while the session goes on; the resume's
// record waits with it and names it.
func TestParkedFindingRaisedAfterLinkWindow(t *testing.T) {
	r, rec, d := observeSpec(t, "testdata/unknown_last_event_id_accepted.test")
	last := r.obs[len(r.obs)-1].Time
	if len(rec.violations) != 0 || len(rec.resumes) != 0 {
		t.Fatalf("raised before the broken stream could be resumed: %d violations, %d resumes", len(rec.violations), len(rec.resumes))
	}
	d.Advance(last.Add(r.cfg.LinkWindow / 2))
	if len(rec.violations) != 0 {
		t.Fatalf("raised %v after half of LinkWindow", rec.violations[0].Kind)
	}
	d.Advance(last.Add(r.cfg.LinkWindow + time.Second))
	if len(rec.violations) != 1 || rec.violations[0].Kind != KindUnknownLastEventIDAccepted {
		t.Fatalf("after LinkWindow: %d violations, want one unknown_last_event_id_accepted", len(rec.violations))
	}
	if len(rec.resumes) != 1 || rec.resumes[0].Outcome != ResumeViolated || len(rec.resumes[0].ViolationIDs) != 1 ||
		rec.resumes[0].ViolationIDs[0] != rec.violations[0].ID {
		t.Fatalf("resume record: %+v", rec.resumes)
	}
	if rec.violations[0].Time.After(last) {
		t.Errorf("finding's time %v is when it was raised, not the answer's (by %v)", rec.violations[0].Time, last)
	}
	d.Close(last.Add(r.cfg.LinkWindow + 2*time.Second))
	if len(rec.violations) != 1 || len(rec.resumes) != 1 {
		t.Errorf("Close raised again: %d violations, %d resumes", len(rec.violations), len(rec.resumes))
	}
	if s := rec.sessions; len(s) != 1 || s[0].Violations != 1 {
		t.Errorf("session summary: %+v", s)
	}
}

// TestParkedFindingsBounded: past maxParkedFindings the oldest is settled
// unverifiable (limit hit), never raised.
func TestParkedFindingsBounded(t *testing.T) {
	_, rec, d := observeSpec(t, "testdata/unknown_last_event_id_accepted.test")
	if len(d.parked) != 1 {
		t.Fatalf("%d parked, want 1", len(d.parked))
	}
	for range maxParkedFindings - 1 {
		d.parked = append(d.parked, &parkedFinding{s: d.parked[0].s, rs: &resumeState{}, v: &Violation{}, at: d.now})
	}
	first := d.parked[0]
	d.park(&exchange{sess: first.s, resume: &resumeState{}}, &Violation{ID: "x"}, d.now)
	if len(d.parked) != maxParkedFindings || d.parked[0] == first {
		t.Fatalf("parked %d, oldest kept: %v", len(d.parked), d.parked[0] == first)
	}
	if len(rec.violations) != 0 || d.stats.LimitsHit["maxParkedFindings"] != 1 {
		t.Errorf("violations %d, limit hits %d", len(rec.violations), d.stats.LimitsHit["maxParkedFindings"])
	}
	if n := len(rec.unverifiable); n == 0 || rec.unverifiable[n-1].Reason != ReasonLimitPrefix+"maxParkedFindings" {
		t.Errorf("no unverifiable for the limit: %+v", rec.unverifiable)
	}
}

// observeSpec feeds a case's observations to a detector, not closed.
func observeSpec(t *testing.T, path string) (*specRun, *recorder, *Detector) {
	r := parseSpec(t, path)
	rec := &recorder{}
	d := New(r.cfg, rec)
	for _, o := range r.obs {
		d.Observe(o)
	}
	return r, rec, d
}
