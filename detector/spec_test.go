package detector

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/fixturespec"
)

// recorder is a Sink that keeps everything it is handed.
type recorder struct {
	violations   []*Violation
	resumes      []*ResumeAttempt
	sessions     []*SessionSummary
	unknowns     []*UnknownOutcome
	unverifiable []*Unverifiable
	events       []*StreamEvent
}

func (r *recorder) Violation(v *Violation)           { r.violations = append(r.violations, v) }
func (r *recorder) Resume(a *ResumeAttempt)          { r.resumes = append(r.resumes, a) }
func (r *recorder) Session(s *SessionSummary)        { r.sessions = append(r.sessions, s) }
func (r *recorder) UnknownOutcome(u *UnknownOutcome) { r.unknowns = append(r.unknowns, u) }
func (r *recorder) Unverifiable(u *Unverifiable)     { r.unverifiable = append(r.unverifiable, u) }
func (r *recorder) StreamEvent(e *StreamEvent)       { r.events = append(r.events, e) }

// specBase is time 0 of every .test file.
var specBase = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// specConn is one connection of a .test file and its exchanges in order.
type specConn struct {
	conn      decode.Conn
	host      string // the Host header of its requests
	forward   bool   // its requests are in absolute form (to a forward proxy)
	exchanges []*specExchange
}

type specExchange struct {
	n      int
	req    *decode.Request
	resp   *decode.Response
	events int
	ended  bool
}

// specRun turns a .test script into observations and expectations.
type specRun struct {
	file    string
	now     time.Time
	conns   map[string]*specConn
	nextID  uint64
	obs     []*decode.Observation
	expects []specExpect
	cfg     Config
	closeAt time.Time
}

type specExpect struct {
	line   int
	what   string // violation, resume, session, unknown_outcome, unverifiable, no
	kind   string
	fields map[string]string
	raw    string
}

