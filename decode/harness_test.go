package decode

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite decode/testdata/golden from the decoder's output")

// A stream script describes one TCP connection as text, one step a line:
//
//	# comment
//	nosyn               the capture missed the handshake (first line, optional)
//	pickedup LIMIT      the same, for a connection picked up again after a
//	                    capture limit let it go (ConnMeta.PickedUpAfter)
//	C> text             client bytes: text with escapes, then CRLF
//	c> text             client bytes: text with escapes, nothing added
//	S> text / s> text   the same from the server
//	gap c|s N           capture lost N bytes (-1: unknown)
//	fin c|s             FIN from one side
//	close fin|reset|eof|idle
//	limit header|body|line|event N   set a Config limit for this script
//	arguments N         keep tool arguments, at most N bytes (0: the default)
//
// Escapes: \r \n \t \\ \xHH. Each step is 1ms after the previous one. The
// client is endpoint A unless the first data step is from the server.
type step struct {
	op    string // "data", "gap", "fin", "close"
	fromA bool
	data  []byte
	n     int
	close CloseReason
}

type script struct {
	syn      bool
	pickedUp string // ConnMeta.PickedUpAfter
	cfg      Config
	steps    []step
}

func parseScript(t testing.TB, text string) script {
	t.Helper()
	sc := script{syn: true, cfg: DefaultConfig()}
	sides := map[string]bool{"c": true, "s": false}
	r := bufio.NewScanner(strings.NewReader(text))
	r.Buffer(nil, 1<<20)
	for line := 1; r.Scan(); line++ {
		l := r.Text()
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if l == "nosyn" {
			sc.syn = false
			continue
		}
		if len(l) >= 2 && l[1] == '>' {
			text := strings.TrimPrefix(l[2:], " ")
			b := unescape(t, text)
			if l[0] == 'C' || l[0] == 'S' {
				b = append(b, '\r', '\n')
			}
			fromA := l[0] == 'C' || l[0] == 'c'
			sc.steps = append(sc.steps, step{op: "data", fromA: fromA, data: b})
			continue
		}
		f := strings.Fields(l)
		switch {
		case f[0] == "pickedup" && len(f) == 2:
			sc.syn, sc.pickedUp = false, f[1]
		case f[0] == "gap" && len(f) == 3:
			n, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			sc.steps = append(sc.steps, step{op: "gap", fromA: sides[f[1]], n: n})
		case f[0] == "limit" && len(f) == 3:
			n, err := strconv.Atoi(f[2])
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			limits := map[string]*int{"header": &sc.cfg.MaxHeaderBytes, "body": &sc.cfg.MaxBodyBytes,
				"line": &sc.cfg.MaxSSELineBytes, "event": &sc.cfg.MaxEventBytes}
			if limits[f[1]] == nil {
				t.Fatalf("line %d: unknown limit %q", line, f[1])
			}
			*limits[f[1]] = n
		case f[0] == "arguments" && len(f) == 2:
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			sc.cfg.KeepToolArguments, sc.cfg.MaxArgumentBytes = true, n
		case f[0] == "fin" && len(f) == 2:
			sc.steps = append(sc.steps, step{op: "fin", fromA: sides[f[1]]})
		case f[0] == "close" && len(f) == 2:
			reasons := map[string]CloseReason{"fin": CloseFIN, "reset": CloseReset, "eof": CloseEOF, "idle": CloseIdle}
			sc.steps = append(sc.steps, step{op: "close", close: reasons[f[1]]})
		default:
			t.Fatalf("line %d: cannot parse %q", line, l)
		}
	}
	return sc
}

func unescape(t testing.TB, s string) []byte {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b = append(b, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'r':
			b = append(b, '\r')
		case 'n':
			b = append(b, '\n')
		case 't':
			b = append(b, '\t')
		case '0':
			b = append(b, 0)
		case 'x':
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				t.Fatalf("bad escape in %q", s)
			}
			b = append(b, byte(v))
			i += 2
		default:
			b = append(b, s[i])
		}
	}
	return b
}

var (
	testBase   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	testClient = netip.MustParseAddrPort("10.0.0.1:40000")
	testServer = netip.MustParseAddrPort("10.0.0.2:8080")
)

// splitter cuts one Data step into the pieces delivered.
type splitter func(b []byte) [][]byte

func whole(b []byte) [][]byte { return [][]byte{b} }

func byteByByte(b []byte) [][]byte {
	out := make([][]byte, len(b))
	for i := range b {
		out[i] = b[i : i+1]
	}
	return out
}

func randomPieces(seed int64) splitter {
	rng := rand.New(rand.NewSource(seed))
	return func(b []byte) [][]byte {
		var out [][]byte
		for len(b) > 0 {
			n := 1 + rng.Intn(len(b))
			if rng.Intn(2) == 0 && n > 7 {
				n = 1 + rng.Intn(7)
			}
			out = append(out, b[:n])
			b = b[n:]
		}
		return out
	}
}

