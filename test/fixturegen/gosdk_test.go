package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func TestSelectScenarios(t *testing.T) {
	names := []string{"go-a", "go-b", "go-probe", "ts-a"}
	registry["go-probe"] = scenario{probe: true}
	defer delete(registry, "go-probe")
	for _, tc := range []struct {
		only string
		want []string
	}{
		{"", []string{"go-a", "go-b", "ts-a"}}, // a probe only by its name
		{"go-b", []string{"go-b"}},
		{"go-probe", []string{"go-probe"}},
		{"go-*", []string{"go-a", "go-b"}},
		{"ts-a, go-a", []string{"go-a", "ts-a"}},
		{"nope", nil},
		{"go", nil}, // a prefix only matches with '*'
	} {
		if got := selectScenarios(names, tc.only); !slices.Equal(got, tc.want) {
			t.Errorf("selectScenarios(%q) = %q, want %q", tc.only, got, tc.want)
		}
	}
}

func TestEventIDHelpers(t *testing.T) {
	for _, tc := range []struct {
		ev       string
		id       string
		index2   bool
		stream   string
		idx      int
		splitsOK bool
	}{
		{"event: message\nid: ABC_2\ndata: {}\n\n", "ABC_2", true, "ABC", 2, true},
		{"id: _2\ndata: x\n\n", "_2", true, "", 2, true},
		{"event: message\nid: ABC_12\ndata: {}\n\n", "ABC_12", false, "ABC", 12, true},
		{"event: close\nretry: 150\ndata: \n\n", "", false, "", 0, false},
		{"data: id: ABC_2\n\n", "", false, "", 0, false}, // an id inside data is not an id
	} {
		if got := eventID([]byte(tc.ev)); got != tc.id {
			t.Errorf("eventID(%q) = %q, want %q", tc.ev, got, tc.id)
		}
		if got := eventIndex(2)(tc.ev); got != tc.index2 {
			t.Errorf("eventIndex(2)(%q) = %v, want %v", tc.ev, got, tc.index2)
		}
		s, n, ok := splitEventID(tc.id)
		if ok != tc.splitsOK || ok && (s != tc.stream || n != tc.idx) {
			t.Errorf("splitEventID(%q) = %q, %d, %v", tc.id, s, n, ok)
		}
	}
}

// chunk frames one SSE event as net/http writes it with chunked encoding.
func chunk(ev string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev) }

// TestSSECut feeds a chunked SSE response to the cut's server hook in
// reads of various sizes and checks where the forwarded bytes end.
func TestSSECut(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	ev := func(i int) string {
		return "event: message\nid: S_" + string(rune('0'+i)) + "\ndata: {\"jsonrpc\":\"2.0\",\"n\":" + string(rune('0'+i)) + "}\n\n"
	}
	body := head + chunk(ev(0)) + chunk(ev(1)) + chunk(ev(2)) + chunk(ev(3))
	atBoundary := head + chunk(ev(0)) + chunk(ev(1)) + chunk(ev(2))
	// A mid-event cut keeps the event's head, its id line and dataKept
	// bytes of its data line.
	c2 := chunk(ev(2))
	midEvent := head + chunk(ev(0)) + chunk(ev(1)) + c2[:strings.Index(c2, "data: ")+dataKept]
	for _, tc := range []struct {
		name     string
		mid      bool
		readSize int
		want     string
	}{
		{"boundary, whole reads", false, len(body), atBoundary},
		{"boundary, 7-byte reads", false, 7, atBoundary},
		{"boundary, 1-byte reads", false, 1, atBoundary},
		{"mid-event, whole reads", true, len(body), midEvent},
		{"mid-event, 5-byte reads", true, 5, midEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSSECut("tools/call", eventIndex(2))
			c.midEvent = tc.mid
			h := c.hooks(0)
			if _, act := h.FromClient([]byte("POST /mcp HTTP/1.1\r\n\r\n{\"method\":\"tools/call\"}")); act != pcaprec.Forward {
				t.Fatalf("client bytes not forwarded")
			}
			var out bytes.Buffer
			closed := false
			for rest := body; rest != "" && !closed; {
				n := min(tc.readSize, len(rest))
				p, act := h.FromServer([]byte(rest[:n]))
				out.Write(p)
				rest = rest[n:]
				closed = act == pcaprec.Close
			}
			if !closed {
				t.Fatal("the cut never closed the connection")
			}
			if out.String() != tc.want {
				t.Errorf("forwarded\n%q\nwant\n%q", out.String(), tc.want)
			}
			if c.cutID() != "S_2" {
				t.Errorf("cutID = %q, want S_2", c.cutID())
			}
		})
	}
}

// TestSSECutIgnoresOtherRequests: a connection whose request lacks the
// marker is never cut.
func TestSSECutIgnoresOtherRequests(t *testing.T) {
	c := newSSECut("tools/call", eventIndex(0))
	h := c.hooks(0)
	h.FromClient([]byte("GET /mcp HTTP/1.1\r\n\r\n"))
	if p, act := h.FromServer([]byte("id: S_0\ndata: x\n\n")); act != pcaprec.Forward || len(p) != 17 {
		t.Fatalf("unarmed connection: %q, %v", p, act)
	}
}

func TestRewriteLastEventID(t *testing.T) {
	hooks := rewriteLastEventID("NEW_1")
	req := "GET /mcp HTTP/1.1\r\nHost: x\r\nLast-Event-Id: OLD_2\r\nAccept: text/event-stream\r\n\r\n"
	got, _ := hooks(0).FromClient([]byte(req))
	if want := strings.Replace(req, "OLD_2", "NEW_1", 1); string(got) != want {
		t.Fatalf("rewritten to %q, want %q", got, want)
	}
	// It fires once: the next resume goes through as sent.
	if again, _ := hooks(1).FromClient([]byte(req)); string(again) != req {
		t.Fatalf("second request rewritten: %q", again)
	}
}

