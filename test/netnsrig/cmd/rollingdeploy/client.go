package main

// The client: a go-sdk MCP client that initializes a session, calls
// slow_write with a progress token (so its SSE stream is open while the
// tool reports progress) and lets the SDK resume that stream with
// Last-Event-ID when it is cut, as it does by itself. The application gives
// the call a deadline; when it passes, it re-runs the write once (as an
// application that never heard back would), closes the session and prints
// what happened: every HTTP exchange its transport saw, the calls'
// outcomes, and whether a response carried another session's id.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/replaywatch/replaywatch/test/netnsrig"
)

func runClient(args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	endpoint := fs.String("url", "", "MCP endpoint (the load balancer's /mcp)")
	steps := fs.Int("steps", 2, "progress notifications slow_write sends before writing")
	hold := fs.Duration("hold", 1500*time.Millisecond, "how long the write takes on the backend, after its progress")
	timeout := fs.Duration("timeout", 3*time.Second, "the application's deadline for the call")
	retry := fs.Bool("retry", true, "re-run the write once when the deadline passed")
	label := fs.String("label", "invoice-42", "the write's label (in its arguments)")
	connectWait := fs.Duration("connect-timeout", 10*time.Second, "how long to keep trying to connect")
	fs.Parse(args)
	if *endpoint == "" {
		return errors.New("-url is required")
	}
	ctx := context.Background()
	rec := &recorder{base: &http.Transport{}}
	hc := &http.Client{Transport: rec}
	rep := netnsrig.ClientReport{URL: *endpoint}
	var progressMu sync.Mutex
	client := mcp.NewClient(&mcp.Implementation{Name: "netnsrig-client", Version: "1.0.0"}, &mcp.ClientOptions{
		Logger: logger(),
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progressMu.Lock()
			rep.Progress = append(rep.Progress, req.Params.Progress)
			progressMu.Unlock()
		},
	})
	t := &mcp.StreamableClientTransport{Endpoint: *endpoint, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: 2}
	cs, err := connect(ctx, client, t, *connectWait)
	if err != nil {
		return err
	}
	rep.SessionID = cs.ID()

	a := writeArgs{Steps: *steps, Label: *label, HoldMS: int(hold.Milliseconds())}
	rep.Call = call(ctx, cs, a, "tok-write", *timeout)
	if rep.Call.TimedOut && *retry {
		// The application never heard back: it runs the write again
		// (without a progress token this time).
		r := call(ctx, cs, a, nil, *timeout)
		rep.Retry = &r
	}
	if err := cs.Close(); err != nil {
		rep.CloseError = err.Error()
	}
	hc.CloseIdleConnections()

	progressMu.Lock()
	defer progressMu.Unlock()
	rep.Exchanges = rec.snapshot()
	for _, e := range rep.Exchanges {
		if e.LastEventID != "" {
			rep.Resumes = append(rep.Resumes, e)
		}
		if e.ResponseSession != "" && e.ResponseSession != rep.SessionID && !rep.Swapped {
			rep.Swapped, rep.SwappedTo = true, e.ResponseSession
		}
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// connect retries until the balancer answers or wait has passed (the
// namespaces' links are up before the rig starts us; this only absorbs a
// slow start).
func connect(ctx context.Context, c *mcp.Client, t *mcp.StreamableClientTransport, wait time.Duration) (*mcp.ClientSession, error) {
	deadline := time.Now().Add(wait)
	for {
		cs, err := c.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: defaultRevision})
		if err == nil {
			return cs, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connect %s: %w", t.Endpoint, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// call runs slow_write with a deadline and reports how it ended.
func call(ctx context.Context, cs *mcp.ClientSession, a writeArgs, progressToken any, timeout time.Duration) netnsrig.CallOutcome {
	p := &mcp.CallToolParams{Name: "slow_write", Arguments: a}
	if progressToken != nil {
		p.SetProgressToken(progressToken)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := cs.CallTool(ctx, p)
	out := netnsrig.CallOutcome{Tool: p.Name, Elapsed: time.Since(start)}
	if err != nil {
		out.Error = err.Error()
		out.TimedOut = errors.Is(err, context.DeadlineExceeded)
		return out
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			out.Result = t.Text
			break
		}
	}
	if res.IsError {
		out.Error = "tool error: " + out.Result
	}
	return out
}

// recorder is the client's HTTP transport, noting every exchange.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	ex   []*netnsrig.Exchange
}

func (rt *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	e := &netnsrig.Exchange{Time: time.Now().UTC(), Method: req.Method, RPC: rpcMethod(req),
		Session: req.Header.Get("Mcp-Session-Id"), LastEventID: req.Header.Get("Last-Event-ID")}
	rt.mu.Lock()
	rt.ex = append(rt.ex, e)
	rt.mu.Unlock()
	res, err := rt.base.RoundTrip(req)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if err != nil {
		e.Error = err.Error()
		return nil, err
	}
	e.Status = res.StatusCode
	e.ResponseSession = res.Header.Get("Mcp-Session-Id")
	e.ContentType = res.Header.Get("Content-Type")
	if strings.HasPrefix(e.ContentType, "text/event-stream") {
		res.Body = &eventCounter{ReadCloser: res.Body, rt: rt, e: e}
	}
	return res, nil
}

func (rt *recorder) snapshot() []netnsrig.Exchange {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]netnsrig.Exchange, len(rt.ex))
	for i, e := range rt.ex {
		out[i] = *e
	}
	return out
}

// rpcMethod is the JSON-RPC method of a POST body ("response" for a reply
// to the server), "" when there is none.
func rpcMethod(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	var m struct {
		Method string          `json:"method"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.NewDecoder(io.LimitReader(body, 1<<20)).Decode(&m) != nil {
		return ""
	}
	if m.Method == "" && (m.Result != nil || m.Error != nil) {
		return "response"
	}
	return m.Method
}

// eventCounter counts an SSE response's events and ids and notes how the
// body ended.
type eventCounter struct {
	io.ReadCloser
	rt *recorder
	e  *netnsrig.Exchange
	sseParser
}

func (c *eventCounter) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	for _, ev := range c.feed(p[:n]) {
		c.e.Events++
		if ev.id != "" {
			if c.e.FirstEventID == "" {
				c.e.FirstEventID = ev.id
			}
			c.e.LastEvent = ev.id
		}
	}
	if err != nil && c.e.End == "" {
		if err == io.EOF {
			c.e.End = "eof"
		} else {
			c.e.End = err.Error()
		}
	}
	return n, err
}

func (c *eventCounter) Close() error {
	c.rt.mu.Lock()
	if c.e.End == "" {
		c.e.End = "closed by client"
	}
	c.rt.mu.Unlock()
	return c.ReadCloser.Close()
}