// run replays scripts as connections 1..n through one pipeline and returns
// what out received.
func run(t testing.TB, cfg Config, split splitter, scripts ...script) ([]*Observation, Stats) {
	t.Helper()
	var got []*Observation
	p := NewPipeline(cfg, 1, func(o *Observation) { got = append(got, o) })
	f := p.Factory(0)
	for i, sc := range scripts {
		meta := ConnMeta{ID: uint64(i + 1), A: testClient, B: testServer, Start: testBase, SawSYN: sc.syn, PickedUpAfter: sc.pickedUp}
		s := f.NewStream(meta)
		closed := false
		for j, st := range sc.steps {
			ts := testBase.Add(time.Duration(j+1) * time.Millisecond)
			switch st.op {
			case "data":
				for _, piece := range split(st.data) {
					// The decoder must not keep p past the call.
					cp := append([]byte(nil), piece...)
					s.Data(st.fromA, cp, ts)
					for k := range cp {
						cp[k] = 0xAA
					}
				}
			case "gap":
				s.Gap(st.fromA, st.n, ts)
			case "fin":
				s.Fin(st.fromA, ts)
			case "close":
				s.Close(st.close, ts)
				closed = true
			}
			f.Tick(ts)
		}
		if !closed {
			s.Close(CloseEOF, testBase.Add(time.Duration(len(sc.steps)+1)*time.Millisecond))
		}
	}
	f.Done()
	p.Close()
	return got, p.Stats()
}

// keepObservation copies what a consumer of Config.ReuseObservations may
// keep of an observation: the observation, its parts and their Messages, an
// event's DataHash.
func keepObservation(o *Observation) *Observation {
	c := *o
	if o.Event != nil {
		ev := *o.Event
		ev.Messages = slices.Clone(ev.Messages)
		ev.DataHash = strings.Clone(ev.DataHash)
		c.Event = &ev
	}
	if o.Body != nil {
		b := *o.Body
		b.Messages = slices.Clone(b.Messages)
		c.Body = &b
	}
	if o.End != nil {
		e := *o.End
		c.End = &e
	}
	if o.Response != nil {
		r := *o.Response
		c.Response = &r
	}
	if o.Request != nil {
		c.Request = cloneRequest(o.Request)
	}
	return &c
}

func cloneRequest(r *Request) *Request {
	c := *r
	c.Messages = slices.Clone(r.Messages)
	return &c
}

func short(h string) string {
	if len(h) > 8 {
		return h[:8]
	}
	return h
}

func renderMessages(b *strings.Builder, msgs []Message) {
	for _, m := range msgs {
		fmt.Fprintf(b, "\n    msg %s", m.Type)
		if m.ID != "" {
			fmt.Fprintf(b, " id=%s", m.ID)
		}
		if m.Method != "" {
			fmt.Fprintf(b, " method=%s", m.Method)
		}
		if m.Tool != "" {
			fmt.Fprintf(b, " tool=%s", m.Tool)
		}
		if m.ParamsHash != "" {
			fmt.Fprintf(b, " params=%s", short(m.ParamsHash))
		}
		if m.Arguments != "" {
			fmt.Fprintf(b, " args=%q", m.Arguments)
		}
		if m.ArgumentsTruncated {
			b.WriteString(" args-truncated")
		}
		if m.ProgressToken != "" {
			fmt.Fprintf(b, " progressToken=%s", m.ProgressToken)
		}
		if m.HasProgress {
			fmt.Fprintf(b, " progress=%g", m.Progress)
		}
		if m.HasTotal {
			fmt.Fprintf(b, " total=%g", m.ProgressTotal)
		}
		if m.CancelledID != "" {
			fmt.Fprintf(b, " cancelled=%s", m.CancelledID)
		}
		if m.ProtocolVersion != "" {
			fmt.Fprintf(b, " version=%s", m.ProtocolVersion)
		}
		if m.Type == MsgError {
			fmt.Fprintf(b, " code=%d", m.ErrorCode)
		}
		if m.ResultHash != "" {
			fmt.Fprintf(b, " result=%s", short(m.ResultHash))
		}
	}
}

