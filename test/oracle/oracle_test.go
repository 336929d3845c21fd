package oracle

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// fixtureGlob is where the recorded fixtures live, relative to this
// package; REPLAYWATCH_ORACLE_GLOB replaces it (to check any capture).
const fixtureGlob = "../../pipeline/testdata/fixtures/*.pcap"

// tsharkTimeout bounds one tshark run; fixtures take well under a second.
const tsharkTimeout = 2 * time.Minute

// maxPDMLBytes bounds the tshark output read for one capture, so a huge
// capture passed through REPLAYWATCH_ORACLE_GLOB fails clearly instead of
// exhausting memory (PDML is about 30 times the size of the HTTP it shows).
const maxPDMLBytes = 2 << 30

// connKey names a TCP connection by its endpoints, which both tools report
// the same way (tshark's tcp.stream and our Conn.ID are numbered
// differently). A client port reused within one capture merges two
// connections into one key; the comparison stays a multiset comparison, so
// that only loosens the per-connection grouping, not the counts.
type connKey struct{ client, server netip.AddrPort }

func (k connKey) String() string { return k.client.String() + "->" + k.server.String() }

// exchangeView is what one tool saw on one connection: request and response
// heads rendered as comparable strings.
type exchangeView struct {
	requests, responses []string
	// lostFraming (tshark's view only): tshark glued a request body sent in
	// its own segment (Go's httputil.ReverseProxy writes head and body
	// apart) to the next request line and read that request as a
	// continuation with an illegal header name: its requests on the
	// connection are not a reference from there on.
	lostFraming bool
}

type captureView map[connKey]*exchangeView

// gapConns are connections on which replaywatch reported a capture gap.
//
// Legitimate difference: past a gap the two tools disagree by design. With
// body desegmentation off, tshark takes the first segment after the hole as
// a continuation unless it starts exactly at a message head, while
// replaywatch resynchronises on the next request or status line anywhere in
// the stream; either may then see heads the other does not. Such
// connections are left out of the comparison (and logged). Everything else
// is compared strictly: the fixtures come from a proxy that loses nothing.
type gapConns map[connKey]bool

func (v captureView) conn(k connKey) *exchangeView {
	e, ok := v[k]
	if !ok {
		e = &exchangeView{}
		v[k] = e
	}
	return e
}

// headerValue renders an optional header for comparison: "-" when absent,
// the value in brackets (so an empty value differs from absence) otherwise.
func headerValue(v string, present bool) string {
	if !present {
		return "-"
	}
	return "[" + v + "]"
}

func requestEntry(method, target, sid string, hasSID bool, leid string, hasLEID bool) string {
	return fmt.Sprintf("%s %s session=%s last-event-id=%s", method, target, headerValue(sid, hasSID), headerValue(leid, hasLEID))
}

func responseEntry(status int, sid string, hasSID bool) string {
	return fmt.Sprintf("%d session=%s", status, headerValue(sid, hasSID))
}

// ourView runs the capture and decode stages as the analyze command wires
// them (query strings kept) and keeps the request and response heads.
func ourView(path string) (captureView, gapConns, decode.Stats, error) {
	view, gaps := captureView{}, gapConns{}
	workers := min(runtime.GOMAXPROCS(0), 2)
	dcfg := decode.DefaultConfig()
	// The targets are compared with tshark's byte for byte: keep the query
	// strings the analyzer leaves out by default (the 2024-11-05 transport
	// names its session in one).
	dcfg.KeepQueryStrings = true
	p := decode.NewPipeline(dcfg, workers, func(o *decode.Observation) {
		k := connKey{client: o.Conn.Client, server: o.Conn.Server}
		switch o.Kind {
		case decode.KindRequest:
			r := o.Request
			e := view.conn(k)
			e.requests = append(e.requests, requestEntry(r.Method, r.Path, r.SessionID, r.HasSessionID, r.LastEventID, r.HasLastEventID))
		case decode.KindResponse:
			r := o.Response
			e := view.conn(k)
			e.responses = append(e.responses, responseEntry(r.Status, r.SessionID, r.HasSessionID))
		case decode.KindGap:
			gaps[k] = true
		}
	})
	cfg := capture.DefaultConfig()
	cfg.Workers = workers
	_, err := capture.ReadFiles(context.Background(), []string{path}, cfg, p.Factory)
	p.Close()
	return view, gaps, p.Stats(), err
}

