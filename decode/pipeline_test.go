package decode

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// request makes stream s emit one KindRequest stamped at.
func request(s TCPStream, path string, at time.Duration) {
	s.Data(true, []byte("GET "+path+" HTTP/1.1\r\n\r\n"), testBase.Add(at))
}

func collect(cfg Config, workers int) (*Pipeline, *[]*Observation) {
	var got []*Observation
	var inOut atomic.Int32
	p := NewPipeline(cfg, workers, func(o *Observation) {
		if inOut.Add(1) != 1 {
			panic("out called concurrently")
		}
		got = append(got, o)
		inOut.Add(-1)
	})
	return p, &got
}

func paths(obs []*Observation) []string {
	var out []string
	for _, o := range obs {
		out = append(out, o.Request.Path)
	}
	return out
}

func TestPipelineMergesWorkersInTimeOrder(t *testing.T) {
	p, got := collect(DefaultConfig(), 2)
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			f := p.Factory(w)
			s := f.NewStream(ConnMeta{ID: uint64(w + 1), A: testClient, B: testServer, SawSYN: true})
			for i := 0; i < 50; i++ {
				at := time.Duration(2*i+w) * time.Second
				request(s, "/"+string(rune('a'+w)), at)
				f.Tick(testBase.Add(at))
			}
			s.Close(CloseEOF, testBase.Add(200*time.Second))
			f.Done()
		}(w)
	}
	wg.Wait()
	p.Close()
	if len(*got) != 100 {
		t.Fatalf("got %d observations, want 100", len(*got))
	}
	for i := 1; i < len(*got); i++ {
		if (*got)[i].Time.Before((*got)[i-1].Time) {
			t.Fatalf("observation %d at %s released after one at %s", i, (*got)[i].Time, (*got)[i-1].Time)
		}
	}
	if st := p.Stats(); st.LateObservations != 0 || st.Observations != 100 || st.Connections != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestPipelineReleasesBehindWindow(t *testing.T) {
	tests := []struct {
		name      string
		window    time.Duration
		tickAt    time.Duration
		wantSoFar int
	}{
		{"inside the window stays buffered", 2 * time.Second, 2 * time.Second, 0},
		{"older than the window is released", 2 * time.Second, 4 * time.Second, 2},
		{"zero window releases up to the tick", 0, 1500 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ReorderWindow = tt.window
			released := make(chan *Observation, 10)
			p := NewPipeline(cfg, 1, func(o *Observation) { released <- o })
			f := p.Factory(0)
			s := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
			request(s, "/1", 0)
			request(s, "/2", time.Second)
			request(s, "/3", 3*time.Second)
			f.Tick(testBase.Add(tt.tickAt))
			// Released batches reach out asynchronously; Close would
			// release everything, so wait for the expected count instead.
			deadline := time.After(2 * time.Second)
			n := 0
			for n < tt.wantSoFar {
				select {
				case <-released:
					n++
				case <-deadline:
					t.Fatalf("only %d released", n)
				}
			}
			time.Sleep(20 * time.Millisecond)
			if extra := len(released); extra != 0 {
				t.Errorf("%d more released than the watermark allows", extra)
			}
			f.Done()
			p.Close()
			if total := n + len(released); total != 3 {
				t.Errorf("after Close %d delivered, want 3", total)
			}
		})
	}
}

func TestPipelineLateObservationsDeliveredAndCounted(t *testing.T) {
	p, got := collect(DefaultConfig(), 2)
	f0, f1 := p.Factory(0), p.Factory(1)
	s0 := f0.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
	request(s0, "/new", 10*time.Second)
	f0.Tick(testBase.Add(20 * time.Second))
	f1.Tick(testBase.Add(20 * time.Second))
	// Worker 1 now delivers something older than the window allowed for
	// (reassembly held it back): it comes after a newer one was released.
	s1 := f1.NewStream(ConnMeta{ID: 2, A: testClient, B: testServer, SawSYN: true})
	request(s1, "/old", time.Second)
	f1.Done()
	f0.Done()
	p.Close()
	if ps := paths(*got); len(ps) != 2 || ps[0] != "/new" || ps[1] != "/old" {
		t.Fatalf("delivered %v", ps)
	}
	if st := p.Stats(); st.LateObservations != 1 {
		t.Errorf("LateObservations = %d, want 1", st.LateObservations)
	}
}

func TestPipelineWaitsForEveryWorkersFirstTick(t *testing.T) {
	p, got := collect(DefaultConfig(), 2)
	f0, f1 := p.Factory(0), p.Factory(1)
	s0 := f0.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
	request(s0, "/b", 10*time.Second)
	f0.Tick(testBase.Add(60 * time.Second))
	// Worker 1 starts late but its first packet is older: nothing was
	// released before it ticked, so it is not late.
	s1 := f1.NewStream(ConnMeta{ID: 2, A: testClient, B: testServer, SawSYN: true})
	request(s1, "/a", 5*time.Second)
	f1.Tick(testBase.Add(60 * time.Second))
	f0.Done()
	f1.Done()
	p.Close()
	if ps := paths(*got); len(ps) != 2 || ps[0] != "/a" || ps[1] != "/b" {
		t.Fatalf("delivered %v", ps)
	}
	if st := p.Stats(); st.LateObservations != 0 {
		t.Errorf("LateObservations = %d, want 0", st.LateObservations)
	}
}