func parseSpec(t *testing.T, path string) *specRun {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &specRun{file: filepath.Base(path), now: specBase, conns: map[string]*specConn{}, cfg: DefaultConfig()}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := r.line(n, line); err != nil {
			t.Fatalf("%s:%d: %v", r.file, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *specRun) line(n int, line string) error {
	words, err := fixturespec.Fields(line)
	if err != nil {
		return err
	}
	if strings.HasPrefix(words[0], "+") {
		sec, err := strconv.ParseFloat(words[0][1:], 64)
		if err != nil {
			return fmt.Errorf("bad time step %q", words[0])
		}
		r.now = r.now.Add(time.Duration(sec * float64(time.Second)))
		words = words[1:]
		if len(words) == 0 {
			return nil
		}
	}
	args := words[1:]
	switch words[0] {
	case "at":
		if len(args) < 1 {
			return fmt.Errorf("at needs a time")
		}
		sec, err := strconv.ParseFloat(args[0], 64)
		if err != nil {
			return err
		}
		r.now = specBase.Add(time.Duration(sec * float64(time.Second)))
		if len(args) > 1 {
			return r.line(n, strings.Join(quoteAll(args[1:]), " "))
		}
		return nil
	case "close":
		r.closeAt = r.now
		return nil
	case "expect":
		return r.expect(n, line, args)
	}
	steps := map[string]func([]string) error{
		"conn": r.connLine, "config": r.configLine, "request": r.request, "response": r.response,
		"event": r.event, "body": r.body, "end": r.end, "gap": r.gap,
	}
	if step, ok := steps[words[0]]; ok {
		return step(args)
	}
	return fmt.Errorf("unknown directive %q", words[0])
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = w
		if strings.ContainsAny(w, " \t") {
			k, v, _ := strings.Cut(w, "=")
			out[i] = k + "=\"" + v + "\""
		}
	}
	return out
}

// connLine: conn NAME client IP:PORT server IP:PORT [midstream] [host=H] [forward]
// Requests carry Host: H (default mcp.test, one logical endpoint for every
// connection, as behind a load balancer).
func (r *specRun) connLine(args []string) error {
	if len(args) < 5 || args[1] != "client" || args[3] != "server" {
		return fmt.Errorf("want: conn NAME client IP:PORT server IP:PORT")
	}
	c, err := netip.ParseAddrPort(args[2])
	if err != nil {
		return err
	}
	s, err := netip.ParseAddrPort(args[4])
	if err != nil {
		return err
	}
	r.nextID++
	sc := &specConn{conn: decode.Conn{ID: r.nextID, Client: c, Server: s, StartSeen: true}, host: "mcp.test"}
	for _, a := range args[5:] {
		switch k, v, _ := strings.Cut(a, "="); k {
		case "midstream":
			sc.conn.StartSeen = false
		case "host":
			sc.host = v
		case "forward":
			sc.forward = true
		default:
			return fmt.Errorf("unknown conn attribute %q", a)
		}
	}
	r.conns[args[0]] = sc
	return nil
}

func (r *specRun) configLine(args []string) error {
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "max_events":
			r.cfg.MaxEventsIndexedPerSession, _ = strconv.Atoi(v)
		case "max_sessions":
			r.cfg.MaxSessions, _ = strconv.Atoi(v)
		case "max_streams":
			r.cfg.MaxStreamsPerSession, _ = strconv.Atoi(v)
		case "max_open_exchanges":
			r.cfg.MaxOpenExchanges, _ = strconv.Atoi(v)
		case "max_server_events":
			r.cfg.MaxEventsIndexedPerServer, _ = strconv.Atoi(v)
		case "max_lost_sessions":
			r.cfg.MaxLostSessions, _ = strconv.Atoi(v)
		case "max_inflight":
			r.cfg.MaxInflightPerSession, _ = strconv.Atoi(v)
		case "max_responses":
			r.cfg.MaxResponsesPerSession, _ = strconv.Atoi(v)
		case "max_progress":
			r.cfg.MaxProgressTokensPerSession, _ = strconv.Atoi(v)
		case "partial_history":
			r.cfg.PartialHistory = v == "true"
		case "idle":
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			r.cfg.SessionIdleTimeout = d
		case "link_window":
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			r.cfg.LinkWindow = d
		default:
			return fmt.Errorf("unknown config %q", k)
		}
	}
	return nil
}

// target checks a step's arguments and finds its connection.
func (r *specRun) target(args []string, min int, usage string) (*specConn, error) {
	if len(args) < min {
		return nil, fmt.Errorf("want: %s", usage)
	}
	return r.conn(args[0])
}

// streamTarget is target plus the exchange whose response is being read.
func (r *specRun) streamTarget(args []string, min int, usage string) (*specConn, *specExchange, error) {
	c, err := r.target(args, min, usage)
	if err != nil {
		return nil, nil, err
	}
	x, err := r.current(c, false)
	return c, x, err
}

func (r *specRun) conn(name string) (*specConn, error) {
	c := r.conns[name]
	if c == nil {
		return nil, fmt.Errorf("unknown connection %q (declare it with conn)", name)
	}
	return c, nil
}

func (r *specRun) emit(c *specConn, x *specExchange, kind decode.Kind) *decode.Observation {
	o := &decode.Observation{Kind: kind, Time: r.now, Conn: c.conn, Exchange: x.n, Request: x.req, Response: x.resp}
	r.obs = append(r.obs, o)
	return o
}

// kv splits key=value words; bare words map to "".
func kv(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}