// PDML, tshark's XML dissection output: packets hold protocols, protocols
// hold (nested) fields. value is the field's raw bytes in hex.
type pdmlField struct {
	Name   string      `xml:"name,attr"`
	Show   string      `xml:"show,attr"`
	Value  string      `xml:"value,attr"`
	Fields []pdmlField `xml:"field"`
}

type pdmlProto struct {
	Name   string      `xml:"name,attr"`
	Fields []pdmlField `xml:"field"`
}

type pdmlPacket struct {
	Protos []pdmlProto `xml:"proto"`
}

// walk calls f on every field under fs, depth first, in document order.
func walk(fs []pdmlField, f func(*pdmlField)) {
	for i := range fs {
		f(&fs[i])
		walk(fs[i].Fields, f)
	}
}

// tsharkArgs is the dissection the oracle uses. http.desegment_body off
// makes tshark show a streaming (SSE) response's head when its first segment
// arrives instead of holding it back until a body end that may never come.
//
// tcp.try_heuristic_first makes tshark recognise HTTP from content before it
// trusts port numbers. Without it, a connection whose (random, ephemeral)
// client port happens to be registered to another protocol is handed to
// that dissector and its HTTP is never seen: a benchmark capture lost a
// whole connection to port 44321, Performance Co-Pilot. With it, tshark's
// HTTP heuristic claims the connection on its first request or status line,
// which is also how replaywatch decides (from content, never from ports).
func tsharkArgs(path string) []string {
	return []string{"-n", "-r", path,
		"-o", "http.desegment_body:FALSE", "-o", "tcp.try_heuristic_first:TRUE",
		"-Y", "http", "-T", "pdml", "-J", "ip ipv6 tcp http"}
}

// tsharkView runs tshark on path and builds the same view as ourView.
func tsharkView(ctx context.Context, tshark, path string) (captureView, error) {
	ctx, cancel := context.WithTimeout(ctx, tsharkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, tshark, tsharkArgs(path)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	view, perr := parsePDML(io.LimitReader(out, maxPDMLBytes))
	// Drain so tshark is not blocked writing when the parse stopped early.
	io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("tshark: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if perr != nil {
		return nil, fmt.Errorf("tshark output: %w", perr)
	}
	return view, nil
}

// parsePDML reads tshark's PDML one packet at a time. Every http protocol
// element is one HTTP message head (or a body continuation, which has
// neither method nor status and is skipped); a packet may hold several.
func parsePDML(r io.Reader) (captureView, error) {
	view := captureView{}
	d := xml.NewDecoder(r)
	for n := 0; ; {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return view, nil
		}
		if err != nil {
			return nil, err
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "packet" {
			continue
		}
		n++
		var pkt pdmlPacket
		if err := d.DecodeElement(&pkt, &se); err != nil {
			return nil, fmt.Errorf("packet %d: %w", n, err)
		}
		if err := addPacket(view, &pkt); err != nil {
			return nil, fmt.Errorf("packet %d: %w", n, err)
		}
	}
}

// httpHead is one HTTP message head as tshark dissected it.
type httpHead struct {
	method, target string
	status         int
	headers        [][2]string // name, value; in order
}

func (h *httpHead) header(name string) (string, bool) {
	for _, kv := range h.headers {
		if strings.EqualFold(kv[0], name) {
			return kv[1], true
		}
	}
	return "", false
}

func addPacket(view captureView, pkt *pdmlPacket) error {
	var src, dst netip.Addr
	var sport, dport uint16
	var heads []httpHead
	continuation := false
	for _, p := range pkt.Protos {
		switch p.Name {
		case "ip", "ipv6":
			walk(p.Fields, func(f *pdmlField) {
				switch f.Name {
				case "ip.src", "ipv6.src":
					src, _ = netip.ParseAddr(f.Show)
				case "ip.dst", "ipv6.dst":
					dst, _ = netip.ParseAddr(f.Show)
				}
			})
		case "tcp":
			walk(p.Fields, func(f *pdmlField) {
				switch f.Name {
				case "tcp.srcport":
					sport = parsePort(f.Show)
				case "tcp.dstport":
					dport = parsePort(f.Show)
				}
			})
		case "http":
			h, err := parseHTTPHead(p.Fields)
			if err != nil {
				return err
			}
			if h.method != "" || h.status != 0 {
				heads = append(heads, h)
			} else if gluedHead(p.Fields) {
				continuation = true
			}
		}
	}
	if len(heads) == 0 && !continuation {
		return nil
	}
	if !src.IsValid() || !dst.IsValid() || sport == 0 || dport == 0 {
		return errors.New("HTTP without IP addresses or TCP ports")
	}
	from, to := netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport)
	if continuation {
		view.conn(connKey{client: from, server: to}).lostFraming = true
	}
	for _, h := range heads {
		if h.method != "" {
			sid, hasSID := h.header("Mcp-Session-Id")
			leid, hasLEID := h.header("Last-Event-ID")
			e := view.conn(connKey{client: from, server: to})
			e.requests = append(e.requests, requestEntry(h.method, h.target, sid, hasSID, leid, hasLEID))
		} else {
			sid, hasSID := h.header("Mcp-Session-Id")
			e := view.conn(connKey{client: to, server: from})
			e.responses = append(e.responses, responseEntry(h.status, sid, hasSID))
		}
	}
	return nil
}

