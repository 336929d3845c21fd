package guard

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/replaywatch/replaywatch/decode"
)

// recorder is a TracerProvider whose spans a test reads.
func recorder() (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	return sr, sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
}

// endedSpans waits until every span started has ended (a client may close
// a body after its call returned) and returns them in the order they ended.
func endedSpans(t *testing.T, sr *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(sr.Ended()) < len(sr.Started()); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d spans started, %d ended", len(sr.Started()), len(sr.Ended()))
		}
	}
	return sr.Ended()
}

// attrs renders attributes as key=value lines, sorted as given, values as
// the SDK emits them (a string slice as ["a"]), for whole comparisons.
func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func diffAttrs(t *testing.T, what string, got []attribute.KeyValue, want map[string]string) {
	t.Helper()
	g := attrs(got)
	for k, v := range want {
		if g[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, g[k], v)
		}
	}
	for k, v := range g {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s = %q", what, k, v)
		}
	}
}

func hash64(data string) string { return fmt.Sprintf("%016x", xxhash.Sum64String(data)) }

// progress is the data of faultyServer's progress event n.
func progress(n int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":%d}}`, n)
}

// TestSpanShape: the spans of faultyServer's cut tools/call stream and its
// correct resume, attribute by attribute: the POST a child of the caller's
// span, carrying its JSON-RPC request and the call identity the guard
// computes; one event per SSE event with its id, size, hash and message;
// how each stream ended; the resume's Last-Event-ID and events after it.
func TestSpanShape(t *testing.T) {
	srv := faultyServer(t, "correct")
	u, _ := url.Parse(srv.URL)
	sr, tp := recorder()
	g := &Transport{TracerProvider: tp}
	ctx, parent := tp.Tracer("app").Start(context.Background(), "checkout")

	const call = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"order":"o-1"},"_meta":{"progressToken":"p-1"}}}`
	post, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(call))
	post.Header.Set("Mcp-Session-Id", "S1")
	post.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	post.Header.Set("User-Agent", "shop/1")
	get, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	get.Header.Set("Mcp-Session-Id", "S1")
	get.Header.Set("Last-Event-ID", "e2")
	for _, req := range []*http.Request{post, get} {
		resp, err := g.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	parent.End()

	spans := endedSpans(t, sr)
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	canon, _ := decode.CanonicalJSON(nil, []byte(`{"name":"charge_card","arguments":{"order":"o-1"}}`))
	identity := sha256.Sum256(canon)
	common := map[string]string{
		"url.full": srv.URL, "server.address": u.Hostname(), "server.port": u.Port(),
		"http.request.header.mcp-session-id":  `["S1"]`,
		"http.response.status_code":           "200",
		"http.response.header.mcp-session-id": `["S1"]`, "http.response.header.content-type": `["text/event-stream"]`,
		"mcp.sse.recorded": "true",
	}
	with := func(m map[string]string) map[string]string {
		for k, v := range common {
			if _, ok := m[k]; !ok {
				m[k] = v
			}
		}
		for k, v := range m {
			if v == "" {
				delete(m, k) // not sent: no attribute
			}
		}
		return m
	}
	for i, tc := range []struct {
		name   string
		attrs  map[string]string
		events []map[string]string
	}{
		{"POST", with(map[string]string{
			"http.request.method": "POST", "user_agent.original": "shop/1",
			"http.request.header.mcp-protocol-version": `["2025-11-25"]`,
			"mcp.method.name":                          "tools/call", "jsonrpc.request.id": "7", "gen_ai.tool.name": "charge_card",
			"mcp.request.params_hash": hex.EncodeToString(identity[:]), // without _meta: the call, not this send of it
			"mcp.progress.token":      `"p-1"`,
		}), []map[string]string{
			{"mcp.sse.event.id": "e1", "mcp.sse.event.data_size": strconv.Itoa(len(progress(1))), "mcp.sse.event.data_hash": hash64(progress(1)),
				"jsonrpc.message.type": "notification", "mcp.method.name": "notifications/progress", "mcp.progress.token": `"t"`, "mcp.progress.value": "1"},
			{"mcp.sse.event.id": "e2", "mcp.sse.event.data_size": strconv.Itoa(len(progress(2))), "mcp.sse.event.data_hash": hash64(progress(2)),
				"jsonrpc.message.type": "notification", "mcp.method.name": "notifications/progress", "mcp.progress.token": `"t"`, "mcp.progress.value": "2"},
			{"mcp.sse.end.how": "clean", "mcp.sse.end.client_closed": "false"},
		}},
		{"GET", with(map[string]string{
			"http.response.header.mcp-session-id": "", // the server does not repeat it
			"http.request.method":                 "GET", "http.request.header.last-event-id": `["e2"]`,
		}), []map[string]string{
			{"mcp.sse.event.id": "e3", "mcp.sse.event.data_size": strconv.Itoa(len(progress(3))), "mcp.sse.event.data_hash": hash64(progress(3)),
				"jsonrpc.message.type": "notification", "mcp.method.name": "notifications/progress", "mcp.progress.token": `"t"`, "mcp.progress.value": "3"},
			{"mcp.sse.event.id": "e9", "mcp.sse.event.data_size": "48", "mcp.sse.event.data_hash": hash64(`{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`),
				"jsonrpc.message.type": "response", "jsonrpc.request.id": "7"},
			{"mcp.sse.end.how": "clean", "mcp.sse.end.client_closed": "false"},
		}},
	} {
		s := spans[i]
		if s.Name() != tc.name || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() || s.Status().Code != codes.Unset {
			t.Errorf("span %d: %s %v, parent %v, status %v", i, s.Name(), s.SpanKind(), s.Parent().SpanID(), s.Status())
		}
		diffAttrs(t, tc.name, s.Attributes(), tc.attrs)
		if len(s.Events()) != len(tc.events) {
			t.Errorf("%s: %d events, want %d", tc.name, len(s.Events()), len(tc.events))
			continue
		}
		for j, e := range s.Events() {
			name := "mcp.sse.event"
			if j == len(tc.events)-1 {
				name = "mcp.sse.end"
			}
			if e.Name != name {
				t.Errorf("%s event %d: %s, want %s", tc.name, j, e.Name, name)
			}
			diffAttrs(t, fmt.Sprintf("%s event %d", tc.name, j), e.Attributes, tc.events[j])
		}
	}
}

// TestSpanEnds: what the span says for each way a response ends, and for
// bodies other than a session's event stream.
func TestSpanEnds(t *testing.T) {
	sse := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}
	for _, tc := range []struct {
		name    string
		body    string // the request's; "" sends a GET
		handler http.HandlerFunc
		// read is what the client reads before it closes the body: "" all.
		read   string
		attrs  map[string]string // some of the span's attributes
		events []map[string]string
	}{
		{name: "mid-event: the id of the event cut short",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sse(w, "id: a1\ndata: {}\n\nid: a2\ndata: {\"jsonrpc\"")
			},
			attrs: map[string]string{"mcp.sse.recorded": "true"},
			events: []map[string]string{
				{"mcp.sse.event.id": "a1", "mcp.sse.event.data_size": "2", "mcp.sse.event.data_hash": hash64("{}")},
				{"mcp.sse.event.id": "a2", "mcp.sse.event.complete": "false"},
				{"mcp.sse.end.how": "truncated", "mcp.sse.end.client_closed": "false"},
			}},
		{name: "client closed: at an event boundary, before the end",
			handler: func(w http.ResponseWriter, r *http.Request) {
				sse(w, "id: b1\ndata: x\n\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			read: "data: x\n\n",
			events: []map[string]string{
				{"mcp.sse.event.id": "b1", "mcp.sse.event.data_size": "1", "mcp.sse.event.data_hash": hash64("x")},
				{"mcp.sse.end.how": "clean", "mcp.sse.end.client_closed": "true"},
			}},
		// At an event boundary: "clean", as the packet decoder calls a FIN
		// there; the call it carried is still unanswered.
		{name: "connection cut: the response never ended",
			handler: func(w http.ResponseWriter, r *http.Request) {
				conn, buf, _ := w.(http.Hijacker).Hijack()
				defer conn.Close()
				fmt.Fprint(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				fmt.Fprintf(buf, "%x\r\n%s\r\n", len("id: c1\ndata: x\n\n"), "id: c1\ndata: x\n\n")
				buf.Flush()
			},
			events: []map[string]string{
				{"mcp.sse.event.id": "c1", "mcp.sse.event.data_size": "1", "mcp.sse.event.data_hash": hash64("x")},
				{"mcp.sse.end.how": "clean", "mcp.sse.end.client_closed": "false"},
			}},
		{name: "event type, no id",
			handler: func(w http.ResponseWriter, r *http.Request) { sse(w, "event: endpoint\ndata: /m\n\n") },
			events: []map[string]string{
				{"mcp.sse.event.type": "endpoint", "mcp.sse.event.data_size": "2", "mcp.sse.event.data_hash": hash64("/m")},
				{"mcp.sse.end.how": "clean", "mcp.sse.end.client_closed": "false"},
			}},
		{name: "JSON response: its messages",
			body: `{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{}}}`,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":"a","error":{"code":-32602,"message":"bad"}}`)
			},
			attrs: map[string]string{"mcp.method.name": "tools/call", "jsonrpc.request.id": `"a"`, "gen_ai.tool.name": "x", "mcp.sse.recorded": ""},
			events: []map[string]string{
				{"jsonrpc.message.type": "error", "jsonrpc.request.id": `"a"`, "rpc.response.status_code": "-32602"},
			}},
		{name: "JSON response: a tool's failure",
			body: `{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"x","arguments":{}}}`,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":"b","result":{"content":[{"type":"text","text":"declined"}],"isError":true}}`)
			},
			attrs: map[string]string{"mcp.method.name": "tools/call", "jsonrpc.request.id": `"b"`, "gen_ai.tool.name": "x", "mcp.sse.recorded": ""},
			events: []map[string]string{
				{"jsonrpc.message.type": "response", "jsonrpc.request.id": `"b"`, "error.type": "tool_error"},
			}},
		{name: "batch: no single request to name",
			body: `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]`)
			},
			attrs: map[string]string{"mcp.method.name": "", "jsonrpc.request.id": ""},
			events: []map[string]string{
				{"jsonrpc.message.type": "response", "jsonrpc.request.id": "1"},
				{"jsonrpc.message.type": "response", "jsonrpc.request.id": "2"},
			}},
		{name: "JSON response: its size, read whole",
			body: `{"jsonrpc":"2.0","id":"c","method":"ping"}`,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"jsonrpc":"2.0","id":"c","result":{}}`)
			},
			attrs: map[string]string{"http.response.body.size": "38"},
			events: []map[string]string{
				{"jsonrpc.message.type": "response", "jsonrpc.request.id": `"c"`},
			}},
		// An empty answer to a call (a server or proxy answering 200 with
		// nothing): the size says the span hides no message.
		{name: "call answered with an empty body",
			body: `{"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"x","arguments":{}}}`,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "0")
			},
			attrs: map[string]string{"mcp.method.name": "tools/call", "http.response.body.size": "0"}},
		{name: "notification: accepted, no body",
			body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusAccepted)
			},
			attrs: map[string]string{"mcp.method.name": "notifications/initialized", "jsonrpc.request.id": "", "http.response.status_code": "202",
				"http.response.body.size": "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			sr, tp := recorder()
			g := &Transport{TracerProvider: tp}
			req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
			if tc.body != "" {
				req, _ = http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(tc.body))
			}
			req.Header.Set("Mcp-Session-Id", "S")
			resp, err := g.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.read == "" {
				io.ReadAll(resp.Body)
			} else {
				// Read up to the blank line the client wanted.
				br := bufio.NewReader(resp.Body)
				var got string
				for !strings.HasSuffix(got, tc.read) {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					got += line
				}
			}
			resp.Body.Close()
			spans := endedSpans(t, sr)
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			s := spans[0]
			got := attrs(s.Attributes())
			for k, v := range tc.attrs {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if len(s.Events()) != len(tc.events) {
				t.Fatalf("events %v, want %v", s.Events(), tc.events)
			}
			for i, e := range s.Events() {
				diffAttrs(t, e.Name, e.Attributes, tc.events[i])
			}
		})
	}
}

