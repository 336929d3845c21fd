package netnsrig

import "time"

// The JSON the scenario program (cmd/rollingdeploy) writes and the rig
// reads: the client's report on stdout, the load balancer's admin state.

// ClientReport is what the scenario's client saw, as it prints it (one JSON
// object on stdout) when it exits.
type ClientReport struct {
	// URL is the MCP endpoint the client used (the load balancer).
	URL string `json:"url"`
	// SessionID is the session initialize created (go-sdk's client keeps
	// it for the whole run, whatever later responses carry).
	SessionID string `json:"session_id"`
	// Progress are the progress values delivered for the first call.
	Progress []float64 `json:"progress"`
	// Call is the first slow_write, made with the SSE stream open and a
	// progress token; the application gives up on it after a timeout.
	Call CallOutcome `json:"call"`
	// Retry is the application re-running the same write after Call timed
	// out (nil when Call completed or retries are off).
	Retry *CallOutcome `json:"retry"`
	// Resumes are the requests that carried Last-Event-ID (the go-sdk
	// client resuming the cut stream by itself).
	Resumes []Exchange `json:"resumes"`
	// Swapped is true when a response carried a session id other than
	// SessionID; SwappedTo is that id.
	Swapped   bool   `json:"swapped"`
	SwappedTo string `json:"swapped_to"`
	// CloseError is the error of closing the session (DELETE), if any.
	CloseError string `json:"close_error"`
	// Exchanges are every HTTP request the client made, in order.
	Exchanges []Exchange `json:"exchanges"`
}

// CallOutcome is one tools/call.
type CallOutcome struct {
	Tool     string        `json:"tool"`
	Result   string        `json:"result"` // first text content
	Error    string        `json:"error"`
	TimedOut bool          `json:"timed_out"` // the application's deadline ended it
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// Exchange is one HTTP request of the client and its response, as the
// client's HTTP transport saw them.
type Exchange struct {
	Time time.Time `json:"time"`
	// Method is the HTTP method; RPC the JSON-RPC method of a POST
	// ("initialize", "tools/call", ...; "response" for a reply).
	Method string `json:"method"`
	RPC    string `json:"rpc"`
	// Session and LastEventID are the request's Mcp-Session-Id and
	// Last-Event-ID headers.
	Session     string `json:"session"`
	LastEventID string `json:"last_event_id"`
	// Status, ResponseSession (Mcp-Session-Id) and ContentType are the
	// response's; Error is set when there was none.
	Status          int    `json:"status"`
	ResponseSession string `json:"response_session"`
	ContentType     string `json:"content_type"`
	Error           string `json:"error"`
	// For an SSE response: events read, the first and last event ids,
	// and how the body ended ("eof", "closed by client", or the read
	// error: a cut stream ends in "unexpected EOF").
	Events       int    `json:"events"`
	FirstEventID string `json:"first_event_id"`
	LastEvent    string `json:"last_event_id_seen"`
	End          string `json:"end"`
}

// LBState is the load balancer's admin view (GET /state, and the answer to
// POST /drain).
type LBState struct {
	Backends []BackendState `json:"backends"`
	// Requests are every proxied request, in arrival order.
	Requests []RequestState `json:"requests"`
	// Sessions maps each session id the balancer saw to the backend it
	// pins it to.
	Sessions map[string]string `json:"sessions"`
}

// BackendState is one backend of the balancer.
type BackendState struct {
	Addr string `json:"addr"`
	// Live is false once drained: no request goes there any more.
	Live bool `json:"live"`
}

// RequestState is one proxied request and, for an SSE response, the stream
// the balancer forwarded.
type RequestState struct {
	ID      int    `json:"id"`
	Backend string `json:"backend"`
	Method  string `json:"method"`
	Session string `json:"session"`
	// LastEventID is the request's Last-Event-ID (a resume).
	LastEventID string `json:"last_event_id"`
	Status      int    `json:"status"`
	// ResponseSession is the response's Mcp-Session-Id.
	ResponseSession string `json:"response_session"`
	SSE             bool   `json:"sse"`
	// Events and Progress count the SSE events forwarded and those that
	// are notifications/progress; LastEvent is the last forwarded id.
	Events    int    `json:"events"`
	Progress  int    `json:"progress"`
	LastEvent string `json:"last_event"`
	// Open is true until the response is complete or aborted; Drained is
	// set when a drain cut it.
	Open    bool `json:"open"`
	Drained bool `json:"drained"`
}
