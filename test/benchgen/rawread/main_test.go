package main

import (
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// writeExchange records one MCP exchange (a POST answered with one SSE
// event) and returns the capture's path.
func writeExchange(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "one.pcap")
	rec, err := pcaprec.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	c := rec.NewConn(netip.MustParseAddrPort("127.0.0.1:50000"), netip.MustParseAddrPort("127.0.0.1:8080"))
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`
	c.Send(true, []byte("POST /mcp HTTP/1.1\r\nHost: x\r\nMcp-Session-Id: S\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body))
	event := "id: s_1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"
	c.Send(false, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "+strconv.Itoa(len(event))+"\r\n\r\n"+event))
	c.Fin(true)
	c.Fin(false)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStages(t *testing.T) {
	path := writeExchange(t)
	for _, tc := range []struct {
		stage string
		want  []string // fields the output must have
	}{
		{"raw", []string{"stage=raw", "connections=0"}},
		{"capture", []string{"stage=capture", "connections=1"}},
		// request, response, event, end
		{"decode", []string{"stage=decode", "connections=1", "observations=4"}},
		{"detect", []string{"stage=detect", "connections=1", "violations=0"}},
	} {
		var out strings.Builder
		if err := run([]string{"-stage", tc.stage, "-workers", "1", path}, &out); err != nil {
			t.Fatalf("%s: %v", tc.stage, err)
		}
		fields := strings.Fields(out.String())
		// 3 handshake packets, 2 data segments each with its ACK, 2 FINs
		// each with its ACK.
		want := append(tc.want, "packets=11")
		if tc.stage != "detect" { // the whole pipeline's summary does not count TCP packets
			want = append(want, "tcp=11")
		}
		for _, w := range want {
			if !containsField(fields, w) {
				t.Errorf("%s: output %q lacks %s", tc.stage, out.String(), w)
			}
		}
		if !regexp.MustCompile(`seconds=\d+\.\d{3}\n$`).MatchString(out.String()) {
			t.Errorf("%s: output %q does not end with the time", tc.stage, out.String())
		}
	}
}

func containsField(fields []string, f string) bool {
	for _, x := range fields {
		if x == f {
			return true
		}
	}
	return false
}

func TestBadArguments(t *testing.T) {
	path := writeExchange(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"no file", []string{"-stage", "raw"}},
		{"two files", []string{path, path}},
		{"unknown stage", []string{"-stage", "sideways", path}},
		{"missing file", []string{filepath.Join(t.TempDir(), "absent.pcap")}},
		{"unknown flag", []string{"-fast", path}},
	} {
		var out strings.Builder
		if err := run(tc.args, &out); err == nil {
			t.Errorf("%s: no error (output %q)", tc.name, out.String())
		}
	}
}
