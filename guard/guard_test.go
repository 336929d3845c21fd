package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/codes"

	"github.com/replaywatch/replaywatch/test/faultsrv"
)

// faultyServer answers a tools/call POST of session S1 with a stream of
// events e1, e2 that ends before the result, and a resume GET (from e2) as
// fault says.
func faultyServer(t *testing.T, fault string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Mcp-Session-Id", "S1")
			fmt.Fprint(w, "id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n")
			fmt.Fprint(w, "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":2}}\n\n")
			return // the stream breaks before the result
		}
		switch fault {
		case "404":
			http.NotFound(w, r)
			return
		case "swap":
			w.Header().Set("Mcp-Session-Id", "S2")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		first := map[string]string{"replay-cursor": "e2", "replay-earlier": "e1", "swap": "x1", "correct": "e3"}[fault]
		fmt.Fprintf(w, ": keep-alive\n\nid: %s\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":3}}\n\n", first)
		fmt.Fprint(w, "id: e9\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"content\":[]}}\n\n")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Close)
	return srv
}

// exchange sends the tools/call and the resume through g (a guard, or
// passThrough) and returns the resume's body and error.
func exchange(t *testing.T, g http.RoundTripper, url string) (string, error) {
	t.Helper()
	post, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"order":"o-1"}}}`))
	post.Header.Set("Mcp-Session-Id", "S1")
	resp, err := g.RoundTrip(post)
	if err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatalf("the first stream: %v", err)
	}
	resp.Body.Close()
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	get.Header.Set("Mcp-Session-Id", "S1")
	get.Header.Set("Last-Event-ID", "e2")
	resp, err = g.RoundTrip(get)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestGuardTurnsCorruptionIntoErrors: each corrupted resume gives its typed
// error; a correct one passes untouched, byte for byte. ObserveOnly passes
// every one byte for byte, telling OnRefuse and the resume's span (status
// Error) the same typed error.
func TestGuardTurnsCorruptionIntoErrors(t *testing.T) {
	for _, tc := range []struct {
		fault string
		check func(error) bool
	}{
		{"swap", func(err error) bool {
			var e *SessionSwapError
			return errors.As(err, &e) && e.Session == "S1" && e.Got == "S2" && e.LastEventID == "e2"
		}},
		{"replay-cursor", func(err error) bool {
			var e *ReplayedEventError
			return errors.As(err, &e) && e.EventID == "e2" && e.LastEventID == "e2"
		}},
		{"replay-earlier", func(err error) bool {
			var e *ReplayedEventError
			return errors.As(err, &e) && e.EventID == "e1"
		}},
		{"404", func(err error) bool {
			var e *SessionLostError
			return errors.As(err, &e) && len(e.InFlight) == 1 && e.InFlight[0].Tool == "charge_card" && e.InFlight[0].ID == "7" &&
				strings.Contains(e.Error(), "outcome unknown for tools/call charge_card (id 7)")
		}},
		{"correct", func(err error) bool { return err == nil }},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			srv := faultyServer(t, tc.fault)
			body, err := exchange(t, New(nil), srv.URL)
			if !tc.check(err) {
				t.Fatalf("error %v (%T)", err, err)
			}
			direct, _ := exchange(t, passThrough{}, srv.URL)
			if tc.fault == "correct" {
				if body != direct || !strings.Contains(body, "id: e3") {
					t.Errorf("the guard changed a correct stream:\n%q\nwant\n%q", body, direct)
				}
			}

			var r refusals
			sr, tp := recorder()
			observed, err := exchange(t, &Transport{ObserveOnly: true, OnRefuse: r.add, TracerProvider: tp}, srv.URL)
			if err != nil || observed != direct {
				t.Errorf("observe-only: %v\n%q\nwant\n%q", err, observed, direct)
			}
			got := r.all()
			resume := endedSpans(t, sr)[1]
			if tc.fault == "correct" {
				if len(got) != 0 || resume.Status().Code != codes.Unset {
					t.Errorf("observe-only refused a correct resume: %v, span %v", got, resume.Status())
				}
				return
			}
			if len(got) != 1 || !tc.check(got[0]) {
				t.Errorf("observe-only told %v", got)
			}
			if resume.Status().Code != codes.Error || resume.Status().Description != got[0].Error() {
				t.Errorf("the resume's span: %v", resume.Status())
			}
		})
	}
}

// passThrough is http.DefaultTransport, to compare a guarded stream with
// one read without the guard's checks.
type passThrough struct{}

func (passThrough) RoundTrip(r *http.Request) (*http.Response, error) {
	return http.DefaultTransport.RoundTrip(r)
}

// TestGuardWithGoSDK: a real go-sdk client through the guard against a
// real go-sdk server: calls pass untouched; once the server has lost the
// session (404), the client's next call fails with the guard's
// SessionLostError instead of a bare status (naming no call in flight:
// the calls answered before are settled, and the one the 404 refused did
// not run). A new session through the same guard then runs clean.
func TestGuardWithGoSDK(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "charge_card"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
		Order string `json:"order"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged " + a.Order}}}, nil, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	var lostID atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, _ := lostID.Load().(string); id != "" && r.Header.Get("Mcp-Session-Id") == id {
			http.NotFound(w, r) // the server lost the session (a restart)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "guarded", Version: "1"}, nil)
	var r refusals
	hc := &http.Client{Transport: &Transport{OnRefuse: r.add}}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: 1}, session2025)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, order := range []string{"o-1", "o-2"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{"order": order}})
		if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "charged "+order {
			t.Fatalf("a correct call through the guard: %v %+v", err, res)
		}
	}
	lostID.Store(cs.ID())
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{"order": "o-3"}})
	var lost *SessionLostError
	if !errors.As(err, &lost) || lost.Session != cs.ID() || len(lost.InFlight) != 0 {
		t.Fatalf("after the session was lost the client got %v (%T), want the guard's SessionLostError", err, err)
	}
	t.Logf("go-sdk client got: %v", err)

	fresh, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: 1}, session2025)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	res, err := fresh.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{"order": "o-3"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "charged o-3" || fresh.ID() == cs.ID() {
		t.Fatalf("a new session after the lost one: %v %+v", err, res)
	}
	if got := r.all(); len(got) != 1 {
		t.Errorf("refusals %v, want only the lost session's", got)
	}
}

