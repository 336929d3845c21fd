package guard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mgclient "github.com/mark3labs/mcp-go/client"
	mgtransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/faultsrv"
)

// exportServer: a go-sdk server with one tool "export" (no annotations:
// not repeatable) whose result is size bytes of text; ran counts its runs.
func exportServer(size int, ran *atomic.Int32) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "export"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
		Order string `json:"order"`
	}) (*mcp.CallToolResult, any, error) {
		if ran != nil {
			ran.Add(1)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", size)}}}, nil, nil
	})
	return server
}

// TestRetryAfterRejection: revision 2026-07-28 (no sessions); a front
// answers the first tools/call with an HTTP status, the request never
// reaching the MCP server, and the client calls again, identically. After
// a rejection (429, 503, any 4xx) the call did not run and the retry goes
// through; after a gateway's 502 or 504 the call may have run upstream, so
// the retry is a re-issue of a call of unknown outcome.
func TestRetryAfterRejection(t *testing.T) {
	for _, tc := range []struct {
		status  int
		refused bool
	}{
		{http.StatusTooManyRequests, false},
		{http.StatusServiceUnavailable, false},
		{http.StatusBadRequest, false},
		{http.StatusUnauthorized, false},
		{http.StatusForbidden, false},
		{http.StatusNotFound, false},
		{http.StatusMethodNotAllowed, false},
		{http.StatusRequestEntityTooLarge, false},
		{http.StatusUnsupportedMediaType, false},
		{http.StatusInternalServerError, false},
		{http.StatusBadGateway, true},
		{http.StatusGatewayTimeout, true},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			var ran atomic.Int32
			server := exportServer(10, &ran)
			handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})
			var rejected atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(strings.NewReader(string(body)))
				if strings.Contains(string(body), `"tools/call"`) && !rejected.Swap(true) {
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("Retry-After", "0")
					w.WriteHeader(tc.status)
					io.WriteString(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"rejected"}}`)
					return
				}
				handler.ServeHTTP(w, r)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			g := New(nil)
			p := &mcp.CallToolParams{Name: "export", Arguments: map[string]any{"order": "o-1"}}
			if _, err := connectSessionless(t, ctx, srv.URL, g).CallTool(ctx, p); err == nil {
				t.Fatal("first attempt not rejected")
			}
			// go-sdk closes the connection after a 4xx: the retry is a new
			// client's, through the same guard.
			_, err := connectSessionless(t, ctx, srv.URL, g).CallTool(ctx, p)
			var re *ReissueError
			if tc.refused {
				if !errors.As(err, &re) || ran.Load() != 0 {
					t.Fatalf("retry after %d: %v (ran %d times), want a ReissueError", tc.status, err, ran.Load())
				}
				return
			}
			if err != nil || ran.Load() != 1 {
				t.Fatalf("retry after %d, a call that never ran: %v (ran %d times)", tc.status, err, ran.Load())
			}
		})
	}
}

func connectSessionless(t *testing.T, ctx context.Context, url string, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	cs, err := progressClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if cs.ID() != "" {
		t.Fatalf("want sessionless, got session %q", cs.ID())
	}
	return cs
}

// TestAnsweredJSONThen404: an mcp-go client (revision 2025-11-25) through
// the guard against a go-sdk server answering in JSON. The client decodes
// the answer and closes the body without reading it to EOF; then the
// session is lost: the SessionLostError lists no call, the answered one
// included.
func TestAnsweredJSONThen404(t *testing.T) {
	for _, size := range []int{10, 100 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			server := exportServer(size, nil)
			handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{JSONResponse: true})
			var lost atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if lost.Load() && r.Header.Get("Mcp-Session-Id") != "" {
					http.NotFound(w, r)
					return
				}
				handler.ServeHTTP(w, r)
			}))
			defer srv.Close()
			var r refusals
			c, err := mgclient.NewStreamableHttpClient(srv.URL, mgtransport.WithHTTPBasicClient(&http.Client{Transport: &Transport{OnRefuse: r.add}}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			init := mcpgo.InitializeRequest{}
			init.Params.ProtocolVersion = "2025-11-25"
			init.Params.ClientInfo = mcpgo.Implementation{Name: "mg", Version: "1"}
			if _, err := c.Initialize(ctx, init); err != nil {
				t.Fatal(err)
			}
			req := mcpgo.CallToolRequest{}
			req.Params.Name = "export"
			req.Params.Arguments = map[string]any{"order": "o-1"}
			if res, err := c.CallTool(ctx, req); err != nil || res.IsError {
				t.Fatalf("call: %v %+v", err, res)
			}
			lost.Store(true)
			_, _ = c.CallTool(ctx, req)
			got := r.all()
			if len(got) != 1 {
				t.Fatalf("refusals %v", got)
			}
			if e, ok := got[0].(*SessionLostError); !ok || len(e.InFlight) != 0 {
				t.Fatalf("want a SessionLostError listing no call, got %v", got[0])
			}
		})
	}
}

// TestLargeAnswers: answers over MaxBodyBytes, an SSE event's or a JSON
// body's, reach the client whole; the guard keeps only their first bytes
// but still settles the call they answer. Without sessions, the same call
// made again is no re-issue; in a session, a SessionLostError after it
// lists no call.
func TestLargeAnswers(t *testing.T) {
	const size = MaxBodyBytes + 1000
	for _, tc := range []struct {
		name            string
		json, sessioned bool
	}{
		{"sessionless-sse", false, false},
		{"sessionless-json", true, false},
		{"session-sse", false, true},
		{"session-json", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := exportServer(size, nil)
			handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: !tc.sessioned, JSONResponse: tc.json})
			var lostID atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if id, _ := lostID.Load().(string); id != "" && r.Header.Get("Mcp-Session-Id") == id {
					http.NotFound(w, r)
					return
				}
				handler.ServeHTTP(w, r)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var r refusals
			var opts *mcp.ClientSessionOptions
			if tc.sessioned {
				opts = session2025
			}
			cs, err := progressClient().Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: &Transport{OnRefuse: r.add}}, DisableStandaloneSSE: true, MaxRetries: 1}, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if (cs.ID() != "") != tc.sessioned {
				t.Fatalf("session %q", cs.ID())
			}
			p := &mcp.CallToolParams{Name: "export", Arguments: map[string]any{"order": "o-1"}}
			for i := range 2 {
				if i == 1 && tc.sessioned {
					lostID.Store(cs.ID())
				}
				res, err := cs.CallTool(ctx, p)
				if i == 1 && tc.sessioned {
					var lost *SessionLostError
					if !errors.As(err, &lost) || len(lost.InFlight) != 0 {
						t.Fatalf("after the session's loss: %v, want a SessionLostError listing no call", err)
					}
					break
				}
				if err != nil {
					t.Fatalf("call %d: %v (refusals %v)", i+1, err, r.all())
				}
				if n := len(res.Content[0].(*mcp.TextContent).Text); n != size {
					t.Fatalf("call %d: %d bytes", i+1, n)
				}
			}
		})
	}
}

// TestUnreadAnswer: what the guard reads of an answer it could not read
// whole.
func TestUnreadAnswer(t *testing.T) {
	for _, tc := range []struct {
		prefix, id string
		maybe      bool
	}{
		{`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"xxx`, "7", true},
		{`{"jsonrpc":"2.0","id": "a\u0062","error":{"code":1,"message":"xx`, `"ab"`, true},
		{`{"id":7.0,"jsonrpc":"2.0","result":{}}`, "7.0", true},
		{`{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"xxx`, "", true},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"xx`, "", false},
		{`{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"x":"xx`, "", false},
		{`[{"jsonrpc":"2.0","id":7,"result":{"content":"xx`, "", true},
		{`not json`, "", true},
	} {
		id, maybe := unreadAnswer([]byte(tc.prefix))
		if id != tc.id || maybe != tc.maybe {
			t.Errorf("%s: got %q %v, want %q %v", tc.prefix, id, maybe, tc.id, tc.maybe)
		}
	}
}