func TestEditSSE(t *testing.T) {
	sse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: S_1\ndata: a\n\n")
		io.WriteString(w, "id: S_2\ndata: b\n\nid: S_3\n") // an event split across writes
		io.WriteString(w, "data: c\n\n")
	})
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{\"a\":1}\n\n")
	})
	drop2 := func(*http.Request) sseEdit {
		return func(ev []byte) [][]byte {
			switch eventID(ev) {
			case "S_2":
				return nil
			case "S_3":
				return [][]byte{ev, ev}
			}
			return [][]byte{ev}
		}
	}
	for _, tc := range []struct {
		name string
		h    http.Handler
		want string
	}{
		{"sse edited", editSSE(sse, drop2), "id: S_1\ndata: a\n\nid: S_3\ndata: c\n\nid: S_3\ndata: c\n\n"},
		{"json untouched", editSSE(plain, drop2), "{\"a\":1}\n\n"},
		{"no edit picked", editSSE(sse, func(*http.Request) sseEdit { return nil }), "id: S_1\ndata: a\n\nid: S_2\ndata: b\n\nid: S_3\ndata: c\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tc.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/mcp", nil))
			if rec.Body.String() != tc.want {
				t.Errorf("body %q, want %q", rec.Body.String(), tc.want)
			}
		})
	}
}

func TestRewriteCursor(t *testing.T) {
	var seen []string
	h := rewriteCursor(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.Header.Get("Last-Event-ID"))
	}), func(id string) string { return id + "x" })
	for _, tc := range []struct{ method, id string }{{http.MethodGet, "S_2"}, {http.MethodPost, "S_2"}, {http.MethodGet, ""}} {
		r := httptest.NewRequest(tc.method, "/mcp", nil)
		if tc.id != "" {
			r.Header.Set("Last-Event-ID", tc.id)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if want := []string{"GET S_2x", "POST S_2", "GET "}; !slices.Equal(seen, want) {
		t.Fatalf("handler saw %q, want %q", seen, want)
	}
}

func TestRecordGoRejectsUnfilledPlaceholder(t *testing.T) {
	dir := t.TempDir()
	err := recordGo(dir, "x", []http.Handler{http.NotFoundHandler()}, func(r *rig) error { return nil }, "expect violation last_event_id={cut}")
	if err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("err = %v, want an unfilled placeholder error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.spec")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spec written despite the error: %v", err)
	}
}

// TestDuplicateDeliveryCapture records one real scenario and checks the
// capture holds the fault it claims: the tools/call result event twice, in
// one response, with no GET (no resume).
func TestDuplicateDeliveryCapture(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := runGoDuplicateDelivery(ctx, dir); err != nil {
		t.Fatal(err)
	}
	payload := pcapPayload(t, pcapPath(dir, "go-duplicate-delivery"))
	result := `"result":{"content":[{"type":"text","text":"twice: 3 steps done"}]}`
	if n := strings.Count(payload, result); n != 2 {
		t.Errorf("result event appears %d times, want 2", n)
	}
	if strings.Contains(payload, "GET /mcp") {
		t.Error("capture has a GET: the scenario must not resume")
	}
	spec, err := os.ReadFile(filepath.Join(dir, "go-duplicate-delivery.spec"))
	if err != nil || !strings.Contains(string(spec), "expect violation kind=duplicate_delivery count=1") {
		t.Fatalf("spec %q, %v", spec, err)
	}
}

// pcapPayload concatenates every TCP payload in a capture, in file order.
func pcapPayload(t *testing.T, path string) string {
	t.Helper()
	pkts, lt, err := pcaprec.ReadPackets(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pkts {
		if tcp := p.TCP(lt); tcp != nil {
			b.Write(tcp.Payload)
		}
	}
	return b.String()
}

// TestSessionAdopter sends a tools/call for a session the backend never
// issued: a correct go-sdk server answers 404; the adopter serves it, under
// the client's id (keepID) or a newly minted one it announces.
func TestSessionAdopter(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"steps":0,"label":"hi"}}}`
	for _, tc := range []struct {
		name       string
		h          http.Handler
		wantStatus int
		wantHeader func(got string) bool
	}{
		{"go-sdk answers 404", goHandler(newGoServer(toolSet{}), storeOpts()), http.StatusNotFound,
			func(got string) bool { return got == "" }},
		{"restored under the same id", newSessionAdopter(toolSet{}, true, false, true, restoreHandshake(revisionSessions, "")...), http.StatusOK,
			func(got string) bool { return got == "" }},
		{"minted and announced", newSessionAdopter(toolSet{}, false, true, true, restoreHandshake(revisionSessions, "")...), http.StatusOK,
			func(got string) bool { return got != "" && got != "UNKNOWNSESSION" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(call))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Session-Id", "UNKNOWNSESSION")
			req.Header.Set("Mcp-Protocol-Version", revisionSessions)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if got := resp.Header.Get("Mcp-Session-Id"); !tc.wantHeader(got) {
				t.Errorf("Mcp-Session-Id %q unexpected", got)
			}
			if tc.wantStatus == http.StatusOK && !strings.Contains(string(body), `"text":"hi"`) {
				t.Errorf("body lacks the echo result: %q", body)
			}
		})
	}
}