// request CONN METHOD PATH [session=S] [last-event-id=X] [proto=V] [ua=USER-AGENT] [body=MSGS] [batch] [nonmcp] [encoded] [answered-early]
func (r *specRun) request(args []string) error {
	c, err := r.target(args, 3, "request CONN METHOD PATH ...")
	if err != nil {
		return err
	}
	m := kv(args[3:])
	req := &decode.Request{Method: args[1], Path: args[2], Host: c.host, AbsoluteForm: c.forward}
	if v, ok := m["session"]; ok {
		req.SessionID, req.HasSessionID = v, true
	}
	if v, ok := m["last-event-id"]; ok {
		req.LastEventID, req.HasLastEventID = v, true
	}
	req.ProtocolVersion, req.UserAgent = m["proto"], m["ua"]
	if v, ok := m["body"]; ok {
		msgs, err := parseMessages(v)
		if err != nil {
			return err
		}
		req.Messages = msgs
		req.Batch = len(msgs) > 1
	}
	if _, ok := m["encoded"]; ok {
		// A body under a Content-Encoding the decoder does not read.
		req.ContentEncoding, req.EncodedUnread, req.BodyBytes = "br", true, 64
	}
	if _, ok := m["answered-early"]; ok {
		// Its response came before its body ended: the body is not read.
		req.AnsweredEarly, req.BodyIncomplete, req.BodyBytes, req.Messages = true, true, 64, nil
	}
	_, nonMCP := m["nonmcp"]
	req.MCP = !nonMCP && (req.HasSessionID || req.ProtocolVersion != "" || hasMethod(req.Messages, "initialize"))
	if nonMCP {
		req.Messages = nil
	}
	x := &specExchange{n: len(c.exchanges) + 1, req: req}
	c.exchanges = append(c.exchanges, x)
	r.emit(c, x, decode.KindRequest)
	return nil
}

func hasMethod(msgs []decode.Message, method string) bool {
	for _, m := range msgs {
		if m.Method == method {
			return true
		}
	}
	return false
}

// current finds the first exchange on c that still needs the given step.
func (r *specRun) current(c *specConn, needResp bool) (*specExchange, error) {
	for _, x := range c.exchanges {
		if x.ended {
			continue
		}
		if needResp && x.resp != nil {
			continue
		}
		if !needResp && x.resp == nil {
			return nil, fmt.Errorf("exchange %d on this connection has no response yet", x.n)
		}
		return x, nil
	}
	return nil, fmt.Errorf("no open exchange on this connection")
}

// response CONN STATUS [session=S] [sse] [proto=V] [norequest] [encoded]
func (r *specRun) response(args []string) error {
	c, err := r.target(args, 2, "response CONN STATUS ...")
	if err != nil {
		return err
	}
	status, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	m := kv(args[2:])
	resp := &decode.Response{Status: status, ContentLength: -1, ProtocolVersion: m["proto"]}
	if v, ok := m["session"]; ok {
		resp.SessionID, resp.HasSessionID = v, true
	}
	if _, ok := m["sse"]; ok {
		resp.SSE, resp.ContentType, resp.Chunked = true, "text/event-stream", true
	} else {
		resp.ContentType = "application/json"
	}
	if _, ok := m["encoded"]; ok {
		// A body under a Content-Encoding the decoder does not read.
		resp.ContentEncoding, resp.EncodedUnread = "br", true
	}
	var x *specExchange
	if _, ok := m["norequest"]; ok {
		x = &specExchange{n: len(c.exchanges) + 1}
		c.exchanges = append(c.exchanges, x)
	} else if x, err = r.current(c, true); err != nil {
		return err
	}
	x.resp = resp
	r.emit(c, x, decode.KindResponse)
	return nil
}

// event CONN [id=X] [type=T] [data=empty] [retry=N] [msg=MSGS] [hash=H]
func (r *specRun) event(args []string) error {
	c, x, err := r.streamTarget(args, 1, "event CONN ...")
	if err != nil {
		return err
	}
	m := kv(args[1:])
	ev := &decode.Event{Index: x.events, Retry: -1}
	x.events++
	if v, ok := m["id"]; ok {
		ev.ID, ev.HasID = v, true
	}
	ev.Type = m["type"]
	if v, ok := m["retry"]; ok {
		ev.Retry, _ = strconv.Atoi(v)
	}
	if v, ok := m["msg"]; ok {
		if ev.Messages, err = parseMessages(v); err != nil {
			return err
		}
	}
	ev.DataEmpty = m["data"] == "empty" || (len(ev.Messages) == 0 && m["data"] == "")
	data := m["data"]
	if v, ok := m["msg"]; ok {
		data = v
	}
	if v, ok := m["hash"]; ok {
		data = v
	}
	ev.DataHash = fakeHash(data)
	o := r.emit(c, x, decode.KindEvent)
	o.Event = ev
	return nil
}