// TestSpanTransportError: no response, the span ends at once with the
// error.
func TestSpanTransportError(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	sr, tp := recorder()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr, nil)
	if _, err := (&Transport{TracerProvider: tp}).RoundTrip(req); err == nil {
		t.Fatal("no error")
	}
	spans := endedSpans(t, sr)
	if len(spans) != 1 || spans[0].Status().Code != codes.Error || attrs(spans[0].Attributes())["http.response.status_code"] != "" {
		t.Fatalf("spans %v", spans)
	}
}

// eventIndex is the index of a go-sdk event id (<stream>_<index>).
func eventIndex(id string) int {
	n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '_')+1:])
	return n
}

// TestSpansOnGoSDKResumes: the spans of a go-sdk client's tools/call
// whose stream is cut and resumed (resumeCall). The call's POST records
// its events with ids and a truncated end; each resume's GET carries the
// last id as Last-Event-ID and: when correct, events strictly after it and
// a clean end; under a swapped session, the two session ids and the
// SessionSwapError (status Error); from a replayed cursor, the cursor's
// event again and the ReplayedEventError, the guard closing the stream.
func TestSpansOnGoSDKResumes(t *testing.T) {
	for _, tc := range []struct {
		fault string
		err   any // the refusal's type; nil: none
	}{
		{"correct", nil},
		{"swap", &SessionSwapError{}},
		{"replay", &ReplayedEventError{}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			sr, tp := recorder()
			resumeCall(t, tc.fault, &Transport{TracerProvider: tp})
			var call sdktrace.ReadOnlySpan
			var resumes []sdktrace.ReadOnlySpan
			for _, s := range endedSpans(t, sr) {
				a := attrs(s.Attributes())
				switch {
				case a["gen_ai.tool.name"] == "steps":
					call = s
				case a["http.request.header.last-event-id"] != "" && s.Name() == "GET":
					resumes = append(resumes, s)
				}
			}
			if call == nil || len(resumes) == 0 {
				t.Fatalf("the call's span %v, resumes %v", call, resumes)
			}
			var ids []string
			var end map[string]string
			for _, e := range call.Events() {
				a := attrs(e.Attributes)
				if id := a["mcp.sse.event.id"]; id != "" {
					ids = append(ids, id)
				}
				if e.Name == "mcp.sse.end" {
					end = a
				}
			}
			if len(ids) != 3 || end["mcp.sse.end.how"] != "clean" { // cut at an event boundary
				t.Fatalf("the call's stream: ids %v, end %v", ids, end)
			}
			cursor := ids[len(ids)-1]
			r := resumes[0]
			a := attrs(r.Attributes())
			if a["http.request.header.last-event-id"] != fmt.Sprintf("[%q]", cursor) {
				t.Fatalf("the resume's Last-Event-ID %s, want %s", a["http.request.header.last-event-id"], cursor)
			}
			var first string
			end = nil
			for _, e := range r.Events() {
				ea := attrs(e.Attributes)
				if id := ea["mcp.sse.event.id"]; id != "" && first == "" {
					first = id
				}
				if e.Name == "mcp.sse.end" {
					end = ea
				}
			}
			if tc.err == nil {
				if r.Status().Code != codes.Unset || eventIndex(first) <= eventIndex(cursor) || end["mcp.sse.end.how"] != "clean" {
					t.Errorf("a correct resume: status %v, first event %s after %s, end %v", r.Status(), first, cursor, end)
				}
				return
			}
			want := fmt.Sprintf("%T", tc.err)
			var exc string
			for _, e := range r.Events() {
				if e.Name == "exception" {
					exc = attrs(e.Attributes)["exception.type"]
				}
			}
			if r.Status().Code != codes.Error || exc != want {
				t.Errorf("status %v, exception %q, want %s", r.Status(), exc, want)
			}
			switch tc.fault {
			case "swap":
				if a["http.response.header.mcp-session-id"] != `["MINTED-BY-ANOTHER-BACKEND"]` || a["http.request.header.mcp-session-id"] == a["http.response.header.mcp-session-id"] || len(r.Events()) != 1 {
					t.Errorf("a swapped resume: %v, events %v", a, r.Events())
				}
			case "replay":
				if first != cursor || end["mcp.sse.end.client_closed"] != "true" {
					t.Errorf("a replayed cursor: first event %s (cursor %s), end %v", first, cursor, end)
				}
			}
		})
	}
}