// TestValueEnd: the end of a JSON value followed byte by byte.
func TestValueEnd(t *testing.T) {
	for _, tc := range []struct {
		text string
		done bool
	}{
		{` {"a":"}]\"{","b":[1,{"c":2}]}`, true},
		{`{"a":"}]\"{","b":[1,{"c":2}]`, false},
		{`[{"a":"\\"},1]`, true},
		{`{"a":"\\\"}"`, false},
		{`"}"`, false},
		{`12`, false},
	} {
		for _, step := range []int{1, 3, 100} {
			var v valueEnd
			for i := 0; i < len(tc.text); i += step {
				v.write([]byte(tc.text[i:min(i+step, len(tc.text))]))
			}
			if v.done != tc.done {
				t.Errorf("%s (by %d): done %v, want %v", tc.text, step, v.done, tc.done)
			}
		}
	}
}

// shop: a stateless go-sdk server with tool "charge" (read-only as given)
// whose first tools/call stream is cut after one event when cutFirst; ran
// counts the tool's runs.
func shop(t *testing.T, readOnly, cutFirst bool, ran *atomic.Int32) string {
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "charge", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: readOnly}}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
		Order string `json:"order"`
	}) (*mcp.CallToolResult, any, error) {
		ran.Add(1)
		req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Total: 2})
		time.Sleep(20 * time.Millisecond)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "charged " + a.Order}}}, nil, nil
	})
	return cutFirstCall(t, server, cutFirst)
}