// fakeHash gives each distinct data text a distinct hex digest.
func fakeHash(s string) string {
	return findingID("data", s) + findingID("data2", s)
}

// body CONN MSGS
func (r *specRun) body(args []string) error {
	c, x, err := r.streamTarget(args, 2, "body CONN MSGS")
	if err != nil {
		return err
	}
	msgs, err := parseMessages(strings.TrimPrefix(args[1], "msg="))
	if err != nil {
		return err
	}
	o := r.emit(c, x, decode.KindBody)
	// Its length is its text's: bodies that say other things differ in it.
	o.Body = &decode.Body{Messages: msgs, Batch: len(msgs) > 1, Bytes: int64(len(args[1]))}
	return nil
}

// end CONN clean|truncated|reset|gap|open [partial=X] [last=X] [client-closed] [mid-event] [noresponse]
// noresponse: the exchange ended before any status line came.
func (r *specRun) end(args []string) error {
	c, err := r.target(args, 2, "end CONN HOW")
	if err != nil {
		return err
	}
	x, err := r.current(c, slices.Contains(args[2:], "noresponse"))
	if err != nil {
		return err
	}
	hows := map[string]decode.EndHow{"clean": decode.EndClean, "truncated": decode.EndTruncated, "reset": decode.EndReset, "gap": decode.EndGap, "open": decode.EndUnknown}
	how, ok := hows[args[1]]
	if !ok {
		return fmt.Errorf("unknown end %q", args[1])
	}
	m := kv(args[2:])
	e := &decode.End{How: how, Events: x.events}
	if v, ok := m["partial"]; ok {
		e.PartialID, e.HasPartialID = v, true
	}
	if v, ok := m["last"]; ok {
		e.LastID, e.HasLastID = v, true
	}
	if _, ok := m["client-closed"]; ok {
		e.ClientClosed = true
	}
	if _, ok := m["mid-event"]; ok {
		e.CutMidEvent = true // the connection ended inside an event
	}
	o := r.emit(c, x, decode.KindEnd)
	o.End = e
	x.ended = true
	return nil
}

// gap CONN [client] [notice=SECONDS] [limit=NAME]: notice= makes it the
// decoder's early notice of a gap proven SECONDS later (Gap.Notice); the
// gap itself is a separate line. limit= makes it a limit's momentary gap
// (Gap.Limit, Gap.Momentary): the decoder let go of what it held, or a
// connection picked up again after a capture limit carried what it could
// not read.
func (r *specRun) gap(args []string) error {
	c, err := r.target(args, 1, "gap CONN [client] [notice=SECONDS] [limit=NAME]")
	if err != nil {
		return err
	}
	x := &specExchange{}
	if cur, err := r.current(c, false); err == nil {
		x = cur
	}
	m := kv(args[1:])
	o := r.emit(c, x, decode.KindGap)
	_, fromClient := m["client"]
	o.Gap = &decode.Gap{FromClient: fromClient, Lost: -1}
	if v, ok := m["limit"]; ok {
		o.Gap.Limit, o.Gap.Momentary = v, true
	}
	if v, ok := m["notice"]; ok {
		sec, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("notice=%q: %v", v, err)
		}
		o.Gap.Notice, o.Gap.ProvenAt = true, r.now.Add(time.Duration(sec*float64(time.Second)))
	}
	o.Request, o.Response = nil, nil
	return nil
}