// gluedHead says whether tshark glued the previous request's body to the
// next request line (it reassembles a body sent in its own segments with
// what follows): read as a head whose first "header" holds illegal
// characters, or as a body whose data runs on into a request line (a 50 KB
// upload, then a DELETE: go-early-404-large-call).
func gluedHead(fs []pdmlField) bool {
	found := false
	walk(fs, func(f *pdmlField) {
		switch f.Name {
		case "http.bad_header_name":
			found = true
		case "http.file_data":
			b, err := hex.DecodeString(f.Value)
			found = found || err == nil && requestLineWithin.Match(b)
		}
	})
	return found
}

// requestLineWithin matches a request's head at the end of a body, after
// its start: what tshark glued on.
var requestLineWithin = regexp.MustCompile(`(?s).(GET|POST|DELETE|PUT|PATCH|HEAD|OPTIONS) \S+ HTTP/1\.[01]\r?\n.*\r?\n\r?\n$`)

func parsePort(s string) uint16 {
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(v)
}

// parseHTTPHead reads one http protocol element. Header lines are taken from
// the raw bytes (value, hex) of http.request.line / http.response.line, not
// from tshark's display text, so values compare byte for byte.
func parseHTTPHead(fs []pdmlField) (httpHead, error) {
	var h httpHead
	var err error
	walk(fs, func(f *pdmlField) {
		switch f.Name {
		case "http.request.method":
			h.method = f.Show
		case "http.request.uri":
			h.target = f.Show
		case "http.response.code":
			h.status, _ = strconv.Atoi(f.Show)
		case "http.request.line", "http.response.line":
			raw, herr := hex.DecodeString(f.Value)
			if herr != nil {
				err = fmt.Errorf("%s: value %q is not hex", f.Name, f.Value)
				return
			}
			name, value, ok := parseHeaderLine(raw)
			if ok {
				h.headers = append(h.headers, [2]string{name, value})
			}
		}
	})
	return h, err
}

// parseHeaderLine splits "Name: value\r\n" into name and the value without
// surrounding optional whitespace (RFC 9110 section 5.5).
func parseHeaderLine(raw []byte) (name, value string, ok bool) {
	line := strings.TrimRight(string(raw), "\r\n")
	name, value, ok = strings.Cut(line, ":")
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return "", "", false
	}
	return name, strings.Trim(value, " \t"), true
}