// render is the readable form of observations used by the golden files.
func render(obs []*Observation) string {
	var b strings.Builder
	for _, o := range obs {
		fmt.Fprintf(&b, "%s %s ex=%d %s", o.Time.Sub(testBase), o.Conn, o.Exchange, o.Kind)
		switch o.Kind {
		case KindRequest:
			r := o.Request
			fmt.Fprintf(&b, " %s %s host=%q mcp=%v body=%d", r.Method, r.Path, r.Host, r.MCP, r.BodyBytes)
			if r.HasSessionID {
				fmt.Fprintf(&b, " session=%q", r.SessionID)
			}
			if r.HasLastEventID {
				fmt.Fprintf(&b, " last-event-id=%q", r.LastEventID)
			}
			if r.ProtocolVersion != "" {
				fmt.Fprintf(&b, " version=%q", r.ProtocolVersion)
			}
			if r.AuthHash != "" {
				fmt.Fprintf(&b, " auth=%s", short(r.AuthHash))
			}
			if r.ContentEncoding != "" {
				fmt.Fprintf(&b, " encoding=%q", r.ContentEncoding)
			}
			if r.EncodedUnread {
				b.WriteString(" unread")
			}
			if r.BodyIncomplete {
				b.WriteString(" incomplete")
			}
			if r.HeadTruncated {
				b.WriteString(" head-truncated")
			}
			if r.Batch {
				b.WriteString(" batch")
			}
			renderMessages(&b, r.Messages)
		case KindResponse:
			r := o.Response
			fmt.Fprintf(&b, " %d type=%q sse=%v chunked=%v length=%d", r.Status, r.ContentType, r.SSE, r.Chunked, r.ContentLength)
			if r.HasSessionID {
				fmt.Fprintf(&b, " session=%q", r.SessionID)
			}
			if r.ContentEncoding != "" {
				fmt.Fprintf(&b, " encoding=%q", r.ContentEncoding)
			}
			if r.EncodedUnread {
				b.WriteString(" unread")
			}
			if r.HeadTruncated {
				b.WriteString(" head-truncated")
			}
			if o.Request != nil {
				fmt.Fprintf(&b, " for=%s", o.Request.Method)
			}
		case KindEvent:
			e := o.Event
			fmt.Fprintf(&b, " #%d", e.Index)
			if e.HasID {
				fmt.Fprintf(&b, " id=%q", e.ID)
			}
			fmt.Fprintf(&b, " last=%q", e.LastEventID)
			if e.Type != "" {
				fmt.Fprintf(&b, " type=%q", e.Type)
			}
			if e.Retry >= 0 {
				fmt.Fprintf(&b, " retry=%d", e.Retry)
			}
			fmt.Fprintf(&b, " data=%d/%s empty=%v", e.DataBytes, short(e.DataHash), e.DataEmpty)
			if e.DataTruncated {
				b.WriteString(" truncated")
			}
			renderMessages(&b, e.Messages)
		case KindBody:
			fmt.Fprintf(&b, " bytes=%d batch=%v", o.Body.Bytes, o.Body.Batch)
			renderMessages(&b, o.Body.Messages)
		case KindEnd:
			e := o.End
			fmt.Fprintf(&b, " %s events=%d", e.How, e.Events)
			if e.ClientClosed {
				b.WriteString(" client-closed")
			}
			if e.HasPartialID {
				fmt.Fprintf(&b, " partial=%q", e.PartialID)
			}
			if e.CutMidEvent {
				b.WriteString(" mid-event")
			}
			if e.HasLastID {
				fmt.Fprintf(&b, " last=%q", e.LastID)
			}
			if e.Limit != "" {
				fmt.Fprintf(&b, " limit=%s", e.Limit)
			}
		case KindGap:
			fmt.Fprintf(&b, " fromClient=%v lost=%d", o.Gap.FromClient, o.Gap.Lost)
			if o.Gap.Notice {
				fmt.Fprintf(&b, " notice provenAt=%s", o.Gap.ProvenAt.Sub(testBase))
			}
			if o.Gap.Limit != "" {
				fmt.Fprintf(&b, " limit=%s ended=%v", o.Gap.Limit, o.Gap.Ended)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func renderStats(s Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "stats: conns=%d nonhttp=%d exchanges=%d mcp=%d nonmcp=%d sse=%d events=%d nonmcpsse=%d rpc=%d",
		s.Connections, s.NonHTTPConnections, s.HTTPExchanges, s.MCPExchanges, s.NonMCPExchanges,
		s.SSEStreams, s.SSEEvents, s.NonMCPSSEStreams, s.JSONRPCMessages)
	fmt.Fprintf(&b, " resyncs=%d skipped=%d gaps=%d limits=%d/%d/%d/%d",
		s.Resyncs, s.ResyncSkippedBytes, s.Gaps, s.HeaderLimitHits, s.LineLimitHits, s.EventLimitHits, s.BodyLimitHits)
	if s.TLSConnections > 0 {
		fmt.Fprintf(&b, " tls=%d", s.TLSConnections)
	}
	if s.ProxyHeaders > 0 {
		fmt.Fprintf(&b, " proxyheaders=%d", s.ProxyHeaders)
	}
	if s.HTTP2Connections > 0 {
		fmt.Fprintf(&b, " http2=%d http2bytes=%d", s.HTTP2Connections, s.HTTP2Bytes)
	}
	if s.InflatedBodies+s.EncodedUnread+s.InflateLimitHits > 0 {
		fmt.Fprintf(&b, " inflated=%d unread=%d inflate-limit=%d", s.InflatedBodies, s.EncodedUnread, s.InflateLimitHits)
	}
	for _, name := range parseErrNames {
		if n := s.ParseErrors[name]; n > 0 {
			fmt.Fprintf(&b, " %s=%d", name, n)
		}
	}
	return b.String() + "\n"
}