// parseMessages reads a comma-separated list of JSON-RPC message sketches:
//
//	METHOD#ID[:tool=T][:args=A][:token=K][:proto=V][:client=N/V]  request (client: clientInfo, in initialize or _meta)
//	METHOD[:token=K][:progress=P][:total=T][:request=ID] notification (request: a notifications/cancelled's requestId)
//	response#ID[:result=R][:proto=V][:repeatable=T+T][:destructive=T+T][:plain=T+T][:task] response (a tools/list: read-only or idempotent, destructive, and not annotated tools)
//	error#ID[:code=C][:unknownsession]                error (unknownsession: its message says the session is not known)
func parseMessages(s string) ([]decode.Message, error) {
	var out []decode.Message
	for _, item := range strings.Split(s, ",") {
		parts := strings.Split(item, ":")
		head := parts[0]
		var m decode.Message
		name, id, hasID := strings.Cut(head, "#")
		switch {
		case name == "response" && hasID:
			m = decode.Message{Type: decode.MsgResponse, ID: id, ResultHash: "r" + id}
		case name == "error" && hasID:
			m = decode.Message{Type: decode.MsgError, ID: id, ErrorCode: -32603}
		case hasID:
			m = decode.Message{Type: decode.MsgRequest, ID: id, Method: name}
		case name != "":
			m = decode.Message{Type: decode.MsgNotification, Method: name}
		default:
			return nil, fmt.Errorf("empty message in %q", s)
		}
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			switch k {
			case "tool":
				m.Tool = v
			case "args":
				m.ParamsHash = fakeHash(v)
			case "argtext": // what the decoder keeps on opt-in
				m.Arguments = v
			case "token":
				m.ProgressToken = v
			case "progress":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, err
				}
				m.Progress, m.HasProgress = f, true
			case "total":
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, err
				}
				m.ProgressTotal, m.HasTotal = f, true
			case "request":
				m.CancelledID = v
			case "proto":
				m.ProtocolVersion = v
			case "result":
				m.ResultHash = v
			case "repeatable", "destructive", "plain":
				mark := map[string]rune{"repeatable": decode.ToolRepeatable, "destructive": decode.ToolDestructive, "plain": decode.ToolPlain}[k]
				for name := range strings.SplitSeq(v, "+") {
					if m.Tools != "" {
						m.Tools += "\n"
					}
					m.Tools += string(mark) + name
				}
			case "client":
				m.ClientInfo = v
			case "code":
				m.ErrorCode, _ = strconv.Atoi(v)
			case "unknownsession": // the error's message says the session is unknown
				m.UnknownSession = true
			case "task": // the result is a task (tasks extension)
				m.CreatesTask = true
			case "toolerror": // the result says isError: true
				m.ToolError = true
			default:
				return nil, fmt.Errorf("unknown message attribute %q", k)
			}
		}
		if m.Method == "tools/call" && m.ParamsHash == "" {
			m.ParamsHash = fakeHash(m.Tool)
		}
		out = append(out, m)
	}
	return out, nil
}

// expect violation KIND [k=v...] | expect resume [k=v...] | expect session ID [k=v...]
// expect unknown_outcome [k=v...] | expect unverifiable [k=v...] | expect no violation|resume|unknown_outcome|unverifiable
func (r *specRun) expect(n int, raw string, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("empty expect")
	}
	e := specExpect{line: n, what: args[0], raw: raw}
	rest := args[1:]
	switch e.what {
	case "violation":
		if len(rest) == 0 {
			return fmt.Errorf("expect violation needs a kind")
		}
		e.kind, rest = rest[0], rest[1:]
		if SeverityOf(Kind(e.kind)) == "" {
			return fmt.Errorf("unknown violation kind %q", e.kind)
		}
	case "session":
		if len(rest) == 0 {
			return fmt.Errorf("expect session needs an id")
		}
		e.kind, rest = rest[0], rest[1:]
	case "no":
		if len(rest) != 1 {
			return fmt.Errorf("expect no WHAT")
		}
		e.kind, rest = rest[0], nil
	case "resume", "unknown_outcome", "unverifiable", "stream_event":
	default:
		return fmt.Errorf("unknown expectation %q", e.what)
	}
	e.fields = kv(rest)
	r.expects = append(r.expects, e)
	return nil
}

