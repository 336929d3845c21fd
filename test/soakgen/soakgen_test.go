package soakgen

import (
	"context"
	"net"
	"testing"
	"time"
)

// startServer serves a Server on a free loopback port until the test ends.
func startServer(tb testing.TB) (*Server, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := NewServer()
	hs := srv.Serve(ln, time.Minute)
	tb.Cleanup(func() { hs.Close() })
	return srv, "http://" + ln.Addr().String() + Path
}

// TestFlood runs a short flood against the server: every session, call,
// resume and delete the clients count is one the server answered, and none
// failed.
func TestFlood(t *testing.T) {
	srv, url := startServer(t)
	cfg := FloodConfig{
		URL: url, Clients: 8, Sessions: 400, Duration: time.Minute, Seed: 1,
		NewConnection: 0.4, Linger: 0.5, LingerFor: 100 * time.Millisecond, Resume: 0.3, SlowResume: 0.1, SlowDelay: 50 * time.Millisecond,
		Long: 0.1, LongSteps: 20, Delete: 0.6,
	}
	st := Flood(context.Background(), cfg)
	ss := srv.Stats()
	t.Logf("%+v in %v; server %+v", st, st.Elapsed.Round(time.Millisecond), ss)
	if st.Errors != 0 || ss.Rejected != 0 {
		t.Fatalf("%d errors (%q), %d rejected", st.Errors, st.FirstErrors, ss.Rejected)
	}
	if st.Sessions != int64(cfg.Sessions) || ss.Initialized != st.Sessions || len(srv.Minted()) != int(st.Sessions) {
		t.Errorf("sessions: clients %d, server %d, want %d", st.Sessions, ss.Initialized, cfg.Sessions)
	}
	if ss.ToolCalls != st.ToolCalls || ss.Resumes != st.Resumes || ss.Deletes != st.Deletes || st.Deletes+st.Abandoned != st.Sessions {
		t.Errorf("clients %+v and server %+v disagree", st, ss)
	}
	if n := len(srv.Resumed()); n != int(st.Resumes) {
		t.Errorf("server lists %d resumes, clients made %d", n, st.Resumes)
	}
	if ss.Pending != 0 || ss.Live != int(st.Abandoned) {
		t.Errorf("server holds %d closed streams and %d sessions, want 0 and %d", ss.Pending, ss.Live, st.Abandoned)
	}
	if st.Resumes == 0 || st.SlowResumes == 0 || st.LongCalls == 0 || st.Lingering == 0 || st.OwnConnections == 0 {
		t.Errorf("a kind of session was never made: %+v", st)
	}
}

// BenchmarkFlood measures sessions per second on this machine.
func BenchmarkFlood(b *testing.B) {
	_, url := startServer(b)
	b.ResetTimer()
	st := Flood(context.Background(), FloodConfig{
		URL: url, Clients: 32, Sessions: b.N, Duration: time.Hour, Seed: 1,
		NewConnection: 0.4, Linger: 0.5, LingerFor: 100 * time.Millisecond, Resume: 0.3, Long: 0.1, LongSteps: 20, Delete: 0.6,
	})
	b.ReportMetric(float64(st.Sessions)/st.Elapsed.Seconds(), "sessions/s")
	if st.Errors != 0 {
		b.Fatal(st.FirstErrors)
	}
}