// TestReissueObserveOnly: without sessions, an identical tools/call sent
// after its first attempt's stream broke is refused; observe-only sends it
// and hands back the server's answer, telling OnRefuse and the span.
func TestReissueObserveOnly(t *testing.T) {
	const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"order":"o-1"}}}`
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts++
		w.Header().Set("Content-Type", "text/event-stream")
		if attempts == 1 {
			io.WriteString(w, "data: "+progress(1)+"\n\n") // and no answer: the stream broke
			return
		}
		io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}\n\n")
	}))
	defer srv.Close()
	for _, observe := range []bool{false, true} {
		attempts = 0
		var r refusals
		sr, tp := recorder()
		g := &Transport{ObserveOnly: observe, OnRefuse: r.add, TracerProvider: tp}
		var body string
		var err error
		for id := 1; id <= 2; id++ {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(fmt.Sprintf(call, id)))
			var resp *http.Response
			if resp, err = g.RoundTrip(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
			}
		}
		var re *ReissueError
		got := r.all()
		spans := endedSpans(t, sr)
		last := spans[len(spans)-1]
		if len(got) != 1 || !errors.As(got[0], &re) || re.FirstID != "1" || last.Status().Code != codes.Error {
			t.Errorf("observe %v: told %v, span %v", observe, got, last.Status())
		}
		if observe != (err == nil) || observe != strings.Contains(body, `"id":2`) || observe != (attempts == 2) {
			t.Errorf("observe %v: %v, %q, the server saw %d attempts", observe, err, body, attempts)
		}
	}
}

// TestToolAttrs: a tools/list answer's annotations become the three name
// lists of docs/otlp.md, which the OTLP reader turns back into decode's
// marks.
func TestToolAttrs(t *testing.T) {
	tools := string(decode.ToolRepeatable) + "get_order\n" + string(decode.ToolDestructive) + "charge_card\n" +
		string(decode.ToolPlain) + "notify\n" + string(decode.ToolRepeatable) + "search\n"
	got := attrs(toolAttrs(tools))
	want := map[string]string{
		"mcp.tools.repeatable": `["get_order","search"]`, "mcp.tools.destructive": `["charge_card"]`, "mcp.tools.plain": `["notify"]`,
	}
	if !maps.Equal(got, want) {
		t.Errorf("toolAttrs = %v, want %v", got, want)
	}
}
