package main

import (
	"context"
	"testing"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func TestMidEventCutPoint(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	prime := "48\r\nid: s_1_a\ndata: \n\n\r\n"
	progress := func(id string, n string) string {
		return "db\r\nevent: message\nid: " + id + "\ndata: {\"method\":\"notifications/progress\",\"progress\":" + n + "}\n\n\r\n"
	}
	cases := []struct {
		name   string
		resp   string
		n      int
		wantAt int // -1: not yet
		wantID string
	}{
		{"waits for the n-th marker", head + prime + progress("s_2_b", "1"), 2, -1, ""},
		{"waits for the next id line", head + prime + progress("s_2_b", "1") + progress("s_3_c", "2") + "db\r\nevent: mess", 2, -1, ""},
		{"cuts after the next id line", head + prime + progress("s_2_b", "1") + progress("s_3_c", "2") + progress("s_4_d", "3"), 2,
			len(head + prime + progress("s_2_b", "1") + progress("s_3_c", "2") + "db\r\nevent: message\nid: s_4_d\n"), "s_4_d"},
		{"first marker", head + prime + progress("s_2_b", "1") + progress("s_3_c", "2"), 1,
			len(head + prime + progress("s_2_b", "1") + "db\r\nevent: message\nid: s_3_c\n"), "s_3_c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newMidEventCut("tools/call", tsProgress[len(`"method":`):], tc.n)
			at, id := c.cutPoint([]byte(tc.resp))
			if at != tc.wantAt || id != tc.wantID {
				t.Errorf("cutPoint = %d %q, want %d %q", at, id, tc.wantAt, tc.wantID)
			}
		})
	}
}

func TestMidEventCutHooksSplitReads(t *testing.T) {
	c := newMidEventCut("tools/call", "progress", 1)
	h := c.hooks(0)
	if out, act := h.FromServer([]byte("id: x\n\n")); string(out) != "id: x\n\n" || act != pcaprec.Forward {
		t.Fatalf("unarmed connection changed: %q %v", out, act)
	}
	h.FromClient([]byte("POST /mcp\r\n\r\n{\"method\":\"tools/call\"}"))
	reads := []string{"HTTP/1.1 200 OK\r\n\r\nevent: message\nid: a\ndata: progress 1\n", "\nevent: message\ni", "d: b\ndata: progress 2\n\n"}
	var got string
	act := pcaprec.Forward
	for _, r := range reads {
		var out []byte
		out, act = h.FromServer([]byte(r))
		got += string(out)
		if act != pcaprec.Forward {
			break
		}
	}
	if want := "HTTP/1.1 200 OK\r\n\r\nevent: message\nid: a\ndata: progress 1\n\nevent: message\nid: b\n"; got != want || act != pcaprec.Close {
		t.Errorf("forwarded %q, %v; want %q, Close", got, act, want)
	}
	if id, err := c.wait(context.Background()); err != nil || id != "b" {
		t.Errorf("partial id %q, %v; want b", id, err)
	}
}

func TestHeaderRewrite(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"lower case", "GET /mcp HTTP/1.1\r\nlast-event-id: a_1\r\n\r\n", "GET /mcp HTTP/1.1\r\nlast-event-id: X\r\n\r\n"},
		{"canonical case", "GET /mcp HTTP/1.1\r\nLast-Event-ID:a_1\r\nAccept: */*\r\n\r\n", "GET /mcp HTTP/1.1\r\nLast-Event-ID:X\r\nAccept: */*\r\n\r\n"},
		{"absent", "GET /mcp HTTP/1.1\r\nAccept: */*\r\n\r\n", "GET /mcp HTTP/1.1\r\nAccept: */*\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeaderRewrite("last-event-id", func(old string) string { return "X" })
			out, _ := h.hooks(0).FromClient([]byte(tc.in))
			if string(out) != tc.want {
				t.Errorf("got %q, want %q", out, tc.want)
			}
			// Only the first request carrying the header is rewritten.
			again := "GET /mcp HTTP/1.1\r\nlast-event-id: b_2\r\n\r\n"
			if out, _ := h.hooks(1).FromClient([]byte(again)); tc.name != "absent" && string(out) != again {
				t.Errorf("second request rewritten: %q", out)
			}
		})
	}
}