// session2025 pins a go-sdk client to revision 2025-11-25.
var session2025 = faultsrv.Revision2025

// progressClient is a go-sdk client that accepts progress notifications.
func progressClient() *mcp.Client { return faultsrv.Client() }

// resumeCall makes one tools/call (faultsrv.Tool: progress notifications,
// then "done") from a go-sdk client whose HTTP goes through rt, against a
// go-sdk server with an event store behind test/faultsrv's fault: the
// call's stream is cut and the client's resume answered as fault says. It
// returns the result's text.
func resumeCall(t *testing.T, fault string, rt http.RoundTripper) (string, error) {
	t.Helper()
	srv := faultsrv.Start(fault)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return faultsrv.Call(ctx, srv.URL, &http.Client{Transport: rt})
}

// refusals collects what a Transport tells OnRefuse.
type refusals struct {
	mu  sync.Mutex
	got []error
}

func (r *refusals) add(err error) { r.mu.Lock(); r.got = append(r.got, err); r.mu.Unlock() }

func (r *refusals) all() []error { r.mu.Lock(); defer r.mu.Unlock(); return slices.Clone(r.got) }

// goSDKResumeFaults are test/faultsrv's faults and the refusal each must
// give (nil: none).
var goSDKResumeFaults = []struct {
	fault string
	check func(error) bool
}{
	{faultsrv.Correct, nil},
	{faultsrv.Swap, func(err error) bool {
		var e *SessionSwapError
		return errors.As(err, &e) && e.Got == "MINTED-BY-ANOTHER-BACKEND"
	}},
	{faultsrv.Replay, func(err error) bool {
		var e *ReplayedEventError
		return errors.As(err, &e) && e.EventID == e.LastEventID
	}},
	{faultsrv.ReplayEarlier, func(err error) bool {
		var e *ReplayedEventError
		return errors.As(err, &e) && e.EventID != e.LastEventID && strings.HasSuffix(e.EventID, "_1")
	}},
	{faultsrv.ResetDelivered, func(err error) bool {
		var e *ReplayedEventError
		return errors.As(err, &e) && strings.HasSuffix(e.EventID, "_0")
	}},
	{faultsrv.ResetUnknown, nil},
	{faultsrv.NotFound, func(err error) bool {
		var e *SessionLostError
		return errors.As(err, &e) && len(e.InFlight) == 1 && e.InFlight[0].Method == "tools/call" && e.InFlight[0].Tool == "steps"
	}},
}

