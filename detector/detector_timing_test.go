package detector

import (
	"strconv"
	"strings"
	"syscall"
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
// events with fresh go-sdk ids on long-lived streams of many sessions, each
// carrying a progress notification. Like the decoder's output, the event
// being handled is hot in cache: one Event per stream is reused and the ids
// are substrings of one contiguous buffer, made before the timer.
func BenchmarkDetector(b *testing.B) {
	const sessions, eventsPerStream = 64, 2048
	type stream struct {
		req  *decode.Request
		resp *decode.Response
		conn decode.Conn
		ids  []string
		ev   decode.Event
		msg  [1]decode.Message
	}
	streams := make([]stream, sessions)
	for i := range streams {
		sid := "S" + strconv.Itoa(i)
		st := &streams[i]
		st.conn = decode.Conn{ID: uint64(i + 1), Client: cli, Server: srv}
		st.req = sseGET(sid, "")
		st.resp = &decode.Response{Status: 200, SSE: true}
		var all strings.Builder
		ends := make([]int, eventsPerStream)
		for j := range ends {
			all.WriteString(sid + "_" + strconv.Itoa(j))
			ends[j] = all.Len()
		}
		buf, start := all.String(), 0
		st.ids = make([]string, eventsPerStream)
		for j, end := range ends {
			st.ids[j], start = buf[start:end], end
		}
		st.msg[0] = decode.Message{Type: decode.MsgNotification, Method: "notifications/progress", ProgressToken: "p", HasProgress: true}
		st.ev = decode.Event{HasID: true, DataHash: fakeHash(sid), Messages: st.msg[:]}
	}
	var d *Detector
	now, ex := t0, 0
	open := func() {
		d = New(Config{}, discard{}) // a fresh index: every id is new
		ex++
		for i := range streams {
			st := &streams[i]
			d.Observe(&decode.Observation{Kind: decode.KindRequest, Time: now, Conn: st.conn, Exchange: ex, Request: st.req})
			d.Observe(&decode.Observation{Kind: decode.KindResponse, Time: now, Conn: st.conn, Exchange: ex, Request: st.req, Response: st.resp})
		}
	}
	o := &decode.Observation{Kind: decode.KindEvent}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	j := -1
	for n := 0; n < b.N; n++ {
		i := n % sessions
		if i == 0 {
			j++
			if j%eventsPerStream == 0 {
				b.StopTimer()
				open()
				b.StartTimer()
			}
			now = now.Add(time.Microsecond)
		}
		st := &streams[i]
		k := j % eventsPerStream
		st.ev.ID, st.ev.Index, st.msg[0].Progress = st.ids[k], k, float64(k)
		o.Time, o.Conn, o.Exchange, o.Request, o.Response, o.Event = now, st.conn, ex, st.req, st.resp, &st.ev
		d.Observe(o)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "obs/s")
	// On a shared machine wall time says little; CPU time spent by this
	// process (including GC and the untimed set-up) per observation bounds
	// the cost from above.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/obs")
}

// cpuTime is the user+system CPU time of this process in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkBaselineMapInsert is the yardstick for BenchmarkDetector on a
// busy or slow machine: one lookup and insert of a new id in a map shaped
// like the event index. The detector does about that much work per event
// plus its checks, so the ratio of the two says more than either alone.
func BenchmarkBaselineMapInsert(b *testing.B) {
	const n = 1 << 17
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "S3_" + strconv.Itoa(i)
	}
	m := map[string]eventRef{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&(n-1)]
		if i&(n-1) == 0 {
			m = map[string]eventRef{}
		}
		if _, ok := m[k]; !ok {
			m[k] = eventRef{pos: int32(i)}
		}
	}
}