// cutFirstCall serves server statelessly, cutting the stream of the first
// tools/call after one event when cut.
func cutFirstCall(t *testing.T, server *mcp.Server, cut bool) string {
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{Stateless: true})
	var done atomic.Bool
	srv := faultsrv.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if cut && strings.Contains(string(body), `"tools/call"`) && !done.Swap(true) {
			handler.ServeHTTP(faultsrv.Cut(w, r, 1, 0), r)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func charge(ctx context.Context, cs *mcp.ClientSession) error {
	p := &mcp.CallToolParams{Name: "charge", Arguments: map[string]any{"order": "o-1"}}
	p.SetProgressToken("tok")
	_, err := cs.CallTool(ctx, p)
	return err
}

// TestSharedGuardKeepsServersApart: one guard used by sessionless clients
// of two servers, X and Y, each with its own tool "charge". A call broken
// on X is no first attempt of the same call on Y; X's "charge" listed
// read-only does not make Y's destructive one repeatable.
func TestSharedGuardKeepsServersApart(t *testing.T) {
	t.Run("broken-elsewhere", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var ranX, ranY atomic.Int32
		g := New(nil)
		x := connectSessionless(t, ctx, shop(t, false, true, &ranX), g)
		y := connectSessionless(t, ctx, shop(t, false, false, &ranY), g)
		if err := charge(ctx, x); err == nil {
			t.Fatal("X's call was not cut")
		}
		if err := charge(ctx, y); err != nil || ranY.Load() != 1 {
			t.Fatalf("Y's first call: %v (ran %d times)", err, ranY.Load())
		}
		var re *ReissueError
		if err := charge(ctx, x); !errors.As(err, &re) {
			t.Fatalf("X's re-issue: %v, want a ReissueError", err)
		}
	})
	t.Run("annotated-elsewhere", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var ranX, ranY atomic.Int32
		g := New(nil)
		y := connectSessionless(t, ctx, shop(t, false, true, &ranY), g)
		x := connectSessionless(t, ctx, shop(t, true, false, &ranX), g)
		if _, err := y.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := x.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := charge(ctx, y); err == nil {
			t.Fatal("Y's call was not cut")
		}
		var re *ReissueError
		if err := charge(ctx, y); !errors.As(err, &re) || ranY.Load() != 1 {
			t.Fatalf("Y's destructive charge re-issued: %v (ran %d times), want a ReissueError", err, ranY.Load())
		}
	})
}

// TestEndpointsAreBounded: past MaxEndpoints the oldest endpoint is
// forgotten with its broken calls: its re-issue is then let through (no
// proof left), a newer endpoint's still refused.
func TestEndpointsAreBounded(t *testing.T) {
	g := New(nil)
	call := Call{ID: "1", Method: "tools/call", Tool: "charge", identity: "charge\x00h"}
	ep := func(i int) string { return fmt.Sprintf("http://s%d.example/mcp", i) }
	for i := range MaxEndpoints + 1 {
		g.broke(ep(i), []Call{call})
	}
	if len(g.endpoints) != MaxEndpoints || len(g.broken) != MaxEndpoints {
		t.Fatalf("%d endpoints, %d broken calls", len(g.endpoints), len(g.broken))
	}
	if err := g.checkReissue(context.Background(), ep(0), []Call{call}); err != nil {
		t.Fatalf("forgotten endpoint: %v", err)
	}
	var re *ReissueError
	if err := g.checkReissue(context.Background(), ep(MaxEndpoints), []Call{call}); !errors.As(err, &re) {
		t.Fatalf("newest endpoint: %v", err)
	}
	// An endpoint forgotten with its annotations, met again: a tool it
	// listed read-only is unknown now, so its re-issue goes through.
	search := Call{ID: "2", Method: "tools/call", Tool: "search", identity: "search\x00h"}
	h := New(nil)
	h.learnTools(ep(0), []decode.Message{{Tools: string(decode.ToolRepeatable) + "search\n"}})
	for i := range MaxEndpoints {
		h.learnTools(ep(i+1), nil)
		h.broke(ep(i+1), []Call{call})
	}
	h.broke(ep(0), []Call{search})
	if err := h.checkReissue(context.Background(), ep(0), []Call{search}); err != nil {
		t.Fatalf("a read-only tool of an endpoint forgotten and met again: %v", err)
	}
}