func TestPipelineBoundedBuffer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBufferedObservations = 3
	p, got := collect(cfg, 1)
	f := p.Factory(0)
	s := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
	for i := 0; i < 10; i++ {
		request(s, "/"+string(rune('a'+i)), time.Duration(i)*time.Millisecond)
	}
	// No Tick: only the buffer bound releases anything before Done.
	f.Done()
	p.Close()
	if ps := paths(*got); len(ps) != 10 || ps[0] != "/a" || ps[9] != "/j" {
		t.Fatalf("delivered %v", ps)
	}
	if st := p.Stats(); st.EarlyReleases != 7 || st.LateAfterEarlyRelease != 0 {
		t.Errorf("EarlyReleases = %d, LateAfterEarlyRelease = %d; want 7 and 0 (nothing came older)", st.EarlyReleases, st.LateAfterEarlyRelease)
	}
}

// TestPipelineCountsWhatEarlyReleasesCost: an observation arriving older than
// one the full window released early is late, and counted as the cost of
// MaxBufferedObservations; with room in the window the same arrival is
// merged in order.
func TestPipelineCountsWhatEarlyReleasesCost(t *testing.T) {
	for _, tc := range []struct {
		window    int
		wantLate  Late
		wantCount int64
	}{{3, LateMaxBufferedObservations, 1}, {100, NotLate, 0}} {
		cfg := DefaultConfig()
		cfg.MaxBufferedObservations = tc.window
		p, got := collect(cfg, 1)
		f := p.Factory(0)
		s1 := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
		for i := range 10 {
			request(s1, "/"+string(rune('a'+i)), time.Duration(i)*time.Millisecond)
		}
		f.Tick(testBase.Add(20 * time.Millisecond)) // hands the batch to the merger
		s2 := f.NewStream(ConnMeta{ID: 2, A: testClient, B: testServer, SawSYN: true})
		request(s2, "/old", time.Millisecond)
		f.Done()
		p.Close()
		var late Late = 255
		for _, o := range *got {
			if o.Request.Path == "/old" {
				late = o.Late
			}
		}
		st := p.Stats()
		if late != tc.wantLate || st.LateAfterEarlyRelease != tc.wantCount || st.LateObservations != tc.wantCount {
			t.Errorf("window %d: /old delivered with Late = %d, LateAfterEarlyRelease = %d, LateObservations = %d; want %d, %d, %d",
				tc.window, late, st.LateAfterEarlyRelease, st.LateObservations, tc.wantLate, tc.wantCount, tc.wantCount)
		}
	}
}

func TestPipelineEqualTimesKeepExchangeOrder(t *testing.T) {
	sc := parseScript(t, "c> GET / HTTP/1.1\\r\\n\\r\\n\ns> HTTP/1.1 200 OK\\r\\nContent-Type: text/event-stream\\r\\n\\r\\ndata: 1\\n\\ndata: 2\\n\\n")
	p, got := collect(DefaultConfig(), 1)
	f := p.Factory(0)
	s := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
	// The server's bytes are stamped earlier than the request: capture
	// reassembly can do that. The exchange must still come out in order.
	s.Data(true, sc.steps[0].data, testBase.Add(time.Second))
	s.Data(false, sc.steps[1].data, testBase)
	s.Close(CloseEOF, testBase.Add(time.Second))
	f.Done()
	p.Close()
	if sum := summary(*got); sum != `req1 GET /; resp1 200; event1 ""; event1 ""; end1 open` {
		t.Errorf("got %s", sum)
	}
}

// TestPipelineSkewedWorkersStayBounded: one worker streams a great many
// observations within the reorder window while the other is idle and never
// ticks again, the worst skew there is. The merger holds no more than its
// fixed window (MaxBufferedObservations, plus the batches queued for
// delivery), delivers everything in order, and none late.
func TestPipelineSkewedWorkersStayBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBufferedObservations = 4096
	var delivered int
	var last time.Time
	inOrder := true
	p := NewPipeline(cfg, 2, func(o *Observation) {
		delivered++
		inOrder = inOrder && !o.Time.Before(last) && o.Late == NotLate
		last = o.Time
	})
	busy, idle := p.Factory(0), p.Factory(1)
	idle.Tick(testBase)
	s := busy.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
	const n = 200_000
	for i := range n {
		at := time.Duration(i) * time.Microsecond // all within one second
		request(s, "/", at)
		if i%64 == 0 {
			busy.Tick(testBase.Add(at))
		}
	}
	busy.Done()
	idle.Done()
	p.Close()
	st := p.Stats()
	if delivered != n || !inOrder {
		t.Errorf("delivered %d of %d, in order and none late: %v", delivered, n, inOrder)
	}
	if limit := int64(cfg.MaxBufferedObservations + MaxQueuedObservations + localBatch); st.MergerPeak > limit {
		t.Errorf("the merger held %d observations at once, over its window of %d", st.MergerPeak, limit)
	}
	if st.EarlyReleases == 0 {
		t.Error("no early release: the test did not skew the workers")
	}
	t.Logf("peak %d, early releases %d", st.MergerPeak, st.EarlyReleases)
}

