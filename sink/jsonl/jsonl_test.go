package jsonl

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/sink"
)

func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestEmptyValuesAreNullNotOmitted(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf)
	w.Violation(&detector.Violation{ID: "abc", Kind: detector.KindSessionSwap, Severity: detector.SeverityCritical})
	w.Resume(&detector.ResumeAttempt{Outcome: detector.ResumeResumed})
	w.Session(&detector.SessionSummary{SessionID: "S1"})
	w.UnknownOutcome(&detector.UnknownOutcome{Method: "tools/call"})
	w.Unverifiable(&detector.Unverifiable{Check: "resume"})
	w.Summary(&sink.Summary{Packets: 3})
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	recs := decodeLines(t, buf.Bytes())
	wantTypes := []string{TypeViolation, TypeResume, TypeSession, TypeUnknownOutcome, TypeUnverifiable, TypeSummary}
	if len(recs) != len(wantTypes) {
		t.Fatalf("%d lines, want %d", len(recs), len(wantTypes))
	}
	for i, typ := range wantTypes {
		if recs[i]["type"] != typ {
			t.Errorf("line %d type %v, want %s", i, recs[i]["type"], typ)
		}
	}
	v := recs[0]
	for _, f := range []string{"source", "session_id", "new_session_id", "last_event_id", "first_event_id", "stream_id",
		"protocol_version", "client", "server", "jsonrpc_ids", "tool", "explanation", "time"} {
		val, ok := v[f]
		if !ok {
			t.Errorf("violation field %q omitted", f)
		} else if val != nil {
			t.Errorf("empty violation field %q = %v, want null", f, val)
		}
	}
	if v["kind"] != "session_swap" || v["severity"] != "critical" || v["id"] != "abc" {
		t.Errorf("violation = %v", v)
	}
	if recs[5]["packets"] != float64(3) {
		t.Errorf("summary = %v", recs[5])
	}
	// A capture with nothing decoded has no times: null, never year 1.
	for _, f := range []string{"capture_start", "capture_end", "analysed_share", "partial_reason"} {
		if val, ok := recs[5][f]; !ok || val != nil {
			t.Errorf("empty summary field %q = %v (present %v), want null", f, val, ok)
		}
	}
}

// TestSourceFollowsType: every record type carries the input it came from
// as "source", right after "type", so a reader splitting one stream by input
// finds it in the same place; the summary describes the run and has none.
func TestSourceFollowsType(t *testing.T) {
	cases := []struct {
		typ   string
		write func(w *Writer, source string)
	}{
		{TypeViolation, func(w *Writer, src string) { w.Violation(&detector.Violation{ID: "v", Source: src}) }},
		{TypeResume, func(w *Writer, src string) { w.Resume(&detector.ResumeAttempt{ID: "r", Source: src}) }},
		{TypeSession, func(w *Writer, src string) { w.Session(&detector.SessionSummary{SessionID: "S1", Source: src}) }},
		{TypeUnknownOutcome, func(w *Writer, src string) { w.UnknownOutcome(&detector.UnknownOutcome{ID: "u", Source: src}) }},
		{TypeUnverifiable, func(w *Writer, src string) { w.Unverifiable(&detector.Unverifiable{ID: "x", Source: src}) }},
	}
	for _, c := range cases {
		for _, src := range []string{detector.SourcePcap, detector.SourceLive, detector.SourceOTLP, ""} {
			var buf bytes.Buffer
			w := New(&buf)
			c.write(w, src)
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			want := `{"type":"` + c.typ + `","source":null,`
			if src != "" {
				want = `{"type":"` + c.typ + `","source":"` + src + `",`
			}
			if !bytes.HasPrefix(buf.Bytes(), []byte(want)) {
				t.Errorf("%s from %q: %s, want it to start %s", c.typ, src, buf.Bytes(), want)
			}
			rec := decodeLines(t, buf.Bytes())[0]
			if got, ok := rec["source"]; !ok || (src == "" && got != nil) || (src != "" && got != src) {
				t.Errorf("%s from %q: source %v (present %v)", c.typ, src, got, ok)
			}
		}
	}
	var buf bytes.Buffer
	w := New(&buf)
	w.Summary(&sink.Summary{Packets: 1})
	w.Flush()
	if _, ok := decodeLines(t, buf.Bytes())[0]["source"]; ok {
		t.Errorf("summary has a source: %s", buf.Bytes())
	}
}

func TestTimesAndHostileStrings(t *testing.T) {
	var buf bytes.Buffer
	w := New(&buf)
	when := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	hostile := "S1\"\n\x00<script>\xff"
	w.Violation(&detector.Violation{Time: when, SessionID: hostile, JSONRPCIDs: []string{"1", `"a"`},
		Evidence: []detector.Evidence{{Time: when, Conn: "a->b", Exchange: 2, What: "request", Detail: "Last-Event-ID: x"}}})
	w.Flush()
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 {
		t.Fatalf("hostile string broke the one-record-per-line rule: %d newlines", n)
	}
	v := decodeLines(t, buf.Bytes())[0]
	if v["time"] != "2026-11-30T11:00:00.123456789Z" {
		t.Errorf("time = %v", v["time"])
	}
	if !strings.HasPrefix(v["session_id"].(string), "S1\"\n\x00<script>") {
		t.Errorf("session_id = %q", v["session_id"])
	}
	ids := v["jsonrpc_ids"].([]any)
	if len(ids) != 2 || ids[1] != `"a"` {
		t.Errorf("jsonrpc_ids = %v", ids)
	}
	ev := v["evidence"].([]any)[0].(map[string]any)
	if ev["connection"] != "a->b" || ev["exchange"] != float64(2) || ev["detail"] != "Last-Event-ID: x" {
		t.Errorf("evidence = %v", ev)
	}
}

// TestMatchesEncodingJSON holds the hand-written string encoder to
// encoding/json's output (HTML escaping off) on awkward and random strings.
func TestMatchesEncodingJSON(t *testing.T) {
	cases := []string{"", "plain", "quote\" back\\slash", "ctl \x00\x01\x1f\x7f", "\n\r\t\b\f",
		"bad utf8 \xff\xfe end", "split \xe2\x82", "sep \u2028 and \u2029", "<html>&amp;", "ünïcødé 😀"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(24))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		enc.Encode(s)
		got := string(appendString(nil, s)) + "\n"
		if got != want.String() {
			t.Fatalf("appendString(%q) = %s, encoding/json gives %s", s, got, want.String())
		}
	}
}
