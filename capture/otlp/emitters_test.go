package otlp_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/replaywatch/replaywatch/capture/otlp"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
)

// emitterSink keeps the violations the detector reports.
type emitterSink struct{ violations []*detector.Violation }

func (s *emitterSink) Violation(v *detector.Violation)         { s.violations = append(s.violations, v) }
func (s *emitterSink) Resume(*detector.ResumeAttempt)          {}
func (s *emitterSink) Session(*detector.SessionSummary)        {}
func (s *emitterSink) UnknownOutcome(*detector.UnknownOutcome) {}
func (s *emitterSink) Unverifiable(*detector.Unverifiable)     {}

// Markers for a header in wantExchange: absent, or not checked (the
// emitter's shape leaves it open).
const (
	absent    = "<absent>"
	unchecked = "<unchecked>"
)

// wantExchange is what one exchange's request and response head must say.
type wantExchange struct {
	method                  string
	reqSession, lastEventID string
	respSession             string
	rpcMethod, rpcID, tool  string // "" with rpcMethod: unchecked
}

// TestEmitterShapes feeds the span shapes of three real emitters
// (testdata/emitters/README.md) through the assembler and the detector:
// the same MCP story each time (initialize, a tools/call stream, a resume
// answered with another session id), seen as each emitter shows it.
func TestEmitterShapes(t *testing.T) {
	cases := []struct {
		file string
		want []wantExchange
		swap bool // the emitter carries both session headers of the resume
	}{
		{
			// OBI: MCP-detected POSTs carry mcp.* attributes and no header
			// attributes; the GET (not MCP to OBI) carries the headers its
			// enrichment rules include.
			file: "obi.json",
			want: []wantExchange{
				{method: "POST", reqSession: unchecked, lastEventID: absent, respSession: unchecked, rpcMethod: "initialize", rpcID: "1"},
				{method: "POST", reqSession: unchecked, lastEventID: absent, respSession: unchecked, rpcMethod: "tools/call", rpcID: "2", tool: "charge"},
				{method: "GET", reqSession: "S1", lastEventID: "ev-3", respSession: "S2"},
			},
			swap: true,
		},
		{
			// C# SDK: MCP CLIENT spans parent the HttpClient spans; no header
			// attributes, and mcp.session.id is a per-client GUID, not the
			// Mcp-Session-Id header.
			file: "csharp.json",
			want: []wantExchange{
				{method: "POST", reqSession: absent, lastEventID: absent, respSession: absent, rpcMethod: "initialize", rpcID: "1"},
				{method: "POST", reqSession: absent, lastEventID: absent, respSession: absent, rpcMethod: "tools/call", rpcID: "2", tool: "charge"},
				{method: "GET", reqSession: absent, lastEventID: absent, respSession: absent},
			},
		},
		{
			// otelhttp v0.72.0 with headers added by the application: HTTP
			// only, no JSON-RPC content.
			file: "otelhttp.json",
			want: []wantExchange{
				{method: "POST", reqSession: absent, lastEventID: absent, respSession: "S1"},
				{method: "POST", reqSession: "S1", lastEventID: absent, respSession: absent},
				{method: "GET", reqSession: "S1", lastEventID: "ev-3", respSession: "S2"},
			},
			swap: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "emitters", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(b)
			if err != nil {
				t.Fatal(err)
			}
			var obs []*decode.Observation
			asm := otlp.NewAssembler(otlp.DefaultConfig(), []byte("emitters-test-key"), func(o *decode.Observation) { obs = append(obs, o) })
			if _, err := asm.Consume(td, time.Now()); err != nil {
				t.Fatal(err)
			}
			asm.Flush()

			var resps []*decode.Observation
			for _, o := range obs {
				if o.Kind == decode.KindResponse {
					resps = append(resps, o)
				}
			}
			if len(resps) != len(tc.want) {
				t.Fatalf("%d exchanges, want %d", len(resps), len(tc.want))
			}
			for i, w := range tc.want {
				rq, rs := resps[i].Request, resps[i].Response
				if rq.Method != w.method || rq.Path != "/mcp" || rq.Host != "mcp.example.com:443" || rs.Status != 200 {
					t.Errorf("exchange %d: %s %s host %s status %d, want %s /mcp host mcp.example.com:443 status 200",
						i, rq.Method, rq.Path, rq.Host, rs.Status, w.method)
				}
				checkHeader(t, i, "request Mcp-Session-Id", rq.SessionID, rq.HasSessionID, w.reqSession)
				checkHeader(t, i, "Last-Event-ID", rq.LastEventID, rq.HasLastEventID, w.lastEventID)
				checkHeader(t, i, "response Mcp-Session-Id", rs.SessionID, rs.HasSessionID, w.respSession)
				if w.rpcMethod == "" && len(rq.Messages) > 0 {
					t.Errorf("exchange %d: messages %+v, want none (a %s carries no JSON-RPC request)", i, rq.Messages, rq.Method)
				}
				if w.rpcMethod != "" {
					if len(rq.Messages) != 1 || rq.Messages[0].Method != w.rpcMethod || rq.Messages[0].ID != w.rpcID || rq.Messages[0].Tool != w.tool {
						t.Errorf("exchange %d: messages %+v, want %s id %s tool %q", i, rq.Messages, w.rpcMethod, w.rpcID, w.tool)
					}
				}
			}

			sink := &emitterSink{}
			d := detector.New(detector.DefaultConfig(), sink)
			for _, o := range obs {
				d.Observe(o)
			}
			d.Close(obs[len(obs)-1].Time.Add(time.Minute))
			var swaps []*detector.Violation
			for _, v := range sink.violations {
				if v.Kind != detector.KindSessionSwap {
					t.Errorf("%s: %s", v.Kind, v.Explanation)
					continue
				}
				swaps = append(swaps, v)
			}
			switch {
			case tc.swap && (len(swaps) != 1 || swaps[0].SessionID != "S1" || swaps[0].NewSessionID != "S2"):
				t.Errorf("session_swap findings %+v, want one from S1 to S2", swaps)
			case !tc.swap && len(swaps) != 0:
				t.Errorf("session_swap findings %+v, want none: the emitter carries no session headers", swaps)
			}
		})
	}
}

func checkHeader(t *testing.T, i int, name, got string, has bool, want string) {
	t.Helper()
	switch want {
	case unchecked:
	case absent:
		if has {
			t.Errorf("exchange %d: %s %q, want absent", i, name, got)
		}
	default:
		if !has || got != want {
			t.Errorf("exchange %d: %s %q (present %v), want %q", i, name, got, has, want)
		}
	}
}