// TestPipelineReusesObservations: with Config.ReuseObservations, event,
// body and end observations are reused once delivered, requests and
// responses once their End is, and a consumer that copies what it keeps
// (keepObservation) sees what it would see without reuse; one that keeps an
// event's DataHash uncopied sees it change.
func TestPipelineReusesObservations(t *testing.T) {
	// Values go back a chunk at a time: enough of each kind for a chunk
	// to come round again.
	const events, calls = reuseChunk + 50, reuseChunk + 20
	feed := func(cfg Config, out func(*Observation)) *Pipeline {
		p := NewPipeline(cfg, 1, out)
		f := p.Factory(0)
		// Let each observation be delivered (and handed back) before the
		// next is made.
		settle := func(at time.Time, n int64) {
			f.Tick(at)
			for deadline := time.Now().Add(2 * time.Second); p.Stats().Observations < n && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
		}
		s := f.NewStream(ConnMeta{ID: 1, A: testClient, B: testServer, SawSYN: true})
		s.Data(true, []byte("GET /mcp HTTP/1.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: S1\r\n\r\n"), testBase)
		s.Data(false, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"), testBase)
		for i := range events {
			at := testBase.Add(time.Duration(i+1) * time.Second)
			s.Data(false, fmt.Appendf(nil, "id: e%d\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"n\":%d}}\n\n", i, i), at)
			settle(at, int64(i+2))
		}
		s.Close(CloseEOF, testBase.Add(time.Minute))
		// Calls answered with JSON: a request, a response, a body and an
		// end each.
		c := f.NewStream(ConnMeta{ID: 2, A: testClient, B: testServer, SawSYN: true})
		for i := range calls {
			at := testBase.Add(time.Hour + time.Duration(i)*time.Second)
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{"n":%d}}}`, i, i)
			c.Data(true, fmt.Appendf(nil, "POST /mcp HTTP/1.1\r\nMcp-Session-Id: S1\r\nContent-Length: %d\r\n\r\n%s", len(body), body), at)
			body = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"n":%d}}`, i, i)
			c.Data(false, fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body), at)
			settle(at.Add(time.Millisecond), int64(events+3+4*(i+1)))
		}
		c.Close(CloseEOF, testBase.Add(2*time.Hour))
		f.Done()
		p.Close()
		return p
	}
	cfg := DefaultConfig()
	cfg.ReorderWindow = 1 // release each observation at the next tick
	var want []*Observation
	feed(cfg, func(o *Observation) { want = append(want, o) })

	cfg.ReuseObservations = true
	var got []*Observation
	var raw []string // DataHash kept without a copy
	seen := map[any]bool{}
	reused := map[Kind]int{}
	note := func(k Kind, p any) {
		if seen[p] {
			reused[k]++
		}
		seen[p] = true
	}
	// Each exchange's request and response as delivered: one reused while
	// its exchange still points to it would differ.
	heads := map[[2]uint64]Response{}
	reqs := map[[2]uint64]*Request{}
	stale := 0
	feed(cfg, func(o *Observation) {
		ex := [2]uint64{o.Conn.ID, uint64(o.Exchange)}
		if h, ok := heads[ex]; ok && o.Response != nil && *o.Response != h {
			stale++
		}
		if r, ok := reqs[ex]; ok && o.Request != nil && !reflect.DeepEqual(*o.Request, *r) {
			stale++
		}
		switch o.Kind {
		case KindEvent:
			note(o.Kind, o.Event)
			raw = append(raw, o.Event.DataHash)
		case KindBody:
			note(o.Kind, o.Body)
		case KindEnd:
			note(o.Kind, o.End)
		case KindResponse:
			note(o.Kind, o.Response)
			heads[ex] = *o.Response
		case KindRequest:
			note(o.Kind, o.Request)
			reqs[ex] = cloneRequest(o.Request)
		}
		got = append(got, keepObservation(o))
	})
	if stale > 0 {
		t.Errorf("%d observations pointed to a request or response that had changed since it was delivered", stale)
	}
	for _, k := range []Kind{KindEvent, KindBody, KindEnd, KindResponse, KindRequest} {
		if reused[k] == 0 {
			t.Errorf("no %v was reused", k)
		}
	}
	if g, w := render(got), render(want); g != w {
		t.Errorf("with ReuseObservations:\n%s\nwithout:\n%s", g, w)
	}
	changed := 0
	for i, o := range got[2 : 2+events] {
		if raw[i] != o.Event.DataHash {
			changed++
		}
	}
	if changed == 0 {
		t.Errorf("%d of %d event observations reused, yet no uncopied DataHash changed", reused[KindEvent], events)
	}
	t.Logf("reused: %v; %d uncopied DataHash strings changed", reused, changed)
}
