package decode

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// summary is a compact, assertable form of observations.
func summary(obs []*Observation) string {
	var parts []string
	for _, o := range obs {
		var s string
		switch o.Kind {
		case KindRequest:
			s = fmt.Sprintf("req%d %s %s", o.Exchange, o.Request.Method, o.Request.Path)
			if o.Request.BodyIncomplete {
				s += " incomplete"
			}
			if o.Request.AnsweredEarly {
				s += " early"
			}
			if len(o.Request.Messages) > 0 {
				s += " " + o.Request.Messages[0].Method
			}
		case KindResponse:
			s = fmt.Sprintf("resp%d %d", o.Exchange, o.Response.Status)
			if o.Request == nil {
				s += " unpaired"
			}
		case KindEvent:
			s = fmt.Sprintf("event%d %q", o.Exchange, o.Event.ID)
		case KindBody:
			s = fmt.Sprintf("body%d %s", o.Exchange, o.Body.Messages[0].Type)
		case KindEnd:
			s = fmt.Sprintf("end%d %s", o.Exchange, o.End.How)
			if o.End.HasPartialID {
				s += fmt.Sprintf(" partial=%q", o.End.PartialID)
			}
		case KindGap:
			s = "gap"
			if o.Gap.Notice {
				s = "notice"
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// splitAt cuts every data step in two at offset n.
func splitAt(n int) splitter {
	return func(b []byte) [][]byte {
		if n <= 0 || n >= len(b) {
			return [][]byte{b}
		}
		return [][]byte{b[:n], b[n:]}
	}
}

func TestHTTPFraming(t *testing.T) {
	const rpc = `{"jsonrpc":"2.0","id":1,"result":{}}` // 36 bytes
	tests := []struct {
		name   string
		script string
		want   string
	}{
		{name: "content-length keep-alive",
			script: "c> GET /a HTTP/1.1\\r\\n\\r\\nGET /b HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Length: 36\\r\\n\\r\\n" + rpc + "HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nhi",
			want:   "req1 GET /a; req2 GET /b; resp1 200; body1 response; end1 clean; resp2 200; end2 clean"},
		{name: "request body by content-length",
			script: "c> POST /mcp HTTP/1.1\\r\\nContent-Length: 40\\r\\n\\r\\n{\"jsonrpc\":\"2.0\",\"method\":\"initialized\"}\ns> HTTP/1.1 202 Accepted\\r\\nContent-Length: 0\\r\\n\\r\\n",
			want:   "req1 POST /mcp initialized; resp1 202; end1 clean"},
		{name: "chunked with extensions and trailers",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\nContent-Type: application/json\\r\\n\\r\\n24;a=b;c=\"d\"\\r\\n" + rpc + "\\r\\n0;last\\r\\nT1: x\\r\\nT2: y\\r\\n\\r\\n",
			want:   "req1 GET /; resp1 200; body1 response; end1 clean"},
		{name: "chunked with bare LF",
			script: "c> GET / HTTP/1.1\\n\\n\ns> HTTP/1.1 200 OK\\nTransfer-Encoding: chunked\\n\\n2\\nhi\\n0\\n\\n",
			want:   "req1 GET /; resp1 200; end1 clean"},
		{name: "body delimited by close",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n" + rpc + "\nfin s",
			want:   "req1 GET /; resp1 200; body1 response; end1 clean"},
		{name: "content-length cut by FIN",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Length: 99\\r\\n\\r\\nshort\nfin s",
			want:   "req1 GET /; resp1 200; end1 truncated"},
		{name: "interim responses skipped",
			script: "c> POST / HTTP/1.1\\r\\nContent-Length: 2\\r\\nExpect: 100-continue\\r\\n\\r\\n\ns> HTTP/1.1 100 Continue\\r\\n\\r\\nHTTP/1.1 103 Early Hints\\r\\nLink: x\\r\\n\\r\\n\nc> {}\ns> HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n",
			want:   "req1 POST /; resp1 200; end1 clean"},
		{name: "HEAD 204 304 have no body",
			script: "c> HEAD / HTTP/1.1\\r\\n\\r\\nGET /x HTTP/1.1\\r\\n\\r\\nGET /y HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Length: 10\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\nHTTP/1.1 204 No Content\\r\\n\\r\\nHTTP/1.1 304 Not Modified\\r\\nContent-Length: 5\\r\\n\\r\\n",
			want:   "req1 HEAD /; req2 GET /x; req3 GET /y; resp1 200; end1 clean; resp2 204; end2 clean; resp3 304; end3 clean"},
		{name: "answered before the request body ended",
			script: "c> POST /mcp HTTP/1.1\\r\\nContent-Length: 40\\r\\n\\r\\n{\"jsonrpc\":\"2.0\",\ns> HTTP/1.1 404 Not Found\\r\\nContent-Length: 0\\r\\n\\r\\n\nc> \"method\":\"initialized\"}POST /b HTTP/1.1\\r\\nContent-Length: 2\\r\\n\\r\\n{}\ns> HTTP/1.1 202 Accepted\\r\\nContent-Length: 0\\r\\n\\r\\n",
			want:   "req1 POST /mcp incomplete early; resp1 404; end1 clean; req2 POST /b; resp2 202; end2 clean"},
		{name: "answer direction lost while the request body arrives",
			script: "c> POST /mcp HTTP/1.1\\r\\nContent-Length: 40\\r\\n\\r\\n{\"jsonrpc\":\"2.0\",\ngap s 142\nc> \"method\":\"initialized\"}",
			want:   "notice; gap; req1 POST /mcp initialized; end1 gap"},
		{name: "response before request unpaired",
			script: "nosyn\ns> HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n",
			want:   "resp1 200 unpaired; end1 clean"},
		{name: "server speaks first is still the server",
			script: "s> HTTP/1.1 408 Request Timeout\\r\\nContent-Length: 0\\r\\n\\r\\n\nc> GET / HTTP/1.1\\r\\n\\r\\n",
			want:   "resp1 408 unpaired; end1 clean; req2 GET /"},
		{name: "request cut by FIN",
			script: "c> POST / HTTP/1.1\\r\\nContent-Length: 10\\r\\n\\r\\nabc\nfin c",
			want:   "req1 POST / incomplete"},
		{name: "request cut by gap then resync",
			script: "c> POST / HTTP/1.1\\r\\nContent-Length: 10\\r\\n\\r\\nabc\ngap c 4\nc> zzz\\r\\nGET /next HTTP/1.1\\r\\n\\r\\n",
			want:   "notice; req1 POST / incomplete; gap; end1 gap; req2 GET /next; end2 gap"},
		{name: "sse event split and partial at reset",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n\\r\\nid: 1\\r\ns> \\ndata: a\\r\\n\\r\\nid: 2\\r\\ndata: b\\r\\n\nclose reset",
			want:   `req1 GET /; resp1 200; event1 "1"; end1 reset partial="2"`},
		{name: "sse with content-length",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\nContent-Length: 21\\r\\n\\r\\nid: 1\\ndata: a\\n\\nid: 9\\n",
			want:   `req1 GET /; resp1 200; event1 "1"; end1 truncated partial="9"`},
		{name: "bad content-length resyncs",
			script: "c> POST / HTTP/1.1\\r\\nContent-Length: 1x\\r\\n\\r\\nGET /ok HTTP/1.1\\r\\n\\r\\n",
			want:   "req1 POST / incomplete; req2 GET /ok"},
		{name: "conflicting content-length resyncs",
			script: "c> POST / HTTP/1.1\\r\\nContent-Length: 1\\r\\nContent-Length: 2\\r\\n\\r\\nGET /ok HTTP/1.1\\r\\n\\r\\n",
			want:   "req1 POST / incomplete; req2 GET /ok"},
		{name: "capture ends after only the client's FIN",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n\\r\\ndata: a\\n\\n\nfin c\nclose fin",
			want:   `req1 GET /; resp1 200; event1 ""; end1 open`},
		{name: "gap before the first bytes is not a non-HTTP start",
			script: "gap c 100\nc> ody\\r\\nGET /after HTTP/1.1\\r\\n\\r\\n",
			want:   "notice; gap; req1 GET /after; end1 gap"},
		{name: "chunked SSE ended by FIN at an event boundary is clean",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n9\\r\\ndata: a\\n\\n\\r\\n\nfin s",
			want:   `req1 GET /; resp1 200; event1 ""; end1 clean`},
		{name: "chunked SSE cut by FIN inside a chunk mid-event",
			script: "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n20\\r\\nid: 4\\ndata: a\\n\nfin s",
			want:   `req1 GET /; resp1 200; end1 truncated partial="4"`},
		{name: "upgrade stops parsing",
			script: "c> GET /ws HTTP/1.1\\r\\nUpgrade: websocket\\r\\n\\r\\n\ns> HTTP/1.1 101 Switching Protocols\\r\\n\\r\\n\\x81\\x05hello\nc> \\x81\\x85abcd",
			want:   "req1 GET /ws"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := parseScript(t, tt.script)
			obs, _ := run(t, DefaultConfig(), whole, sc)
			if got := summary(obs); got != tt.want {
				t.Fatalf("\n got %s\nwant %s", got, tt.want)
			}
			want := render(obs)
			maxLen := 0
			for _, st := range sc.steps {
				maxLen = max(maxLen, len(st.data))
			}
			for n := 1; n < maxLen; n++ {
				obs, _ := run(t, DefaultConfig(), splitAt(n), sc)
				if got := render(obs); got != want {
					t.Fatalf("split at %d differs:\n%s\nwant\n%s", n, got, want)
				}
			}
			for _, split := range []splitter{byteByByte, randomPieces(7)} {
				obs, _ := run(t, DefaultConfig(), split, sc)
				if got := render(obs); got != want {
					t.Fatalf("split delivery differs:\n%s\nwant\n%s", got, want)
				}
			}
		})
	}
}

func TestHTTPHeaders(t *testing.T) {
	tests := []struct {
		name   string
		header string
		check  func(r *Request) bool
	}{
		{"Last-Event-ID", "Last-Event-ID: 3_1", func(r *Request) bool { return r.HasLastEventID && r.LastEventID == "3_1" }},
		{"Last-Event-Id", "Last-Event-Id: 3_1", func(r *Request) bool { return r.HasLastEventID && r.LastEventID == "3_1" }},
		{"last-event-id", "last-event-id:3_1  ", func(r *Request) bool { return r.HasLastEventID && r.LastEventID == "3_1" }},
		{"empty Last-Event-ID is present", "Last-Event-ID:", func(r *Request) bool { return r.HasLastEventID && r.LastEventID == "" }},
		{"mcp-session-id", "mcp-session-id: abc", func(r *Request) bool { return r.HasSessionID && r.SessionID == "abc" && r.MCP }},
		{"protocol version", "MCP-PROTOCOL-VERSION: 2025-06-18", func(r *Request) bool { return r.ProtocolVersion == "2025-06-18" && r.MCP }},
		{"obs-fold", "Mcp-Session-Id: a\\r\\n\\tb", func(r *Request) bool { return r.SessionID == "a b" }},
		{"obs-fold, value on the continuation", "Mcp-Session-Id:\\r\\n\\tb", func(r *Request) bool { return r.SessionID == "b" }},
		{"obs-fold, empty continuation", "Mcp-Session-Id: a\\r\\n \\r\\n\\t", func(r *Request) bool { return r.SessionID == "a" }},
		{"authorization hashed", "Authorization: Bearer x", func(r *Request) bool {
			return r.AuthHash == "e5f7ae6ad8d2d8d0ac8ec5d9ccd0f22e5e58bd9ea3f8fb0ad9fc1aee6b95bea5"[:0]+r.AuthHash && len(r.AuthHash) == 64 && !strings.Contains(fmt.Sprintf("%+v", *r), "Bearer")
		}},
		{"cookie dropped", "Cookie: secret=1", func(r *Request) bool { return !strings.Contains(fmt.Sprintf("%+v", *r), "secret") }},
		{"plain request is not MCP", "Accept: */*", func(r *Request) bool { return !r.MCP && r.Accept == "*/*" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := parseScript(t, "c> GET /mcp HTTP/1.1\\r\\n"+tt.header+"\\r\\n\\r\\n")
			obs, _ := run(t, DefaultConfig(), whole, sc)
			if len(obs) != 1 || obs[0].Kind != KindRequest {
				t.Fatalf("got %s", summary(obs))
			}
			if !tt.check(obs[0].Request) {
				t.Errorf("request %+v", *obs[0].Request)
			}
		})
	}
}

func TestNonHTTPConnectionsGivenUpCheaply(t *testing.T) {
	binary := strings.Repeat("\\x00\\x01\\x02binary\\n", 1000) // 10 KB a step
	tests := []struct {
		name       string
		script     string
		nonHTTP    int64
		maxSkipped int64
	}{
		{name: "TLS with handshake", script: "c> \\x16\\x03\\x01\\x00\\xa5\\x01\\x00", nonHTTP: 1},
		{name: "SSH banner with handshake", script: "s> SSH-2.0-OpenSSH_9.6\\r\\n\nc> SSH-2.0-Go\\r\\n", nonHTTP: 1},
		{name: "binary without handshake", script: "nosyn\n" + strings.Repeat("c> "+binary+"\n", 10), nonHTTP: 1, maxSkipped: NonHTTPScanLimit + 10<<10},
		{name: "text without handshake is skipped, not given up",
			script: "nosyn\n" + strings.Repeat("s> data: {\"jsonrpc\":\"2.0\"}\\n\\n\n", 5000) + "C> GET / HTTP/1.1\nC>", nonHTTP: 0, maxSkipped: 200 << 10},
		{name: "HTTP after junk without handshake", script: "nosyn\nc> " + binary + "\nC> GET / HTTP/1.1\nC>", nonHTTP: 0, maxSkipped: 10 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := parseScript(t, tt.script)
			_, st := run(t, DefaultConfig(), whole, sc)
			if st.NonHTTPConnections != tt.nonHTTP {
				t.Errorf("NonHTTPConnections = %d, want %d", st.NonHTTPConnections, tt.nonHTTP)
			}
			if st.ResyncSkippedBytes > tt.maxSkipped {
				t.Errorf("scanned %d bytes, want at most %d", st.ResyncSkippedBytes, tt.maxSkipped)
			}
		})
	}
}

// TestPickedUpConnectionReportsWhatItCannotRead: a connection capture picks
// up again after a limit let it go reports, once, a momentary gap naming
// the limit when it must skip bytes to find its place (the rest of an event
// stream) or when an answer comes whose request was sent before the let-go;
// one that goes on with a new request reads it and reports nothing. A
// connection first seen mid-stream (nosyn) reports nothing either: the
// capture began after it, and nothing before it was judged whole.
func TestPickedUpConnectionReportsWhatItCannotRead(t *testing.T) {
	stream := "s> id: s_3\\ndata: {}\\n\\nid: s_4\\ndata: {}\\n\\n\n"
	request := "C> POST /mcp HTTP/1.1\nC> Content-Length: 0\nC>\n"
	answer := "S> HTTP/1.1 200 OK\nS> Content-Length: 0\nS>\n"
	tests := []struct {
		name, script string
		gaps         []string
	}{
		{"the rest of an event stream", "pickedup capture.IdleTimeout\n" + stream + stream, []string{"capture.IdleTimeout from server"}},
		{"an answer to a request sent before", "pickedup capture.MaxConnections\n" + answer + request + answer, []string{"capture.MaxConnections from server"}},
		{"a new request", "pickedup capture.IdleTimeout\n" + request + answer, nil},
		{"mid-stream from the capture's start", "nosyn\n" + stream + answer, nil},
	}
	for _, tt := range tests {
		for _, split := range []splitter{whole, byteByByte} {
			obs, _ := run(t, DefaultConfig(), split, parseScript(t, tt.script))
			var gaps []string
			for _, o := range obs {
				if o.Kind == KindGap {
					from := "server"
					if o.Gap.FromClient {
						from = "client"
					}
					if !o.Gap.Momentary {
						from += " not momentary"
					}
					gaps = append(gaps, o.Gap.Limit+" from "+from)
				}
			}
			if !slices.Equal(gaps, tt.gaps) {
				t.Errorf("%s: gaps %q, want %q", tt.name, gaps, tt.gaps)
			}
		}
	}
}

// refHeaderLines is the callback walk headerIter replaced, kept as the
// reference it must agree with.
func refHeaderLines(head []byte, fn func(name, value []byte)) bool {
	lower := func(name []byte) []byte {
		if len(name) > maxKnownHeaderName {
			return nil
		}
		out := make([]byte, len(name))
		for i, c := range name {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			out[i] = c
		}
		return out
	}
	i := bytes.IndexByte(head, '\n')
	head = head[i+1:]
	var name, value []byte
	folded := false
	ok := true
	emit := func() {
		if folded {
			value = trimOWS(value)
		}
		fn(lower(name), value)
	}
	for len(head) > 0 {
		j := bytes.IndexByte(head, '\n')
		line := trimEOL(head[:j+1])
		head = head[j+1:]
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if name == nil {
				ok = false
				continue
			}
			if !folded {
				value = append([]byte(nil), value...)
				folded = true
			}
			value = append(append(value, ' '), trimOWS(line)...)
			continue
		}
		if name != nil {
			emit()
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			name, ok = nil, false
			continue
		}
		name, value, folded = line[:colon], trimOWS(line[colon+1:]), false
		if bytes.ContainsAny(name, " \t\r\n") {
			name, ok = nil, false
		}
	}
	if name != nil {
		emit()
	}
	return ok
}

// TestHeaderIterMatchesReference compares headerIter with refHeaderLines on
// random heads built from the bytes that matter to it: line ends, colons,
// whitespace, case, and names around maxKnownHeaderName long.
func TestHeaderIterMatchesReference(t *testing.T) {
	pieces := []string{"\r\n", "\n", ":", " ", "\t", "\r", "Host", "x", "Content-LENGTH", "a: b", " folded",
		"\t tab", strings.Repeat("N", maxKnownHeaderName), strings.Repeat("n", maxKnownHeaderName+1), ": v ", "\r\n\r\n", "\x00", "A\x00:",
		"@[`{AZaz", "\xc1\xda\xe1", "Mcp-Session-Id", "X-Long-Header-Name-Here:"}
	rng := rand.New(rand.NewPCG(1, 2))
	var lower [maxKnownHeaderName]byte
	for n := 0; n < 300000; n++ {
		head := []byte("GET / HTTP/1.1\r\n")
		if n%7 == 0 {
			head = head[:0]
		}
		for k := rng.IntN(12); k > 0; k-- {
			head = append(head, pieces[rng.IntN(len(pieces))]...)
		}
		var want, got []string
		wantOK := refHeaderLines(head, func(name, value []byte) {
			want = append(want, fmt.Sprintf("%q=%q", name, value))
		})
		it := newHeaderIter(head, &lower)
		for {
			name, value, more := it.next()
			if !more {
				break
			}
			got = append(got, fmt.Sprintf("%q=%q", name, value))
		}
		if !slices.Equal(got, want) || it.bad == wantOK {
			t.Fatalf("head %q:\n got %v bad=%v\nwant %v ok=%v", head, got, it.bad, want, wantOK)
		}
	}
}

// Start lines past MaxStartLineBytes (8 KiB) are legal (RFC 9112 asks for at
// least 8,000 bytes; servers take 16 KiB and more): within MaxHeaderBytes
// they are read as any other, at a captured connection start and on a
// keep-alive connection; one past even that is skipped, as any line that is
// not a start line, without giving the connection up.
func TestLongStartLines(t *testing.T) {
	long := "/mcp?token=" + strings.Repeat("a", 9000)
	over := "/mcp?token=" + strings.Repeat("a", DefaultMaxHeaderBytes)
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	post := func(target string) string {
		return "C> POST " + target + " HTTP/1.1\nC> Content-Length: " + strconv.Itoa(len(body)) + "\nC>\nc> " + body + "\n"
	}
	const ok = "S> HTTP/1.1 200 OK\nS> Content-Length: 0\nS>\n"
	for _, tc := range []struct {
		name, script string
		want         string // observation kinds
		paths        int    // requests for /mcp
	}{
		{"request line at a captured start",
			"C> GET " + long + " HTTP/1.1\nC> Mcp-Session-Id: s1\nC>\n" +
				"S> HTTP/1.1 200 OK\nS> Content-Type: text/event-stream\nS> Content-Length: 15\nS>\ns> id: 1\\ndata: x\\n\\n\n" +
				post("/mcp") + ok,
			"request response event end request response end", 2},
		{"request lines on a keep-alive connection",
			post("/mcp") + ok + post(long) + post("/mcp") + ok + ok,
			"request response end request request response end response end", 3},
		{"status line",
			post("/mcp") + "S> HTTP/1.1 200 O" + strings.Repeat("K", 9000) + "\nS> Content-Length: 0\nS>\n" + post("/mcp") + ok,
			"request response end request response end", 2},
		{"request line past MaxHeaderBytes at a captured start",
			"C> GET " + over + " HTTP/1.1\nC> Mcp-Session-Id: s1\nC>\n" + post("/mcp") + ok + ok,
			// The skipped request is a momentary gap, and the answers
			// pair with no request: which is whose is not known.
			"gap request end response end response end", 1},
	} {
		twoIn := func(b []byte) [][]byte { // a segment boundary in the line's first bytes
			if len(b) <= 2 {
				return [][]byte{b}
			}
			return [][]byte{b[:2], b[2:]}
		}
		for name, split := range map[string]splitter{"whole": whole, "pieces": randomPieces(7), "two bytes in": twoIn} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				obs, st := run(t, DefaultConfig(), split, parseScript(t, tc.script))
				var kinds []string
				paths := 0
				for _, o := range obs {
					kinds = append(kinds, o.Kind.String())
					if o.Kind == KindRequest && strings.HasPrefix(o.Request.Path, "/mcp") {
						paths++
					}
				}
				if got := strings.Join(kinds, " "); got != tc.want || paths != tc.paths || st.NonHTTPConnections != 0 {
					t.Fatalf("got %q, %d requests for /mcp, NonHTTPConnections %d; want %q, %d\n%s",
						got, paths, st.NonHTTPConnections, tc.want, tc.paths, render(obs))
				}
			})
		}
	}
}

func TestParseChunkSize(t *testing.T) {
	for _, tc := range []struct {
		line string
		n    int64
		ok   bool
	}{
		{"5\r\n", 5, true},
		{"1a;name=\"x;y\"\r\n", 26, true},
		{"0000000000000005\r\n", 5, true}, // leading zeros: 1*HEXDIG, any number of them
		{"00000000000000000\r\n", 0, true},
		{"7fffffffffffffff\r\n", 0, false}, // past what is worth reading
		{"fffffffffffffff\r\n", 1<<60 - 1, true},
		{"\r\n", 0, false},
		{"5x\r\n", 0, false},
	} {
		n, ok := parseChunkSize([]byte(tc.line))
		if n != tc.n || ok != tc.ok {
			t.Errorf("parseChunkSize(%q) = %d, %v; want %d, %v", tc.line, n, ok, tc.n, tc.ok)
		}
	}
}
