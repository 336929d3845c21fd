package netnsrig_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/netnsrig"
	"github.com/replaywatch/replaywatch/test/testenv"
)

func TestNewAndClose(t *testing.T) {
	if err := netnsrig.Available(); err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	r, err := netnsrig.New()
	if err != nil {
		t.Fatal(err)
	}
	names := r.Namespaces()
	if len(names) != 5 {
		t.Errorf("namespaces %v, want 5", names)
	}
	have, err := netnsrig.Existing()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			t.Errorf("namespace %s not listed by ip netns: %v", n, have)
		}
	}
	out, err := exec.Command("ip", "-n", r.NS(netnsrig.Client), "-br", "addr", "show", "dev", r.ClientIface()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), r.Addr(netnsrig.Client).String()+"/24") || !strings.Contains(string(out), "UP") {
		t.Errorf("client interface: %v %s", err, out)
	}
	// Close kills what still runs in the namespaces.
	sleeper := r.Exec(netnsrig.LB, "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("process left in a namespace: Wait = %v, want killed by Close", err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	have, err = netnsrig.Existing()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if slices.Contains(have, n) {
			t.Errorf("namespace %s survived Close", n)
		}
	}
	if _, err := os.Stat(r.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rig directory survived Close: %v", err)
	}
}

// TestLossyLink runs the scenario without the drain over an impaired
// client link, then over a clean one replacing it: the client's calls
// complete on both, the forwarder's counters add up, and a second link
// cannot run beside the first.
func TestLossyLink(t *testing.T) {
	r := netnsrig.Setup(t)
	t.Cleanup(func() {
		if logs := r.Logs(); t.Failed() && logs != "" {
			t.Logf("process logs:\n%s", logs)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, imp := range []netnsrig.Impairment{
		{Drop: 0.05, Duplicate: 0.02, Reorder: 0.02, ReorderWindow: 3, Delay: 2 * time.Millisecond, Seed: 98406},
		{},
	} {
		l, err := r.LossyLink(ctx, imp)
		if err != nil {
			t.Fatal(err)
		}
		if r.ClientIface() != "tap-client" {
			t.Errorf("client interface %q, want tap-client", r.ClientIface())
		}
		if _, err := r.LossyLink(ctx, imp); err == nil {
			t.Error("a second lossy link started beside the first")
		}
		res, err := r.Run(ctx, netnsrig.Scenario{NoDrain: true})
		st, stopErr := l.Stop()
		if err != nil || stopErr != nil {
			t.Fatalf("impairment %+v: run: %v; stop: %v", imp, err, stopErr)
		}
		t.Logf("impairment %+v: client %v, link %+v", imp, res.Elapsed.Round(time.Millisecond), st)
		if res.Call.Result != "invoice-42: written by backend1" || res.Drained != "" || len(res.Resumes) != 0 {
			t.Errorf("call %+v, drained %q, resumes %v: want the call completed on backend1", res.Call, res.Drained, res.Resumes)
		}
		for _, d := range []netnsrig.DirStats{st.AToB, st.BToA} {
			if d.Frames == 0 || d.WriteErrors != 0 || d.Written != d.Frames-d.Dropped+d.Duplicated {
				t.Errorf("direction %+v: want frames, each written once unless dropped or duplicated", d)
			}
		}
		if imp == (netnsrig.Impairment{}) {
			if st.AToB.Dropped+st.AToB.Duplicated+st.AToB.Reordered+st.BToA.Dropped+st.BToA.Duplicated+st.BToA.Reordered != 0 {
				t.Errorf("the clean link impaired frames: %+v", st)
			}
		} else if st.AToB.Dropped == 0 || st.BToA.Dropped == 0 {
			t.Errorf("the impaired link dropped nothing in a direction: %+v", st)
		}
	}
}

// TestRollingDeployCapture proves the rig on the wire: tcpdump on the
// client's veth records the rolling deploy, and replaywatch analyze finds
// the session swap in that capture, and nothing it should not.
func TestRollingDeployCapture(t *testing.T) {
	var names []string
	t.Cleanup(func() { // registered before the rig's: runs after it
		if len(names) == 0 {
			return // skipped before a rig was made
		}
		have, err := netnsrig.Existing()
		if err != nil {
			t.Error(err)
			return
		}
		for _, n := range names {
			if slices.Contains(have, n) {
				t.Errorf("namespace %s survived the rig", n)
			}
		}
	})
	r := netnsrig.Setup(t)
	names = r.Namespaces()
	t.Cleanup(func() { // before the rig's: the logs are still there
		if logs := r.Logs(); t.Failed() && logs != "" {
			t.Logf("process logs:\n%s", logs)
		}
	})
	tcpdump := netnsrig.RequireTool(t, "tcpdump", "tcpdump")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dir := t.TempDir()
	analyzer := filepath.Join(dir, "replaywatch")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", analyzer, "github.com/replaywatch/replaywatch/cmd/replaywatch").CombinedOutput(); err != nil {
		t.Fatalf("building replaywatch: %v\n%s", err, out)
	}

	pcap := filepath.Join(dir, "client.pcap")
	began := time.Now()
	capture, err := r.StartTcpdump(tcpdump, netnsrig.Client, r.ClientIface(), pcap)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RollingDeploy(ctx)
	if log, err := capture.Stop(); err != nil {
		t.Error(err)
	} else {
		t.Logf("tcpdump: %s", log)
	}
	t.Logf("rolling deploy and capture: %v (client %v)", time.Since(began).Round(time.Millisecond), res.Elapsed.Round(time.Millisecond))
	js, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("result:\n%s", js)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, res)

	info, err := os.Stat(pcap)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, analyzer, "analyze", "--format", "json", pcap)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("analyze: %v (want exit status 1: violations found)\n%s", err, out)
	}
	t.Logf("capture %d bytes; analyze:\n%s", info.Size(), out)
	checkAnalysis(t, res, out)
}

