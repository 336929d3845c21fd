package oracle

import (
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The oracle is only as good as its comparison: these tests check that the
// machinery around tshark sees every difference it claims to.

func TestParseHeaderLine(t *testing.T) {
	for _, tc := range []struct {
		in          string
		name, value string
		ok          bool
	}{
		{"Mcp-Session-Id: abc\r\n", "Mcp-Session-Id", "abc", true},
		{"last-event-id:\t_3 \r\n", "last-event-id", "_3", true},
		{"Empty:\r\n", "Empty", "", true},
		{"X: a:b\r\n", "X", "a:b", true},
		{"no colon\r\n", "", "", false},
		{": nameless\r\n", "", "", false},
		{"Bad Name: v\r\n", "", "", false},
	} {
		name, value, ok := parseHeaderLine([]byte(tc.in))
		if name != tc.name || value != tc.value || ok != tc.ok {
			t.Errorf("parseHeaderLine(%q) = %q, %q, %v; want %q, %q, %v", tc.in, name, value, ok, tc.name, tc.value, tc.ok)
		}
	}
}

func TestMultisetDiff(t *testing.T) {
	for _, tc := range []struct {
		name         string
		a, b         []string
		onlyA, onlyB []string
	}{
		{"equal in another order", []string{"x", "y", "x"}, []string{"x", "x", "y"}, nil, nil},
		{"duplicate counts", []string{"x", "x"}, []string{"x"}, []string{"x"}, nil},
		{"both sides", []string{"a", "c"}, []string{"b", "c", "b"}, []string{"a"}, []string{"b", "b"}},
		{"empty", nil, nil, nil, nil},
	} {
		onlyA, onlyB := multisetDiff(tc.a, tc.b)
		if !slices.Equal(onlyA, tc.onlyA) || !slices.Equal(onlyB, tc.onlyB) {
			t.Errorf("%s: got %q / %q, want %q / %q", tc.name, onlyA, onlyB, tc.onlyA, tc.onlyB)
		}
	}
}

var (
	testConn  = connKey{client: netip.MustParseAddrPort("10.0.0.1:40000"), server: netip.MustParseAddrPort("10.0.0.2:8080")}
	otherConn = connKey{client: netip.MustParseAddrPort("10.0.0.1:40001"), server: netip.MustParseAddrPort("10.0.0.2:8080")}
)

func TestCompareViews(t *testing.T) {
	base := func() captureView {
		return captureView{testConn: {
			requests:  []string{requestEntry("POST", "/mcp", "S1", true, "", false), requestEntry("GET", "/mcp", "S1", true, "s_2", true)},
			responses: []string{responseEntry(200, "S1", true), responseEntry(200, "", false)},
		}}
	}
	for _, tc := range []struct {
		name   string
		change func(v captureView)
		skip   gapConns
		diffs  int
	}{
		{"identical", func(captureView) {}, nil, 0},
		{"other method", func(v captureView) {
			v[testConn].requests[0] = requestEntry("PUT", "/mcp", "S1", true, "", false)
		}, nil, 2},
		{"other target", func(v captureView) {
			v[testConn].requests[0] = requestEntry("POST", "/mcp?x=1", "S1", true, "", false)
		}, nil, 2},
		{"session id absent vs empty", func(v captureView) {
			v[testConn].responses[1] = responseEntry(200, "", true)
		}, nil, 2},
		{"other Last-Event-ID", func(v captureView) {
			v[testConn].requests[1] = requestEntry("GET", "/mcp", "S1", true, "s_3", true)
		}, nil, 2},
		{"other status", func(v captureView) {
			v[testConn].responses[0] = responseEntry(404, "S1", true)
		}, nil, 2},
		{"one response more", func(v captureView) {
			v[testConn].responses = append(v[testConn].responses, responseEntry(202, "", false))
		}, nil, 1},
		{"same heads on another connection", func(v captureView) {
			v[otherConn] = v[testConn]
			delete(v, testConn)
		}, nil, 8},
		{"gap connection not compared", func(v captureView) {
			v[testConn].responses = nil
		}, gapConns{testConn: true}, 0},
	} {
		theirs := base()
		tc.change(theirs)
		diffs, _ := compareViews(base(), theirs, tc.skip)
		if len(diffs) != tc.diffs {
			t.Errorf("%s: %d differences, want %d: %q", tc.name, len(diffs), tc.diffs, diffs)
		}
	}
}

// pdmlHeader renders a header line field as tshark does, raw bytes in hex.
func pdmlHeader(field, line string) string {
	return `<field name="` + field + `" show="` + strings.TrimSpace(line) + `" value="` + hex.EncodeToString([]byte(line)) + `"/>`
}

// TestParsePDML feeds a document shaped like tshark 4.0's PDML: a packet
// with two pipelined requests (nested request-line fields), a response over
// IPv6, and a body continuation that must not count as a message.
func TestParsePDML(t *testing.T) {
	doc := `<?xml version="1.0" encoding="utf-8"?>
<pdml version="0" creator="wireshark/4.0.17">
<packet>
  <proto name="ip"><field name="ip.src" show="10.0.0.1"/><field name="ip.dst" show="10.0.0.2"/></proto>
  <proto name="tcp"><field name="tcp.srcport" show="40000"/><field name="tcp.dstport" show="8080"/><field name="tcp.stream" show="0"/></proto>
  <proto name="http">
    <field name="" show="GET /mcp HTTP/1.1\r\n">
      <field name="http.request.method" show="GET"/><field name="http.request.uri" show="/mcp"/>
    </field>
    ` + pdmlHeader("http.request.line", "mcp-session-id: S1\r\n") + `
    ` + pdmlHeader("http.request.line", "Last-Event-Id: s_2\r\n") + `
  </proto>
  <proto name="http">
    <field name="" show="DELETE /mcp HTTP/1.1\r\n">
      <field name="http.request.method" show="DELETE"/><field name="http.request.uri" show="/mcp"/>
    </field>
    ` + pdmlHeader("http.request.line", "Accept: a, b\r\n") + `
  </proto>
</packet>
<packet>
  <proto name="ipv6"><field name="ipv6.src" show="fd00::2"/><field name="ipv6.dst" show="fd00::1"/></proto>
  <proto name="tcp"><field name="tcp.srcport" show="8080"/><field name="tcp.dstport" show="40000"/></proto>
  <proto name="http">
    <field name="" show="HTTP/1.1 404 Not Found\r\n"><field name="http.response.code" show="404"/></field>
    ` + pdmlHeader("http.response.line", "Mcp-Session-Id:  S2 \r\n") + `
  </proto>
</packet>
<packet>
  <proto name="ip"><field name="ip.src" show="10.0.0.2"/><field name="ip.dst" show="10.0.0.1"/></proto>
  <proto name="tcp"><field name="tcp.srcport" show="8080"/><field name="tcp.dstport" show="40000"/></proto>
  <proto name="http"><field name="http.file_data" show="id: s_3"/></proto>
</packet>
</pdml>`
	view, err := parsePDML(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	v6 := connKey{client: netip.MustParseAddrPort("[fd00::1]:40000"), server: netip.MustParseAddrPort("[fd00::2]:8080")}
	want := captureView{
		testConn: {requests: []string{
			requestEntry("GET", "/mcp", "S1", true, "s_2", true),
			requestEntry("DELETE", "/mcp", "", false, "", false),
		}},
		v6: {responses: []string{responseEntry(404, "S2", true)}},
	}
	if diffs, _ := compareViews(view, want, nil); len(diffs) != 0 || len(view) != len(want) {
		t.Errorf("parsed view differs from the document: %q (%d connections)", diffs, len(view))
	}

	bad := strings.Replace(doc, hex.EncodeToString([]byte("Accept: a, b\r\n")), "zz", 1)
	if _, err := parsePDML(strings.NewReader(bad)); err == nil {
		t.Error("a header value that is not hex was accepted")
	}
	noAddr := strings.Replace(doc, `<field name="ip.src" show="10.0.0.1"/>`, "", 1)
	if _, err := parsePDML(strings.NewReader(noAddr)); err == nil {
		t.Error("HTTP without a source address was accepted")
	}
}