// multisetDiff returns the entries of a missing from b and of b missing from
// a, each sorted, counting duplicates.
func multisetDiff(a, b []string) (onlyA, onlyB []string) {
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for s, n := range count {
		for ; n > 0; n-- {
			onlyA = append(onlyA, s)
		}
		for ; n < 0; n++ {
			onlyB = append(onlyB, s)
		}
	}
	slices.Sort(onlyA)
	slices.Sort(onlyB)
	return onlyA, onlyB
}

// compareViews lists every disagreement between the two views, one line
// each, sorted, and how many connections it compared; connections in skip
// are not compared.
func compareViews(ours, theirs captureView, skip gapConns) (diffs []string, compared int) {
	keys := map[connKey]bool{}
	for k := range ours {
		keys[k] = true
	}
	for k := range theirs {
		keys[k] = true
	}
	for k := range keys {
		if skip[k] {
			continue
		}
		compared++
		o, t := ours[k], theirs[k]
		if o == nil {
			o = &exchangeView{}
		}
		if t == nil {
			t = &exchangeView{}
		}
		for _, side := range []struct {
			what string
			o, t []string
		}{{"request", o.requests, t.requests}, {"response", o.responses, t.responses}} {
			onlyOurs, onlyTshark := multisetDiff(side.o, side.t)
			for _, s := range onlyOurs {
				diffs = append(diffs, fmt.Sprintf("%s: %s only in replaywatch: %s", k, side.what, s))
			}
			for _, s := range onlyTshark {
				diffs = append(diffs, fmt.Sprintf("%s: %s only in tshark: %s", k, side.what, s))
			}
		}
	}
	slices.Sort(diffs)
	return diffs, compared
}

// findTshark returns tshark's path, or skips (fails when CI is set, where the
// test script installs it and a missing oracle must not pass silently).
func findTshark(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("tshark not found (CI is set, which requires it; apt-get install tshark): %v", err)
		}
		t.Skipf("tshark not found, oracle comparison skipped (apt-get install tshark): %v", err)
	}
	return p
}

func fixtures(t *testing.T) []string {
	t.Helper()
	glob := fixtureGlob
	if g := os.Getenv("REPLAYWATCH_ORACLE_GLOB"); g != "" {
		glob = g
	}
	paths, err := filepath.Glob(glob)
	if err != nil {
		t.Fatalf("glob %q: %v", glob, err)
	}
	if len(paths) == 0 {
		t.Fatalf("no captures match %q (generate fixtures with go run ./test/fixturegen)", glob)
	}
	return paths
}

// TestDecoderAgreesWithTshark is the oracle: for every fixture, replaywatch
// and tshark must see the same request and response heads per connection.
func TestDecoderAgreesWithTshark(t *testing.T) {
	tshark := findTshark(t)
	for _, path := range fixtures(t) {
		t.Run(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), func(t *testing.T) {
			ours, gaps, st, err := ourView(path)
			if err != nil {
				t.Fatalf("replaywatch: %v", err)
			}
			theirs, err := tsharkView(context.Background(), tshark, path)
			if err != nil {
				t.Fatal(err)
			}
			if len(theirs) == 0 {
				t.Fatalf("tshark found no HTTP in %s", path)
			}
			skip := maps.Clone(gaps)
			for k, e := range theirs {
				if e.lostFraming {
					// The direction of the glued segment is the client's.
					skip[k] = true
					t.Logf("%s: not compared, tshark glued a request body to the next request line", k)
				}
			}
			diffs, compared := compareViews(ours, theirs, skip)
			for _, d := range diffs {
				t.Error(d)
			}
			for k := range gaps {
				t.Logf("%s: not compared, the capture lost bytes on it", k)
			}
			if compared == 0 {
				t.Errorf("no connection compared (%d with gaps)", len(gaps))
			}
			if t.Failed() {
				t.Logf("decoder stats: %+v", st)
			}
		})
	}
}