// checkResult checks the client's story: the drain hit backend1 during the
// call, the resume landed on backend2 and got 200 with a new session, the
// call never completed and its retry ran on backend2.
func checkResult(t *testing.T, r *netnsrig.Rig, res netnsrig.Result) {
	t.Helper()
	if want := r.Addr(netnsrig.Backend1).String(); !strings.HasPrefix(res.Drained, want+":") {
		t.Errorf("drained %q, want backend1 (%s)", res.Drained, want)
	}
	if !slices.Equal(res.Progress, []float64{1, 2}) {
		t.Errorf("progress %v, want [1 2] (both before the drain, nothing after)", res.Progress)
	}
	if len(res.Resumes) != 1 {
		t.Fatalf("%d resumes, want 1: %+v", len(res.Resumes), res.Resumes)
	}
	resume := res.Resumes[0]
	if resume.Session != res.SessionID || resume.LastEventID != res.DrainedStream.LastEvent {
		t.Errorf("resume session %s cursor %s, want %s and the drained stream's last event %s",
			resume.Session, resume.LastEventID, res.SessionID, res.DrainedStream.LastEvent)
	}
	if resume.Status != 200 || !res.Swapped || resume.ResponseSession != res.SwappedTo || res.SwappedTo == res.SessionID {
		t.Errorf("resume answered %d with session %q (swapped %v to %q), want 200 with a new session",
			resume.Status, resume.ResponseSession, res.Swapped, res.SwappedTo)
	}
	if !res.Call.TimedOut {
		t.Errorf("first call %+v, want the application's timeout", res.Call)
	}
	if res.Retry == nil || res.Retry.Result != "invoice-42: written by backend2" {
		t.Errorf("retry %+v, want the write re-run on backend2", res.Retry)
	}
}

// record is one line of analyze --format json; only the fields checked.
type record struct {
	Type         string         `json:"type"`
	Kind         string         `json:"kind"`
	Check        string         `json:"check"`
	Reason       string         `json:"reason"`
	SessionID    string         `json:"session_id"`
	NewSessionID string         `json:"new_session_id"`
	LastEventID  string         `json:"last_event_id"`
	Outcome      string         `json:"outcome"`
	Tool         string         `json:"tool"`
	Ended        string         `json:"ended"`
	Packets      int            `json:"packets"`
	TCPConns     int            `json:"tcp_connections"`
	HTTP         int            `json:"http_exchanges"`
	Exchanges    int            `json:"mcp_exchanges"`
	Findings     map[string]int `json:"findings"`
	Violations   int            `json:"violations"`
	Unverifiable int            `json:"unverifiable"`
	CaptureGaps  int            `json:"capture_gaps"`
	Errors       []string       `json:"errors"`
}

