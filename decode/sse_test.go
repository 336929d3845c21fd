package decode

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// sseResult is what a test sees of a decoded stream.
type sseResult struct {
	events    []string
	midEvent  bool
	partialID string
	hasPart   bool
	lastID    string
}

func decodeSSE(maxLine, maxEvent int, pieces ...string) sseResult {
	var r sseResult
	d := NewSSEDecoder(maxLine, maxEvent, func(e *SSEEvent) {
		s := fmt.Sprintf("type=%q data=%q", e.Type, e.Data)
		if e.HasID {
			s += fmt.Sprintf(" id=%q", e.ID)
		}
		if e.LastEventID != "" {
			s += fmt.Sprintf(" last=%q", e.LastEventID)
		}
		if e.Retry >= 0 {
			s += fmt.Sprintf(" retry=%d", e.Retry)
		}
		if e.DataTruncated {
			s += fmt.Sprintf(" truncated bytes=%d", e.DataBytes)
		}
		r.events = append(r.events, s)
	})
	for _, p := range pieces {
		d.Write([]byte(p))
	}
	r.midEvent = d.MidEvent()
	r.partialID, r.hasPart = d.PartialID()
	r.lastID, _ = d.LastEventID()
	return r
}

func TestSSEWhatwgRules(t *testing.T) {
	tests := []struct {
		name    string
		pieces  []string
		want    []string
		mid     bool
		partial string // "" with mid=false: none
		lastID  string
	}{
		{name: "lf", pieces: []string{"data: a\n\n"}, want: []string{`type="" data="a"`}},
		{name: "crlf", pieces: []string{"data: a\r\n\r\n"}, want: []string{`type="" data="a"`}},
		{name: "cr", pieces: []string{"data: a\r\r"}, want: []string{`type="" data="a"`}},
		{name: "cr then lf in next chunk is one line end", pieces: []string{"data: a\r", "\ndata: b\r", "\n\r", "\n"},
			want: []string{`type="" data="a\nb"`}},
		{name: "cr cr is two line ends", pieces: []string{"data: a\r", "\r"}, want: []string{`type="" data="a"`}},
		{name: "lf, crlf and cr mixed in one piece", pieces: []string{"data: a\ndata: b\r\ndata: c\rdata: d\n\r\ndata: e\r\rdata: f\n\n"},
			want: []string{`type="" data="a\nb\nc\nd"`, `type="" data="e"`, `type="" data="f"`}},
		{name: "multi-line data joined", pieces: []string{"data: a\ndata:b\ndata:  c\n\n"}, want: []string{`type="" data="a\nb\n c"`}},
		{name: "empty data line dispatches empty data", pieces: []string{"data\n\n"}, want: []string{`type="" data=""`}},
		{name: "no data is not dispatched", pieces: []string{"id: 5\nevent: x\n\n"}, want: nil, lastID: "5"},
		{name: "bom stripped", pieces: []string{"\xEF\xBB\xBFdata: a\n\n"}, want: []string{`type="" data="a"`}},
		{name: "bom split", pieces: []string{"\xEF", "\xBB", "\xBFdata: a\n\n"}, want: []string{`type="" data="a"`}},
		{name: "partial bom is content", pieces: []string{"\xEF", "data: a\n\n:x\xEF\n"}, want: nil},
		{name: "second bom is not stripped", pieces: []string{"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"}, want: nil},
		{name: "comment ignored", pieces: []string{": hi\ndata: a\n: there\n\n"}, want: []string{`type="" data="a"`}},
		{name: "event type", pieces: []string{"event: close\ndata: x\n\ndata: y\n\n"},
			want: []string{`type="close" data="x"`, `type="" data="y"`}},
		{name: "id persists as last event id", pieces: []string{"id: 1\ndata: a\n\ndata: b\n\n"},
			want: []string{`type="" data="a" id="1" last="1"`, `type="" data="b" last="1"`}, lastID: "1"},
		{name: "id with NUL ignored", pieces: []string{"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"},
			want: []string{`type="" data="a" id="1" last="1"`, `type="" data="b" last="1"`}, lastID: "1"},
		{name: "empty id resets", pieces: []string{"id: 1\ndata: a\n\nid\ndata: b\n\n"},
			want: []string{`type="" data="a" id="1" last="1"`, `type="" data="b" id=""`}, lastID: ""},
		{name: "retry digits", pieces: []string{"retry: 3000\ndata: a\n\n"}, want: []string{`type="" data="a" retry=3000`}},
		{name: "retry non-digits ignored", pieces: []string{"retry: 3s\ndata: a\n\nretry: -1\ndata: b\n\n"},
			want: []string{`type="" data="a"`, `type="" data="b"`}},
		{name: "unknown field ignored", pieces: []string{"foo: bar\ndata: a\n\n"}, want: []string{`type="" data="a"`}},
		{name: "field without colon", pieces: []string{"data\ndata\n\n"}, want: []string{`type="" data="\n"`}},
		{name: "only one leading space dropped", pieces: []string{"data:  two\n\n"}, want: []string{`type="" data=" two"`}},
		{name: "colon in value kept", pieces: []string{"data: {\"a\":1}\n\n"}, want: []string{`type="" data="{\"a\":1}"`}},
		{name: "unterminated event not dispatched", pieces: []string{"data: a\n\nid: 7\ndata: b\n"},
			want: []string{`type="" data="a"`}, mid: true, partial: "7", lastID: "7"},
		{name: "unterminated line", pieces: []string{"data: a\n\ndata: b"}, want: []string{`type="" data="a"`}, mid: true},
		{name: "unterminated comment is not mid-event", pieces: []string{"data: a\n\n: keep"}, want: []string{`type="" data="a"`}},
		{name: "byte at a time", pieces: strings.Split("id: 1\r\ndata: x\r\n\r\n", ""), want: []string{`type="" data="x" id="1" last="1"`}, lastID: "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := decodeSSE(1<<10, 1<<10, tt.pieces...)
			if strings.Join(r.events, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("events:\n got %q\nwant %q", r.events, tt.want)
			}
			if r.midEvent != tt.mid {
				t.Errorf("MidEvent = %v, want %v", r.midEvent, tt.mid)
			}
			if r.hasPart != (tt.partial != "") || r.partialID != tt.partial {
				t.Errorf("PartialID = %q,%v, want %q", r.partialID, r.hasPart, tt.partial)
			}
			if r.lastID != tt.lastID {
				t.Errorf("LastEventID = %q, want %q", r.lastID, tt.lastID)
			}
		})
	}
}

