package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/test/chtest"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// hostileValue is a wire string built to hurt: every C0 control byte an
// HTTP header line can carry (all but CR, LF and, for SSE ids, NUL), DEL, a
// C1 control, terminal escapes (set the title, clear the screen), invalid
// UTF-8, a bidi override, and 10 KB more.
func hostileValue(prefix string, nul bool) string {
	var b strings.Builder
	b.WriteString(prefix)
	for c := byte(0); c < 0x20; c++ {
		if c == '\r' || c == '\n' || (c == 0 && !nul) {
			continue
		}
		b.WriteByte(c)
	}
	b.WriteString("\x7f\u0085\x1b]0;pwned\x07\x1b[2J\xff\xfe\u202e")
	b.WriteString(strings.Repeat("A", 10<<10))
	return b.String()
}

// hostileCapture writes the session swap of detector/testdata/session_swap.test
// with hostile session ids (S1 swapped for S2 under a 200) and a hostile
// event id resumed from.
func hostileCapture(t *testing.T, path, s1, s2, e1 string) {
	t.Helper()
	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	post := func(session, body string) []byte {
		h := "POST /mcp HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		if session != "" {
			h += "Mcp-Session-Id: " + session + "\r\nMCP-Protocol-Version: 2025-11-25\r\n"
		}
		return []byte(fmt.Sprintf("%sContent-Length: %d\r\n\r\n%s", h, len(body), body))
	}
	c1 := rec.NewConn(netip.MustParseAddrPort("10.0.0.1:5000"), netip.MustParseAddrPort("10.0.0.2:8080"))
	c1.Send(true, post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	result := `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`
	c1.Send(false, []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", s1, len(result), result)))
	c1.Send(true, post(s1, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"deploy","arguments":{"env":"prod"}}}`))
	c1.Send(false, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"+
		"id: e100\nretry: 1000\ndata: \n\n"+
		"id: "+e1+"\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n"))
	c1.Fin(false)
	c1.Fin(true)
	c2 := rec.NewConn(netip.MustParseAddrPort("10.0.0.1:5001"), netip.MustParseAddrPort("10.0.0.3:8080"))
	c2.Send(true, []byte("GET /mcp HTTP/1.1\r\nHost: shop\r\nAccept: text/event-stream\r\nMcp-Session-Id: "+s1+
		"\r\nMCP-Protocol-Version: 2025-11-25\r\nLast-Event-ID: "+e1+"\r\n\r\n"))
	c2.Send(false, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nMcp-Session-Id: "+s2+"\r\nConnection: close\r\n\r\n"+
		"id: e1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"x\"}}\n\n"))
	c2.Fin(false)
	c2.Fin(true)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// rawControls returns the control bytes (but newline) and invalid UTF-8 in
// b, which no output meant for a terminal or a log may carry.
func rawControls(b []byte) string {
	var bad []string
	for _, c := range b {
		if (c < 0x20 && c != '\n') || c == 0x7f {
			bad = append(bad, fmt.Sprintf("%#02x", c))
		}
	}
	if !utf8.Valid(b) {
		bad = append(bad, "invalid UTF-8")
	}
	if len(bad) > 8 {
		bad = append(bad[:8], "...")
	}
	return strings.Join(bad, " ")
}

// TestHostileWireStrings: session ids and an event id carrying every control
// byte, terminal escapes, invalid UTF-8 and 10 KB reach the text report, the
// JSON Lines and ClickHouse. Each is over decode.MaxIDBytes, so what is kept
// of it everywhere is its bounded form (its first bytes, hostile ones
// included, and its digest). The finding is still made; the text report and
// standard error carry no raw control byte or invalid UTF-8 and shorten the
// ids; JSON is valid UTF-8 with the bounded ids whole (invalid bytes as
// U+FFFD, as JSON must); ClickHouse stores their exact bytes.
func TestHostileWireStrings(t *testing.T) {
	s1, s2, e1 := hostileValue("S1-", true), hostileValue("S2-", true), hostileValue("E1-", false)
	k1, k2, ke := decode.BoundID(s1), decode.BoundID(s2), decode.BoundID(e1)
	pcap := filepath.Join(t.TempDir(), "hostile.pcap")
	hostileCapture(t, pcap, s1, s2, e1)

	var stdout, stderr bytes.Buffer
	code := run([]string{"analyze", "--progress", "never", pcap}, nil, &stdout, &stderr)
	if code != exitViolations || !strings.Contains(stdout.String(), "session_swap") {
		t.Fatalf("text: exit %d, no session_swap\n%.2000s\n%s", code, stdout.String(), stderr.String())
	}
	for name, out := range map[string][]byte{"text report": stdout.Bytes(), "standard error": stderr.Bytes()} {
		if bad := rawControls(out); bad != "" {
			t.Errorf("%s carries %s", name, bad)
		}
		if bytes.Contains(out, []byte(strings.Repeat("A", 1000))) {
			t.Errorf("%s prints a 10 KB id whole", name)
		}
	}
	if !regexp.MustCompile(`S1-\\x00\\x01\\x02\\x03[^\n]*…\(\d+ bytes\)`).Match(stdout.Bytes()) {
		t.Errorf("the text report does not show the control bytes visibly, or not the escaped id's length")
	}

	recs, code, errOut := analyzeJSON(t, nil, pcap)
	if code != exitViolations {
		t.Fatalf("json: exit %d\n%s", code, errOut)
	}
	var v map[string]any
	for _, r := range recs {
		if r["type"] == "violation" && r["kind"] == "session_swap" {
			v = r
		}
	}
	if v == nil {
		t.Fatalf("json: no session_swap in %v", recs)
	}
	valid := func(s string) string { // each invalid byte as U+FFFD, as encoding/json does
		var b strings.Builder
		for _, r := range s {
			b.WriteRune(r)
		}
		return b.String()
	}
	if v["session_id"] != valid(k1) || v["new_session_id"] != valid(k2) || v["last_event_id"] != valid(ke) {
		t.Errorf("json: the bounded ids are not whole (invalid bytes as U+FFFD): session_id %d bytes, want %d", len(fmt.Sprint(v["session_id"])), len(valid(k1)))
	}
	line, _ := json.Marshal(v)
	if !utf8.Valid(line) {
		t.Error("json: not valid UTF-8")
	}

	srv := chtest.Shared(t)
	db := chtest.NewDatabase(t, srv)
	bin := buildBinary(t)
	if code, out, errOut := runBin(t, bin, "schema", "apply", "--clickhouse", srv.DSN(db)); code != 0 {
		t.Fatalf("schema apply: %s%s", out, errOut)
	}
	code, _, errOut = runBin(t, bin, "analyze", "--clickhouse", srv.DSN(db), "--spool-dir", t.TempDir(), pcap)
	if code != exitViolations {
		t.Fatalf("clickhouse: exit %d\n%s", code, errOut)
	}
	if bad := rawControls([]byte(errOut)); bad != "" {
		t.Errorf("standard error of the ClickHouse run carries %s", bad)
	}
	out, err := srv.Client(t.Context(), "SELECT hex(session_id), hex(new_session_id), hex(last_event_id) FROM "+db+".violations WHERE kind = 'session_swap' FORMAT TSV", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ToUpper(hex.EncodeToString([]byte(k1)) + "\t" + hex.EncodeToString([]byte(k2)) + "\t" + hex.EncodeToString([]byte(ke)))
	if got := strings.TrimSpace(string(out)); got != want {
		t.Errorf("clickhouse does not hold the exact bytes: got %d hex digits, want %d", len(got), len(want))
	}
}