// TestGuardOnGoSDKResumes: a go-sdk client resumes a broken tools/call
// stream from a go-sdk server with an event store. A correct resume, and
// one from a reset store whose ids were never seen (nothing the guard can
// prove), complete the call through the guard, refusing nothing; every
// other fault ends the call with an error, the guard's typed error told to
// OnRefuse (go-sdk v1.8 reports a failed stream read without its cause).
// ObserveOnly tells the same refusals but leaves the call as it goes
// without the guard.
func TestGuardOnGoSDKResumes(t *testing.T) {
	for _, tc := range goSDKResumeFaults {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel() // each waits out go-sdk's reconnect delay
			var r refusals
			text, err := resumeCall(t, tc.fault, &Transport{OnRefuse: r.add})
			refused := r.all()
			if tc.check == nil {
				if err != nil || len(refused) != 0 || text != "done" {
					t.Fatalf("a resume the guard must pass: %v, refused %v, result %q", err, refused, text)
				}
			} else if err == nil || len(refused) == 0 || !tc.check(refused[0]) {
				t.Fatalf("call: %v, result %q; the guard refused %v", err, text, refused)
			} else {
				t.Logf("%s: the call failed (%v); the guard: %v", tc.fault, err, refused[0])
			}

			var o refusals
			otext, oerr := resumeCall(t, tc.fault, &Transport{OnRefuse: o.add, ObserveOnly: true})
			btext, berr := resumeCall(t, tc.fault, passThrough{})
			if otext != btext || (oerr == nil) != (berr == nil) {
				t.Errorf("observe-only: %q, %v; without the guard: %q, %v", otext, oerr, btext, berr)
			}
			if orefused := o.all(); (tc.check == nil) != (len(orefused) == 0) || (tc.check != nil && !tc.check(orefused[0])) {
				t.Errorf("observe-only told %v", orefused)
			}
		})
	}
}

// TestGuardReissueWithGoSDK: revision 2026-07-28 (go-sdk's default, no
// sessions) against a stateless go-sdk server whose first tools/call
// stream of each tool is cut after its first event. The application sends
// the call again: for charge_card (destructive) the guard refuses with a
// ReissueError naming the first attempt; get_order (readOnlyHint) and a
// charge marked SafeToRepeat go through.
func TestGuardReissueWithGoSDK(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	tool := func(name string, readOnly bool) {
		mcp.AddTool(server, &mcp.Tool{Name: name, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: readOnly}}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
			Order string `json:"order"`
		}) (*mcp.CallToolResult, any, error) {
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Total: 2})
			time.Sleep(20 * time.Millisecond)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " " + a.Order}}}, nil, nil
		})
	}
	tool("charge_card", false)
	tool("get_order", true)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})
	cut := map[string]bool{}
	var mu sync.Mutex
	srv := faultsrv.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mu.Lock()
		var first string
		for _, name := range []string{"charge_card", "get_order"} {
			if strings.Contains(string(body), `"name":"`+name+`"`) && !cut[name] {
				cut[name], first = true, name
			}
		}
		mu.Unlock()
		if first != "" {
			handler.ServeHTTP(faultsrv.Cut(w, r, 1, 0), r)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := progressClient()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: New(nil)}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if cs.ID() != "" {
		t.Fatalf("session %q: the test needs revision 2026-07-28 (no sessions)", cs.ID())
	}
	if _, err := cs.ListTools(ctx, nil); err != nil { // the annotations the guard learns
		t.Fatal(err)
	}
	call := func(ctx context.Context, name string) error {
		p := &mcp.CallToolParams{Name: name, Arguments: map[string]any{"order": "o-1"}}
		p.SetProgressToken("tok")
		_, err := cs.CallTool(ctx, p)
		return err
	}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		refused bool
	}{
		{"charge_card", ctx, true},
		{"get_order", ctx, false},
	} {
		if err := call(tc.ctx, tc.name); err == nil {
			t.Fatalf("%s: the first attempt's stream was not cut", tc.name)
		}
		err := call(tc.ctx, tc.name)
		var re *ReissueError
		if tc.refused != errors.As(err, &re) || (tc.refused && re.Tool != tc.name) || (!tc.refused && err != nil) {
			t.Fatalf("%s sent again: %v (%T)", tc.name, err, err)
		}
		t.Logf("%s sent again: %v", tc.name, err)
	}
	// Marked safe by the caller (reconciled): the charge goes through.
	mu.Lock()
	delete(cut, "charge_card")
	mu.Unlock()
	if err := call(ctx, "charge_card"); err == nil {
		t.Fatal("the charge's stream was not cut again")
	}
	if err := call(SafeToRepeat(ctx), "charge_card"); err != nil {
		t.Fatalf("a re-issue marked safe: %v", err)
	}
}