func TestSSELimits(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name              string
		maxLine, maxEvent int
		input             string
		want              string
		lineHits, evtHits int
		wantHashOf        string
	}{
		{name: "long data line streams into hash", maxLine: 32, maxEvent: 1000, input: "data: " + long + "\n\n",
			want: `type="" data="` + long + `"`, lineHits: 1, wantHashOf: long},
		{name: "long data beyond event limit", maxLine: 32, maxEvent: 50, input: "data: " + long + "\ndata: y\n\n",
			want: `type="" data="" truncated bytes=102`, lineHits: 1, evtHits: 1, wantHashOf: long + "\ny"},
		{name: "long id line dropped", maxLine: 32, maxEvent: 1000, input: "id: " + long + "\ndata: a\n\n",
			want: `type="" data="a"`, lineHits: 1, wantHashOf: "a"},
		{name: "event limit across lines", maxLine: 1000, maxEvent: 150, input: "data: " + long + "\ndata: " + long + "\n\n",
			want: `type="" data="" truncated bytes=201`, evtHits: 1, wantHashOf: long + "\n" + long},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []int{1, 3, 7, 1000} {
				var got string
				var hash uint64
				d := NewSSEDecoder(tt.maxLine, tt.maxEvent, func(e *SSEEvent) {
					got = fmt.Sprintf("type=%q data=%q", e.Type, e.Data)
					if e.DataTruncated {
						got += fmt.Sprintf(" truncated bytes=%d", e.DataBytes)
					}
					hash = e.DataHash
				})
				for in := tt.input; len(in) > 0; {
					n := min(split, len(in))
					d.Write([]byte(in[:n]))
					in = in[n:]
				}
				if got != tt.want {
					t.Errorf("split %d: got %s, want %s", split, got, tt.want)
				}
				if hash != xxhash.Sum64String(tt.wantHashOf) {
					t.Errorf("split %d: data hash does not cover the whole data", split)
				}
				if d.LineLimitHits != tt.lineHits || d.EventLimitHits != tt.evtHits {
					t.Errorf("split %d: limit hits line=%d event=%d, want %d %d", split, d.LineLimitHits, d.EventLimitHits, tt.lineHits, tt.evtHits)
				}
			}
		})
	}
}