// TestManyTools: a stateless go-sdk server with n tools, the last one
// read-only, each described in desc bytes; the first call of tool is cut
// and made again. A read-only tool's re-issue goes through whether the
// guard recorded its annotations or could not (past
// decode.MaxAnnotatedTools, or a tools/list answer over MaxBodyBytes); a
// tool the guard knows is not repeatable is refused.
func TestManyTools(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, desc int
		tool    int // index of the tool called
		refused bool
	}{
		{"200-read-only", 200, 0, 199, false},
		{"200-plain", 200, 0, 0, true},
		{"300-read-only", 300, 0, 299, false},
		{"300-plain", 300, 0, 0, true},
		{"long-list-read-only", 100, 12 << 10, 99, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server := mcp.NewServer(&mcp.Implementation{Name: "many", Version: "1"}, nil)
			var ran atomic.Int32
			for i := range tc.n {
				mcp.AddTool(server, &mcp.Tool{Name: fmt.Sprintf("tool_%03d", i), Description: strings.Repeat("d", tc.desc), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: i == tc.n-1}}, func(ctx context.Context, req *mcp.CallToolRequest, a struct {
					Order string `json:"order"`
				}) (*mcp.CallToolResult, any, error) {
					ran.Add(1)
					req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: 1, Total: 2})
					time.Sleep(20 * time.Millisecond)
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cs := connectSessionless(t, ctx, cutFirstCall(t, server, true), New(nil))
			lt, err := cs.ListTools(ctx, nil)
			if err != nil || len(lt.Tools) != tc.n {
				t.Fatalf("listed: %v", err)
			}
			call := func() error {
				p := &mcp.CallToolParams{Name: fmt.Sprintf("tool_%03d", tc.tool), Arguments: map[string]any{"order": "o-1"}}
				p.SetProgressToken("tok")
				_, err := cs.CallTool(ctx, p)
				return err
			}
			if err := call(); err == nil {
				t.Fatal("first call not cut")
			}
			err = call()
			var re *ReissueError
			if tc.refused != errors.As(err, &re) || !tc.refused && err != nil {
				t.Fatalf("re-issue: %v (ran %d times), want refused %v", err, ran.Load(), tc.refused)
			}
		})
	}
}

// TestToolsPerEndpointBounded: an endpoint keeps at most
// MaxToolsPerEndpoint tools; one past it is unknown, its re-issue let
// through, while a recorded plain tool's is refused.
func TestToolsPerEndpointBounded(t *testing.T) {
	const ep = "http://s.example/mcp"
	g := New(nil)
	var lines []string
	for i := range MaxToolsPerEndpoint + 1 {
		lines = append(lines, fmt.Sprintf("%ct%d", decode.ToolPlain, i))
	}
	for page := range slices.Chunk(lines, 100) {
		g.learnTools(ep, []decode.Message{{Type: decode.MsgResponse, ID: "1", Tools: strings.Join(page, "\n")}})
	}
	if n := len(g.endpoints[ep].repeatable); n != MaxToolsPerEndpoint {
		t.Fatalf("%d tools kept", n)
	}
	for _, tc := range []struct {
		tool    string
		refused bool
	}{{"t0", true}, {fmt.Sprint("t", MaxToolsPerEndpoint), false}} {
		c := Call{ID: "2", Method: "tools/call", Tool: tc.tool, identity: tc.tool + "\x00h"}
		g.broke(ep, []Call{c})
		var re *ReissueError
		if err := g.checkReissue(context.Background(), ep, []Call{c}); errors.As(err, &re) != tc.refused {
			t.Errorf("%s: %v, want refused %v", tc.tool, err, tc.refused)
		}
	}
	// A name past MaxToolNameBytes (a hostile server's megabyte names
	// would fill MaxToolsPerEndpoint with megabytes) goes unrecorded.
	long := strings.Repeat("x", MaxToolNameBytes+1)
	h := New(nil)
	h.learnTools(ep, []decode.Message{{Type: decode.MsgResponse, ID: "1", Tools: string(decode.ToolPlain) + long}})
	if e := h.endpoints[ep]; len(e.repeatable) != 0 || !e.partial {
		t.Errorf("a %d-byte tool name: %d kept, partial %v", len(long), len(e.repeatable), e.partial)
	}
}
