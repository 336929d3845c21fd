package main

// The committed ts- fixtures have the traffic shape their specs claim, as
// tshark (an independent HTTP dissector) reads them. This checks the
// recordings, not replaywatch: the spec test in cmd/replaywatch checks the
// pipeline against the same files.

import (
	"encoding/hex"
	"fmt"
	"github.com/replaywatch/replaywatch/test/testenv"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const tsFixtureDir = "../../pipeline/testdata/fixtures"

// httpMsg is one HTTP request or response head as tshark dissected it.
type httpMsg struct {
	stream  int
	request bool
	method  string
	status  int
	headers map[string]string // lower-case names
}

// tsCapture is a fixture as tshark sees it: HTTP heads in capture order and
// each TCP stream's bytes per direction.
type tsCapture struct {
	msgs       []httpMsg
	fromServer map[int]string
	fromClient map[int]string
}

// exchange pairs a request with its response (nil if none was captured).
type exchange struct {
	req, resp *httpMsg
}

func (c *tsCapture) exchanges() []exchange {
	var out []exchange
	open := map[int][]int{} // stream -> indexes into out awaiting a response
	for i := range c.msgs {
		m := &c.msgs[i]
		if m.request {
			open[m.stream] = append(open[m.stream], len(out))
			out = append(out, exchange{req: m})
			continue
		}
		if q := open[m.stream]; len(q) > 0 {
			out[q[0]].resp = m
			open[m.stream] = q[1:]
		}
	}
	return out
}

// resumes are the exchanges whose request carries Last-Event-ID.
func (c *tsCapture) resumes() []exchange {
	var out []exchange
	for _, x := range c.exchanges() {
		if x.req.headers["last-event-id"] != "" {
			out = append(out, x)
		}
	}
	return out
}

// sessions lists the session ids minted by initialize responses (on the wire).
func (c *tsCapture) sessions() []string {
	var out []string
	for _, x := range c.exchanges() {
		if x.req.method == "POST" && x.req.headers["mcp-session-id"] == "" && x.resp != nil && x.resp.headers["mcp-session-id"] != "" {
			out = append(out, x.resp.headers["mcp-session-id"])
		}
	}
	return out
}

func tshark(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark %v: %v", args, err)
	}
	return string(out)
}

func readTSCapture(t *testing.T, path string) *tsCapture {
	c := &tsCapture{fromServer: map[int]string{}, fromClient: map[int]string{}}
	heads := tshark(t, "-r", path, "-o", "http.desegment_body:FALSE", "-Y", "http.request or http.response",
		"-T", "fields", "-E", "separator=|", "-e", "tcp.stream", "-e", "http.request.method",
		"-e", "http.response.code", "-e", "http.request.line", "-e", "http.response.line")
	for _, line := range strings.Split(strings.TrimSpace(heads), "\n") {
		f := strings.SplitN(line, "|", 5)
		if len(f) != 5 {
			t.Fatalf("tshark line %q", line)
		}
		m := httpMsg{headers: map[string]string{}, method: f[1], request: f[1] != ""}
		m.stream, _ = strconv.Atoi(f[0])
		m.status, _ = strconv.Atoi(f[2])
		for _, h := range strings.Split(f[3]+f[4], `\r\n`) {
			name, value, ok := strings.Cut(strings.TrimPrefix(h, ","), ":")
			if ok {
				m.headers[strings.ToLower(name)] = strings.TrimSpace(value)
			}
		}
		c.msgs = append(c.msgs, m)
	}
	// The client is the side that sent the SYN (the first packet of a stream).
	payloads := tshark(t, "-r", path, "-T", "fields", "-E", "separator=|", "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.payload")
	clientPort := map[int]string{}
	for _, line := range strings.Split(strings.TrimSpace(payloads), "\n") {
		f := strings.SplitN(line, "|", 3)
		s, _ := strconv.Atoi(f[0])
		if _, ok := clientPort[s]; !ok {
			clientPort[s] = f[1]
		}
		b, err := hex.DecodeString(strings.ReplaceAll(f[2], ":", ""))
		if err != nil || len(b) == 0 {
			continue
		}
		if f[1] == clientPort[s] {
			c.fromClient[s] += string(b)
		} else {
			c.fromServer[s] += string(b)
		}
	}
	return c
}