// fieldsOf flattens a record into the names .test files use.
func fieldsOf(rec any) map[string]string {
	f := map[string]string{}
	switch v := rec.(type) {
	case *Violation:
		f["kind"], f["severity"], f["session"], f["new_session"] = string(v.Kind), string(v.Severity), v.SessionID, v.NewSessionID
		f["last_event_id"], f["first_event_id"], f["stream"], f["proto"] = v.LastEventID, v.FirstEventID, v.StreamID, v.ProtocolVersion
		f["client"], f["server"], f["jsonrpc_ids"], f["tool"], f["confidence"] = v.Client, v.Server, strings.Join(v.JSONRPCIDs, ","), v.Tool, v.Confidence
	case *ResumeAttempt:
		f["session"], f["response_session"], f["last_event_id"], f["first_event_id"] = v.SessionID, v.ResponseSession, v.LastEventID, v.FirstEventID
		f["stream"], f["status"], f["outcome"], f["reason"], f["proto"] = v.StreamID, strconv.Itoa(v.Status), string(v.Outcome), v.Reason, v.ProtocolVersion
		f["replayed"], f["violations"] = strconv.Itoa(v.Replayed), strconv.Itoa(len(v.ViolationIDs))
	case *SessionSummary:
		f["id"], f["proto"], f["ended"], f["previous"], f["link"] = v.SessionID, v.ProtocolVersion, v.Ended, v.PreviousSession, v.LinkConfidence
		f["start_seen"], f["resumes"], f["violations"], f["requests"], f["events"], f["streams"] = strconv.FormatBool(v.StartSeen), strconv.Itoa(v.Resumes), strconv.Itoa(v.Violations), strconv.Itoa(v.Requests), strconv.Itoa(v.Events), strconv.Itoa(v.Streams)
	case *UnknownOutcome:
		f["session"], f["jsonrpc_id"], f["method"], f["tool"], f["reason"], f["reissued"] = v.SessionID, v.JSONRPCID, v.Method, v.Tool, v.Reason, v.ReissuedInSession
		f["arguments"] = v.Arguments
	case *Unverifiable:
		f["session"], f["reason"], f["check"] = v.SessionID, v.Reason, v.Check
	case *StreamEvent:
		f["session"], f["stream"], f["event_id"], f["position"] = v.SessionID, v.StreamID, v.EventID, strconv.Itoa(int(v.Position))
		f["delivery"], f["resumed"], f["priming"], f["method"], f["jsonrpc_id"] = strconv.Itoa(v.Delivery), strconv.FormatBool(v.Resumed), strconv.FormatBool(v.Priming), v.Method, v.JSONRPCID
	}
	return f
}

// matches: every k=v of e holds; k~=v means "contains".
func (e specExpect) matches(f map[string]string) bool {
	for k, want := range e.fields {
		if strings.HasSuffix(k, "~") {
			if !strings.Contains(f[strings.TrimSuffix(k, "~")], want) {
				return false
			}
			continue
		}
		got, ok := f[k]
		if !ok || got != want {
			return false
		}
	}
	return true
}