// TestResumptionTokens: each stream's token is its session and its last
// complete event id, saved as events complete, and a resume continues the
// stream it resumes; a file store survives a restart.
func TestResumptionTokens(t *testing.T) {
	srv := faultyServer(t, "correct")
	path := filepath.Join(t.TempDir(), "tokens.json")
	g := &Transport{Tokens: &FileTokens{Path: path}}
	if _, err := exchange(t, g, srv.URL); err != nil {
		t.Fatal(err)
	}
	again := &FileTokens{Path: path} // a restarted process
	tok, ok, err := again.Load(StreamKey(http.MethodPost, "S1", "7"))
	if err != nil || !ok || tok != (Token{Session: "S1", LastEventID: "e9"}) {
		t.Fatalf("token after the resume: %+v %v %v, want S1 at e9 (the resume continued the POST's stream)", tok, ok, err)
	}
	if _, ok, _ := again.Load(StreamKey(http.MethodGet, "S1", "")); ok {
		t.Error("the resume was saved as a stream of its own")
	}
	var mem MemoryTokens
	if err := mem.Save("s", Token{"S", "e1"}); err != nil {
		t.Fatal(err)
	}
	if tok, ok, _ := mem.Load("s"); !ok || tok.LastEventID != "e1" {
		t.Errorf("memory store: %+v %v", tok, ok)
	}
}

// TestGuardPassesLongBodiesOn: a request body longer than MaxBodyBytes,
// which the guard does not peek, reaches the server whole: a go-sdk tools/call
// with 3 MiB of arguments, and a raw POST of unknown length (chunked).
func TestGuardPassesLongBodiesOn(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 3<<20/16)
	server := mcp.NewServer(&mcp.Implementation{Name: "store", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "upload"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
		Blob string `json:"blob"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(len(a.Blob), a.Blob == long)}}}, nil, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: New(nil)}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "guarded", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: 1}, session2025)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "upload", Arguments: map[string]any{"blob": long}})
	if err != nil || res.IsError {
		t.Fatalf("a 3 MiB call through the guard: %v %+v", err, res)
	}
	if got, want := res.Content[0].(*mcp.TextContent).Text, fmt.Sprint(len(long), true); got != want {
		t.Errorf("the server got %q, want %q", got, want)
	}

	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, len(b), string(b) == long)
	}))
	t.Cleanup(echo.Close)
	req, err := http.NewRequest(http.MethodPost, echo.URL, io.MultiReader(strings.NewReader(long))) // length unknown
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if want := fmt.Sprint(len(long), true); string(b) != want {
		t.Errorf("chunked POST: the server got %q, want %q", b, want)
	}
}

// TestTokenStoresAreBounded: past MaxTokens streams a store forgets the one
// saved first, in memory and in a file (whose streams count as saved in the
// order of their names when it is read again).
func TestTokenStoresAreBounded(t *testing.T) {
	name := func(i int) string { return fmt.Sprintf("stream %05d", i) }
	var mem MemoryTokens
	for i := range MaxTokens + 2 {
		if err := mem.Save(name(i), Token{"S", fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.Save(name(2), Token{"S", "again"}); err != nil { // a known stream: nothing forgotten
		t.Fatal(err)
	}
	for i, want := range map[int]bool{0: false, 1: false, 2: true, MaxTokens + 1: true} {
		if _, ok, _ := mem.Load(name(i)); ok != want {
			t.Errorf("memory: stream %d kept %v, want %v", i, ok, want)
		}
	}

	// A file written with more (by an older version, or by hand).
	m := map[string]Token{}
	for i := range MaxTokens + 2 {
		m[name(i)] = Token{"S", fmt.Sprint(i)}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	file := &FileTokens{Path: path}
	if err := file.Save("new", Token{"S", "n"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]bool{2: false, 3: true, MaxTokens + 1: true} {
		if _, ok, _ := file.Load(name(i)); ok != want {
			t.Errorf("file: stream %d kept %v, want %v", i, ok, want)
		}
	}
	b, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clear(m)
	if err := json.Unmarshal(b, &m); err != nil || len(m) != MaxTokens {
		t.Errorf("the file holds %d streams (%v), want %d", len(m), err, MaxTokens)
	}
}