// checkAnalysis asserts the closed set of findings: one session_swap (the
// resume of the client's session answered with the new one), its resume
// violated, the first slow_write's outcome unknown, and one check
// unverifiable: the write the application sends again in its session after
// the swap, whose annotations no tools/list showed
// (reissued_call_after_break).
func checkAnalysis(t *testing.T, res netnsrig.Result, out []byte) {
	t.Helper()
	byType := map[string][]record{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var rec record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("analyze output line %q: %v", line, err)
		}
		byType[rec.Type] = append(byType[rec.Type], rec)
	}
	var seen []string
	for typ, recs := range byType {
		seen = append(seen, fmt.Sprintf("%s x%d", typ, len(recs)))
	}
	slices.Sort(seen)
	t.Logf("reported: %s", strings.Join(seen, ", "))

	sums := byType["summary"]
	if len(sums) != 1 {
		t.Fatalf("%d summary lines, want 1", len(sums))
	}
	sum := sums[0]
	if sum.Packets == 0 || sum.TCPConns == 0 || sum.Exchanges == 0 {
		t.Errorf("empty capture: %d packets, %d TCP connections, %d MCP exchanges", sum.Packets, sum.TCPConns, sum.Exchanges)
	}
	if sum.HTTP != len(res.Exchanges) || sum.Exchanges != len(res.Exchanges) {
		t.Errorf("%d HTTP exchanges (%d MCP) in the capture, the client made %d", sum.HTTP, sum.Exchanges, len(res.Exchanges))
	}
	if sum.Violations != 1 || len(sum.Findings) != 1 || sum.Findings["session_swap"] != 1 {
		t.Errorf("findings %v (%d violations), want exactly one session_swap", sum.Findings, sum.Violations)
	}
	if sum.CaptureGaps != 0 || len(sum.Errors) != 0 {
		t.Errorf("capture gaps %d, errors %v: want none", sum.CaptureGaps, sum.Errors)
	}
	if u := byType["unverifiable"]; sum.Unverifiable != 1 || len(u) != 1 || u[0].Check != "reissued_call_after_break" ||
		u[0].Reason != "tool annotations not seen" || u[0].SessionID != res.SessionID {
		t.Errorf("unverifiable %+v, want the re-sent slow_write's reissued_call_after_break on %s (tool annotations not seen)", u, res.SessionID)
	}
	for typ := range byType {
		if !slices.Contains([]string{"violation", "resume", "session", "unknown_outcome", "unverifiable", "summary"}, typ) {
			t.Errorf("unexpected %s records: %+v", typ, byType[typ])
		}
	}
	if v := byType["violation"]; len(v) != 1 || v[0].Kind != "session_swap" || v[0].SessionID != res.SessionID ||
		v[0].NewSessionID != res.SwappedTo || v[0].LastEventID != res.Resumes[0].LastEventID {
		t.Errorf("violations %+v, want one session_swap of %s to %s at %s", v, res.SessionID, res.SwappedTo, res.Resumes[0].LastEventID)
	}
	if rs := byType["resume"]; len(rs) != 1 || rs[0].Outcome != "violated" {
		t.Errorf("resumes %+v, want one, violated", rs)
	}
	if u := byType["unknown_outcome"]; len(u) != 1 || u[0].Tool != "slow_write" || u[0].SessionID != res.SessionID {
		t.Errorf("unknown outcomes %+v, want the first slow_write on %s", u, res.SessionID)
	}
	var sessions []string
	for _, s := range byType["session"] {
		sessions = append(sessions, s.SessionID)
		// The capture holds the client's DELETE: its session ends there.
		if s.SessionID == res.SessionID && s.Ended != "deleted" {
			t.Errorf("the client's session ended %q, want deleted (the end of the capture is missing)", s.Ended)
		}
	}
	slices.Sort(sessions)
	want := []string{res.SessionID, res.SwappedTo}
	slices.Sort(want)
	if !slices.Equal(sessions, want) {
		t.Errorf("sessions %v, want the client's and the swapped one %v", sessions, want)
	}
}
