package detector

import (
	"strconv"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/decode"
)

type discard struct{}

func (discard) Violation(*Violation)           {}
func (discard) Resume(*ResumeAttempt)          {}
func (discard) Session(*SessionSummary)        {}
func (discard) UnknownOutcome(*UnknownOutcome) {}
func (discard) Unverifiable(*Unverifiable)     {}

// BenchmarkDetector measures observations per second on the hot path: SSE
// events with fresh ids on long-lived streams of many sessions, with JSON-RPC
// responses and progress. Ids are made before the timer so the benchmark
// measures the detector, not strconv.
func BenchmarkDetector(b *testing.B) {
	const sessions, eventsPerStream = 64, 2048
	type stream struct {
		req  *decode.Request
		resp *decode.Response
		conn decode.Conn
		evs  []decode.Event
	}
	streams := make([]stream, sessions)
	for i := range streams {
		sid := "S" + strconv.Itoa(i)
		st := &streams[i]
		st.conn = decode.Conn{ID: uint64(i + 1), Client: cli, Server: srv}
		st.req = sseGET(sid, "")
		st.resp = &decode.Response{Status: 200, SSE: true}
		st.evs = make([]decode.Event, eventsPerStream)
		for j := range st.evs {
			st.evs[j] = decode.Event{ID: sid + "_" + strconv.Itoa(j), HasID: true, DataHash: fakeHash(strconv.Itoa(j)),
				Messages: []decode.Message{{Type: decode.MsgNotification, Method: "notifications/progress", ProgressToken: "p", Progress: float64(j), HasProgress: true}}}
		}
	}
	d := New(Config{}, discard{})
	now := t0
	ex := 0
	open := func() {
		ex++
		for i := range streams {
			st := &streams[i]
			d.Observe(&decode.Observation{Kind: decode.KindRequest, Time: now, Conn: st.conn, Exchange: ex, Request: st.req})
			d.Observe(&decode.Observation{Kind: decode.KindResponse, Time: now, Conn: st.conn, Exchange: ex, Request: st.req, Response: st.resp})
		}
	}
	// One observation value reused: the decoder allocates it, we measure us.
	o := &decode.Observation{Kind: decode.KindEvent}
	b.ReportAllocs()
	b.ResetTimer()
	j := 0
	for n := 0; n < b.N; n++ {
		i := n % sessions
		if i == 0 {
			if j%eventsPerStream == 0 {
				b.StopTimer()
				d = New(Config{}, discard{}) // fresh index: every id is new
				open()
				b.StartTimer()
			}
			j++
			now = now.Add(time.Microsecond)
		}
		st := &streams[i]
		o.Time, o.Conn, o.Exchange, o.Request, o.Response, o.Event = now, st.conn, ex, st.req, st.resp, &st.evs[(j-1)%eventsPerStream]
		d.Observe(o)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "obs/s")
}