var sseID = regexp.MustCompile(`(?m)^id: (\S+)$`)

// ids lists the SSE event ids in s in order.
func ids(s string) []string {
	var out []string
	for _, m := range sseID.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// oneResume returns the capture's only resume, answered.
func oneResume(c *tsCapture) (exchange, error) {
	rs := c.resumes()
	if len(rs) != 1 || rs[0].resp == nil {
		return exchange{}, fmt.Errorf("want exactly one answered resume, got %d", len(rs))
	}
	return rs[0], nil
}

// sameSessionResume checks the only resume was answered 200 on its own
// session and returns it.
func sameSessionResume(c *tsCapture) (exchange, error) {
	r, err := oneResume(c)
	if err != nil {
		return r, err
	}
	if r.resp.status != 200 || r.resp.headers["mcp-session-id"] != r.req.headers["mcp-session-id"] {
		return r, fmt.Errorf("resume answered %d with session %q, want 200 on %q", r.resp.status, r.resp.headers["mcp-session-id"], r.req.headers["mcp-session-id"])
	}
	return r, nil
}

func want(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func TestTSFixtureShapes(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		if testenv.InCI() {
			t.Fatal("tshark is needed (scripts/test.sh installs it)")
		}
		t.Skip("tshark not installed")
	}
	cases := []struct {
		name  string
		check func(c *tsCapture) error
	}{
		{"ts-correct-resume", func(c *tsCapture) error {
			r, err := sameSessionResume(c)
			if err != nil {
				return err
			}
			replay := c.fromServer[r.req.stream]
			return want(strings.Contains(replay, "wrote resume-me") && !strings.Contains(replay, "id: "+r.req.headers["last-event-id"]+"\n"),
				"resume stream lacks the result or repeats the cursor event")
		}},
		{"ts-priming-polling", func(c *tsCapture) error {
			if _, err := sameSessionResume(c); err != nil {
				return err
			}
			return want(strings.Contains(allFrom(c.fromServer), "retry: 300\ndata: \n\n"), "no priming event with retry: 300")
		}},
		{"ts-get-stream-not-resumable", func(c *tsCapture) error {
			r, err := sameSessionResume(c)
			if err != nil {
				return err
			}
			return want(strings.HasPrefix(r.req.headers["last-event-id"], "_GET_stream_") && len(ids(c.fromServer[r.req.stream])) == 0,
				"want a _GET_stream_ cursor answered with no events, got %q", r.req.headers["last-event-id"])
		}},
		{"ts-session-swap", func(c *tsCapture) error {
			r, err := oneResume(c)
			if err != nil {
				return err
			}
			got, sent := r.resp.headers["mcp-session-id"], r.req.headers["mcp-session-id"]
			return want(r.resp.status == 200 && got != "" && got != sent, "resume with %s answered %d with session %q, want 200 with another", sent, r.resp.status, got)
		}},
		{"ts-unknown-id-accepted", func(c *tsCapture) error {
			r, err := sameSessionResume(c)
			if err != nil {
				return err
			}
			return want(r.req.headers["last-event-id"] == tsForeignEventID && len(ids(c.fromServer[r.req.stream])) == 0,
				"want the forged cursor answered with no events, got %q", r.req.headers["last-event-id"])
		}},
		{"ts-truncated-resume", func(c *tsCapture) error {
			r, err := sameSessionResume(c)
			if err != nil {
				return err
			}
			cursor := r.req.headers["last-event-id"]
			for s, b := range c.fromServer {
				if strings.Contains(b, "id: "+cursor+"\n") {
					cut := strings.HasSuffix(b, "id: "+cursor+"\n")
					return want(cut && s != r.req.stream && strings.Contains(c.fromServer[r.req.stream], `"progress":4`) &&
						!strings.Contains(allFrom(c.fromServer), `"progress":3`),
						"cursor %s: stream %d does not end right after its id line, or progress 3 was delivered", cursor, s)
				}
			}
			return fmt.Errorf("cursor %s never seen as an id line", cursor)
		}},
		{"ts-reinit-after-404-retool", func(c *tsCapture) error {
			if err := lostThenNew(c); err != nil {
				return err
			}
			call := `{"method":"tools/call","params":{"name":"slow_write","arguments":{"label":"pay-invoice-42","steps":4,"delayMs":150},"_meta":{"progressToken":1}},"jsonrpc":"2.0","id":1}`
			return want(strings.Count(allFrom(c.fromClient), call) == 2, "the identical tools/call is not on the wire twice")
		}},
		{"ts-reinit-after-404-lasteventid", func(c *tsCapture) error {
			if err := lostThenNew(c); err != nil {
				return err
			}
			ss := c.sessions()
			for _, r := range c.resumes() {
				if r.req.headers["mcp-session-id"] == ss[1] {
					return want(r.resp != nil && r.resp.status == 200 && slices.Contains(ids(allFrom(c.fromServer)), r.req.headers["last-event-id"]),
						"S2's resume is not answered 200 or its cursor was never issued")
				}
			}
			return fmt.Errorf("no resume on S2")
		}},
		{"ts-calls-given-up", func(c *tsCapture) error {
			var client, server string
			for s, b := range c.fromClient {
				client += b
				server += c.fromServer[s]
			}
			if n := strings.Count(client, `"method":"notifications/cancelled"`); n != 2 {
				return fmt.Errorf("%d notifications/cancelled from the client, want 2", n)
			}
			if len(ids(server)) != 0 {
				return fmt.Errorf("event ids %v: the server was to run without an event store", ids(server))
			}
			for _, x := range c.exchanges() {
				if x.req.method == "DELETE" {
					return want(x.resp != nil && x.resp.status == 200, "the DELETE is not answered 200")
				}
			}
			return fmt.Errorf("no DELETE")
		}},
		{"ts-reissue-in-session", func(c *tsCapture) error {
			client, server := allFrom(c.fromClient), allFrom(c.fromServer)
			if len(ids(server)) != 0 {
				return fmt.Errorf("event ids %v: the server was to run without an event store", ids(server))
			}
			if ss := c.sessions(); len(ss) != 1 {
				return fmt.Errorf("want one session, got %q", ss)
			}
			calls := strings.Count(client, `"label":"reissue-me"`)
			results := strings.Count(server, "wrote reissue-me")
			return want(calls == 2 && results == 1 && len(c.resumes()) == 0,
				"want the identical call twice, one result and no resume; got %d calls, %d results, %d resumes", calls, results, len(c.resumes()))
		}},
		{"ts-404-clean-new-session", func(c *tsCapture) error {
			if err := lostThenNew(c); err != nil {
				return err
			}
			return want(len(c.resumes()) == 0, "a clean new session must not resume anything")
		}},
		{"ts-404-poller-new-session", func(c *tsCapture) error {
			if err := lostThenNew(c); err != nil {
				return err
			}
			sent := allFrom(c.fromClient)
			calls, runs := strings.Count(sent, `"name":"slow_write"`), strings.Count(sent, `"label":"flush-queue"`)
			return want(calls == 3 && runs == 3, "want the identical call three times (twice on S1, once on S2), got %d calls, %d with the job's label", calls, runs)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(tsFixtureDir, tc.name+".pcap")
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("fixture missing (go run ./test/fixturegen -only %s): %v", tc.name, err)
			}
			if _, err := os.Stat(filepath.Join(tsFixtureDir, tc.name+".spec")); err != nil {
				t.Fatalf("spec missing: %v", err)
			}
			if err := tc.check(readTSCapture(t, path)); err != nil {
				t.Error(err)
			}
		})
	}
}

// lostThenNew checks two sessions were initialised and a request carrying
// the first got 404 before the second was.
func lostThenNew(c *tsCapture) error {
	ss := c.sessions()
	if len(ss) != 2 || ss[0] == ss[1] {
		return fmt.Errorf("want two initialised sessions, got %q", ss)
	}
	for _, x := range c.exchanges() {
		if x.req.headers["mcp-session-id"] == ss[0] && x.resp != nil && x.resp.status == 404 {
			return nil
		}
	}
	return fmt.Errorf("no 404 for session %s", ss[0])
}

// allFrom joins every stream's bytes (in no particular order) for
// whole-capture searches.
func allFrom(m map[int]string) string { return strings.Join(slices.Collect(maps.Values(m)), "") }
