package decode

import (
	"strings"
	"testing"
)

// TestLongIDsAreBounded: a session id, a Last-Event-ID and an SSE event id
// over MaxIDBytes reach the detector as their short form, the same form
// wherever the same id appears (so a resume still names its event), and
// ids up to MaxIDBytes pass unchanged.
func TestLongIDsAreBounded(t *testing.T) {
	long := strings.Repeat("S", 60<<10)
	event := strings.Repeat("E", 300)
	short := strings.Repeat("k", MaxIDBytes)
	sc := parseScript(t, ""+
		"c> POST /mcp HTTP/1.1\\r\\nMcp-Session-Id: "+long+"\\r\\nContent-Length: 0\\r\\n\\r\\n\n"+
		"s> HTTP/1.1 200 OK\\r\\nMcp-Session-Id: "+long+"\\r\\nContent-Type: text/event-stream\\r\\nContent-Length: 0\\r\\n\\r\\n\n"+
		"c> GET /mcp HTTP/1.1\\r\\nMcp-Session-Id: "+long+"\\r\\nLast-Event-ID: "+event+"\\r\\n\\r\\n\n"+
		"s> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n\\r\\n\n"+
		"s> id: "+event+"\\ndata: x\\n\\nid: "+short+"\\ndata: y\\n\\n\n"+
		"fin s\n")
	sc.cfg.MaxHeaderBytes = 64 << 10
	obs, _ := run(t, sc.cfg, whole, sc)
	var sessions, lastIDs, eventIDs []string
	for _, o := range obs {
		switch o.Kind {
		case KindRequest:
			if o.Request.HasSessionID {
				sessions = append(sessions, o.Request.SessionID)
			}
			if o.Request.HasLastEventID {
				lastIDs = append(lastIDs, o.Request.LastEventID)
			}
		case KindResponse:
			if o.Response.HasSessionID {
				sessions = append(sessions, o.Response.SessionID)
			}
		case KindEvent:
			eventIDs = append(eventIDs, o.Event.ID)
		}
	}
	if len(sessions) != 3 || len(eventIDs) != 2 || len(lastIDs) != 1 {
		t.Fatalf("observations: %s", summary(obs))
	}
	for _, s := range sessions {
		if s != sessions[0] || len(s) != BoundedIDBytes || !strings.HasPrefix(s, long[:idPrefixBytes]+"~") {
			t.Errorf("session id %q (%d bytes), want the same short form of %d bytes", s[:min(len(s), 80)], len(s), BoundedIDBytes)
		}
	}
	if eventIDs[0] != lastIDs[0] || len(eventIDs[0]) != BoundedIDBytes {
		t.Errorf("event id %q and Last-Event-ID %q: want the same short form", eventIDs[0], lastIDs[0])
	}
	if eventIDs[1] != short {
		t.Errorf("an id of MaxIDBytes was changed: %q", eventIDs[1])
	}
	if longID([]byte(long)) == longID([]byte(long[:len(long)-1]+"T")) {
		t.Error("two long ids that differ in their last byte have the same short form")
	}
}