func runSpec(t *testing.T, path string) {
	r := parseSpec(t, path)
	rec := &recorder{}
	d := New(r.cfg, rec)
	for _, o := range r.obs {
		d.Observe(o)
	}
	closeAt := r.closeAt
	if closeAt.IsZero() {
		closeAt = r.now.Add(time.Second)
	}
	d.Close(closeAt)

	groups := map[string][]any{}
	for _, v := range rec.violations {
		groups["violation"] = append(groups["violation"], v)
	}
	for _, v := range rec.resumes {
		groups["resume"] = append(groups["resume"], v)
	}
	for _, v := range rec.sessions {
		groups["session"] = append(groups["session"], v)
	}
	for _, v := range rec.unknowns {
		groups["unknown_outcome"] = append(groups["unknown_outcome"], v)
	}
	for _, v := range rec.unverifiable {
		groups["unverifiable"] = append(groups["unverifiable"], v)
	}
	for _, v := range rec.events {
		groups["stream_event"] = append(groups["stream_event"], v)
	}
	used := map[any]bool{}
	for _, e := range r.expects {
		if e.what == "no" {
			if n := len(groups[e.kind]); n > 0 {
				t.Errorf("%s:%d: %s: got %d: %s", r.file, e.line, e.raw, n, describe(groups[e.kind]))
			}
			continue
		}
		fields := e.fields
		if e.what == "violation" {
			fields["kind"] = e.kind
		}
		if e.what == "session" {
			fields["id"] = e.kind
		}
		found := false
		for _, rec := range groups[e.what] {
			if used[rec] || !e.matches(fieldsOf(rec)) {
				continue
			}
			used[rec], found = true, true
			break
		}
		if !found {
			t.Errorf("%s:%d: not found: %s\n  have %s: %s", r.file, e.line, e.raw, e.what, describe(groups[e.what]))
		}
	}
	// Every violation, resume and unknown outcome must be expected.
	for _, what := range []string{"violation", "resume", "unknown_outcome"} {
		for _, rec := range groups[what] {
			if !used[rec] {
				t.Errorf("%s: unexpected %s: %s", r.file, what, describe([]any{rec}))
			}
		}
	}
	checkRecords(t, r.file, rec)
}

// checkRecords asserts what every record must carry whatever the case.
func checkRecords(t *testing.T, file string, rec *recorder) {
	for _, v := range rec.violations {
		if len(v.ID) != 32 || v.Severity == "" || v.Explanation == "" || len(v.Evidence) == 0 || (v.SessionID == "" && v.Kind != KindResumeOnSessionlessRevision && v.Kind != KindReissuedCallAfterBreak) || v.Client == "" || v.Server == "" || v.Time.IsZero() {
			t.Errorf("%s: incomplete violation %+v", file, v)
		}
		for _, e := range v.Evidence {
			if e.Time.IsZero() || e.What == "" || e.Detail == "" || (e.Conn == "" && e.What != "first delivery") {
				t.Errorf("%s: incomplete evidence %+v in %s", file, e, v.Kind)
			}
		}
	}
	for _, a := range rec.resumes {
		if a.ID == "" || a.Outcome == "" || a.Reason == "" {
			t.Errorf("%s: incomplete resume %+v", file, a)
		}
	}
	// Stream events are stored under their ids: two events of one run
	// sharing an id would collapse into one row.
	ids := map[string]*StreamEvent{}
	for _, e := range rec.events {
		if prev, dup := ids[e.ID]; dup || len(e.ID) != 32 || e.SessionID == "" || e.Time.IsZero() || e.Delivery < 1 {
			t.Errorf("%s: stream event %+v (id also used by %+v)", file, e, prev)
		}
		ids[e.ID] = e
	}
}

func describe(recs []any) string {
	var b strings.Builder
	for _, r := range recs {
		f := fieldsOf(r)
		b.WriteString("\n    ")
		b.WriteString(reflect.TypeOf(r).Elem().Name())
		for _, k := range sortedKeys(f) {
			if f[k] != "" {
				fmt.Fprintf(&b, " %s=%s", k, f[k])
			}
		}
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// TestSpecs runs every testdata/*.test file (format: testdata/README.md).
func TestSpecs(t *testing.T) {
	files, err := filepath.Glob("testdata/*.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.test files")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".test"), func(t *testing.T) { runSpec(t, f) })
	}
}
