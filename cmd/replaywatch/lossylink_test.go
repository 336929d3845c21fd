package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/replaywatch/replaywatch/test/netnsrig"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// lossyImpairments are the impaired links of TestLossyLinkMatchesCleanLink,
// each the same in both directions: frames dropped, duplicated, held back
// behind the next three, and all delayed a little. A seed fixes which
// frames (the n-th of a direction) meet which fate. The first frames of a
// run are the same every time (client to server: ARP request, SYN, ACK,
// the initialize POST, ...; server to client: ARP reply, SYN-ACK, ACK, the
// initialize response's chunks, ...), and these seeds were chosen for what
// they do to them, so that no run goes unimpaired: both drop frame 3 of
// the client's (the initialize POST: the client's TCP retransmits it),
// duplicate and reorder early server frames, and spare the ARP and SYN
// frames, whose loss would cost a second each. Later frames meet the
// rates' fates at random.
var lossyImpairments = []struct {
	name string
	imp  netnsrig.Impairment
}{
	// Server to client: duplicates frame 6, reorders 8, drops 12. In the
	// rolling deploy frame 12 is the second progress event, the last data
	// before the balancer's FIN: the FIN overtakes it and the server
	// retransmits it after the client's SACK of the FIN (which analyze
	// once took for a 205-byte capture gap, making the swap unverifiable).
	{"seed98406", netnsrig.Impairment{Drop: 0.05, Duplicate: 0.02, Reorder: 0.02, ReorderWindow: 3,
		Delay: 2 * time.Millisecond, Seed: 98406}},
	// Server to client: duplicates frame 6, reorders 8, drops 14.
	{"seed86707", netnsrig.Impairment{Drop: 0.05, Duplicate: 0.02, Reorder: 0.02, ReorderWindow: 3,
		Delay: 2 * time.Millisecond, Seed: 86707}},
}

// lossyTimeout is the application's deadline for a call, on both links.
// The rolling deploy's first call never completes; go-sdk resumes the cut
// stream 1 to 2 s after the cut, and on the lossy link a lost SYN costs
// another second (the initial retransmission timeout): 5 s leaves the
// resume room on either link.
const lossyTimeout = 5 * time.Second

// lossyAttempts bounds the runs of a scenario on one link: a run that did
// not play as intended (the client's own report says so), or on which the
// rig's forwarder failed to write a frame, is run again. The
// findings of a run that did are compared strictly.
const lossyAttempts = 3

// lossyScenario is one scenario run on both links.
type lossyScenario struct {
	name string
	sc   netnsrig.Scenario
	// intended checks the client's report: "" when the scenario played as
	// intended.
	intended func(rig *netnsrig.Rig, res netnsrig.Result) string
	// findings, resumes, unknown and unverifiable are the summary's
	// counts on the clean link.
	findings, resumes     map[string]int
	unknown, unverifiable int
}

var lossyScenarios = []lossyScenario{
	{
		name: "rolling-deploy", sc: netnsrig.Scenario{Timeout: lossyTimeout},
		intended: lossySwapped,
		findings: map[string]int{"session_swap": 1}, resumes: map[string]int{"violated": 1}, unknown: 1,
		// The application sends the write again in its session after
		// the swap; no tools/list was seen, so reissued_call_after_break
		// cannot be judged.
		unverifiable: 1,
	},
	{
		name: "no-drain", sc: netnsrig.Scenario{NoDrain: true, Timeout: lossyTimeout},
		intended: lossyCompleted,
		findings: map[string]int{}, resumes: map[string]int{}, unknown: 0,
	},
}

// TestLossyLinkMatchesCleanLink runs real go-sdk traffic (the rolling
// deploy, and the same without the drain) between network namespaces,
// first over a clean link, then over two lossy ones: the client's link
// goes through lossyfwd, a userspace forwarder between two TAP devices
// that drops, duplicates, reorders and delays Ethernet frames, so both TCP
// stacks really retransmit. tcpdump captures on the client's interface;
// replaywatch analyze must report the same findings for every capture
// (violations, resumes, unknown outcomes, unverifiable checks, sessions,
// compared with session and event ids replaced by their roles), and the
// lossy captures must hold retransmissions. On failure the captures are
// kept (the test says where).
func TestLossyLinkMatchesCleanLink(t *testing.T) {
	rig := netnsrig.Setup(t)
	tcpdump := netnsrig.RequireTool(t, "tcpdump", "tcpdump")
	keep, err := os.MkdirTemp("", "replaywatch-lossylink-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("captures kept in %s", keep)
			return
		}
		os.RemoveAll(keep)
	})
	t.Cleanup(func() { // before the rig's: the logs are still there
		if t.Failed() {
			t.Logf("process logs of the last run:\n%s", rig.Logs())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()

	var lossyStats netnsrig.LinkStats
	var lossySegs, cleanSegs lossySegments
	for _, s := range lossyScenarios {
		t.Run(s.name, func(t *testing.T) {
			clean := lossyRun(ctx, t, rig, tcpdump, keep, s, "clean", netnsrig.Impairment{}, nil)
			cleanSegs = cleanSegs.add(clean.segs)
			if st := clean.stats; st.AToB.Written != st.AToB.Frames || st.BToA.Written != st.BToA.Frames ||
				st.AToB.Dropped+st.BToA.Dropped+st.AToB.Duplicated+st.BToA.Duplicated+st.AToB.Reordered+st.BToA.Reordered != 0 {
				t.Errorf("the clean link did not pass every frame on once, in order: %+v", st)
			}
			sum := lossySummary(t, clean.recs)
			if !lossyCountsEqual(sum["findings"], s.findings) || !lossyCountsEqual(sum["resumes"], s.resumes) ||
				sum["unknown_outcomes"] != float64(s.unknown) || sum["unverifiable"] != float64(s.unverifiable) || sum["capture_gaps"] != float64(0) {
				t.Fatalf("clean link: findings %v, resumes %v, unknown outcomes %v, unverifiable %v, capture gaps %v; want %v, %v, %d, %d, 0",
					sum["findings"], sum["resumes"], sum["unknown_outcomes"], sum["unverifiable"], sum["capture_gaps"],
					s.findings, s.resumes, s.unknown, s.unverifiable)
			}

			want := lossyFindings(clean.recs, clean.res)
			for _, li := range lossyImpairments {
				lossy := lossyRun(ctx, t, rig, tcpdump, keep, s, li.name, li.imp, clean.story)
				lossyStats = lossyStats.Add(lossy.stats)
				for _, d := range []netnsrig.DirStats{lossy.stats.AToB, lossy.stats.BToA} {
					if d.WriteErrors != 0 || d.Written != d.Frames-d.Dropped+d.Duplicated {
						t.Errorf("%s link direction %+v: want every frame written once unless dropped or duplicated", li.name, d)
					}
				}
				lossySegs = lossySegs.add(lossy.segs)
				got := lossyFindings(lossy.recs, lossy.res)
				if !slices.Equal(want, got) {
					t.Errorf("analyze found on the %s link what it did not on the clean one, or missed what it found there\n"+
						"clean capture %s, lossy capture %s\nonly on the clean link:\n  %s\nonly on the %s link:\n  %s",
						li.name, clean.pcap, lossy.pcap, strings.Join(difference(want, got), "\n  "), li.name,
						strings.Join(difference(got, want), "\n  "))
				} else {
					t.Logf("the same %d findings records on the clean and the %s link", len(got), li.name)
				}
			}
		})
	}
	t.Logf("lossy links: %+v", lossyStats)
	t.Logf("segments seen again or out of order: clean links %+v, lossy links %+v", cleanSegs, lossySegs)
	t.Logf("total %v", time.Since(began).Round(time.Millisecond))
	if t.Failed() {
		return
	}
	st := lossyStats
	if st.AToB.Dropped+st.BToA.Dropped == 0 || st.AToB.Duplicated+st.BToA.Duplicated == 0 || st.AToB.Reordered+st.BToA.Reordered == 0 {
		t.Errorf("the lossy links dropped %d, duplicated %d, reordered %d frames: want some of each",
			st.AToB.Dropped+st.BToA.Dropped, st.AToB.Duplicated+st.BToA.Duplicated, st.AToB.Reordered+st.BToA.Reordered)
	}
	// The capture is on the client's side of the forwarder: what the client
	// sends is captured before any loss, so a segment it sends twice is its
	// TCP retransmitting. What it receives is captured after the forwarder:
	// the server's retransmissions and the forwarder's duplicates and
	// reordering show as segments seen again or filling a hole.
	if lossySegs.ClientAgain == 0 {
		t.Errorf("the client's TCP never retransmitted in the lossy captures: %+v", lossySegs)
	}
	if lossySegs.ServerAgain+lossySegs.ServerLate == 0 {
		t.Errorf("no server segment came again or out of order in the lossy captures: %+v", lossySegs)
	}
}

// lossyResult is one run of a scenario on a link.
type lossyResult struct {
	res   netnsrig.Result
	story []string
	pcap  string
	stats netnsrig.LinkStats
	recs  []map[string]any
	segs  lossySegments
}

// lossyRun runs scenario s on a link with imp, capturing on the client's
// interface, until a run plays as intended (and, when want is set, tells
// the client the same story as want), at most lossyAttempts times; then
// analyzes the capture.
func lossyRun(ctx context.Context, t *testing.T, rig *netnsrig.Rig, tcpdump, dir string, s lossyScenario, link string, imp netnsrig.Impairment, want []string) lossyResult {
	t.Helper()
	for attempt := 1; attempt <= lossyAttempts; attempt++ {
		began := time.Now()
		l, err := rig.LossyLink(ctx, imp)
		if err != nil {
			t.Fatal(err)
		}
		r := lossyResult{pcap: filepath.Join(dir, fmt.Sprintf("%s-%s-%d.pcap", s.name, link, attempt))}
		capture, err := rig.StartTcpdump(tcpdump, netnsrig.Client, rig.ClientIface(), r.pcap)
		if err != nil {
			l.Stop()
			t.Fatal(err)
		}
		var runErr error
		r.res, runErr = rig.Run(ctx, s.sc)
		capLog, capErr := capture.Stop()
		r.stats, err = l.Stop()
		if capErr != nil || err != nil {
			t.Fatalf("%s link: capture: %v; link: %v", link, capErr, err)
		}
		t.Logf("%s link, attempt %d: %v (client %v); tcpdump: %s; link: %+v", link, attempt,
			time.Since(began).Round(time.Millisecond), r.res.Elapsed.Round(time.Millisecond),
			strings.ReplaceAll(capLog, "\n", ", "), r.stats)
		if runErr != nil {
			t.Logf("%s link, attempt %d: the scenario failed: %v\n%s", link, attempt, runErr, rig.Logs())
			continue
		}
		if n := r.stats.AToB.WriteErrors + r.stats.BToA.WriteErrors; n != 0 {
			// The rig's forwarder could not hand a frame to a TAP device:
			// the link failed, not analyze, so the run proves nothing.
			t.Logf("%s link, attempt %d: the forwarder failed %d writes (%q, %q)", link, attempt, n,
				r.stats.AToB.FirstWriteError, r.stats.BToA.FirstWriteError)
			continue
		}
		r.story = lossyStory(r.res)
		if why := s.intended(rig, r.res); why != "" {
			t.Logf("%s link, attempt %d: the scenario did not play as intended: %s\nclient's story:\n  %s",
				link, attempt, why, strings.Join(r.story, "\n  "))
			continue
		}
		if want != nil && !slices.Equal(r.story, want) {
			t.Logf("%s link, attempt %d: the client's story differs from the clean link's:\n  %s\nclean link:\n  %s",
				link, attempt, strings.Join(r.story, "\n  "), strings.Join(want, "\n  "))
			continue
		}
		var code int
		var stderr string
		r.recs, code, stderr = analyzeJSON(t, nil, r.pcap)
		wantCode := exitOK
		if len(s.findings) > 0 {
			wantCode = exitViolations
		}
		if code != wantCode {
			t.Errorf("%s link: analyze exit code %d, want %d (stderr %q)", link, code, wantCode, stderr)
		}
		r.segs = lossySegmentsOf(t, r.pcap, rig.Addr(netnsrig.Client))
		sum := lossySummary(t, r.recs)
		t.Logf("%s link: %s; capture gaps %v (%v bytes); segments %+v", link, lossyBrief(r.recs),
			sum["capture_gaps"], sum["capture_gap_bytes"], r.segs)
		return r
	}
	t.Fatalf("%s link: %d runs, none played as intended", link, lossyAttempts)
	return lossyResult{}
}

// lossySwapped is the rolling deploy as intended: backend1 drained during
// the call, after both progress events; go-sdk's resume answered 200 by
// backend2 with a new session; the call never completed and its retry ran
// on backend2.
func lossySwapped(rig *netnsrig.Rig, res netnsrig.Result) string {
	var why []string
	if want := rig.Addr(netnsrig.Backend1).String(); !strings.HasPrefix(res.Drained, want+":") {
		why = append(why, fmt.Sprintf("drained %q, not backend1", res.Drained))
	}
	if !slices.Equal(res.Progress, []float64{1, 2}) {
		why = append(why, fmt.Sprintf("progress %v, not [1 2]", res.Progress))
	}
	if len(res.Resumes) != 1 {
		why = append(why, fmt.Sprintf("%d resumes, not 1", len(res.Resumes)))
	} else if r := res.Resumes[0]; r.Session != res.SessionID || r.LastEventID != res.DrainedStream.LastEvent ||
		r.Status != 200 || !res.Swapped || r.ResponseSession != res.SwappedTo {
		why = append(why, fmt.Sprintf("resume %+v, not of the drained stream answered 200 with a new session", r))
	}
	if !res.Call.TimedOut {
		why = append(why, fmt.Sprintf("first call %+v did not time out", res.Call))
	}
	if res.Retry == nil || res.Retry.Result != "invoice-42: written by backend2" {
		why = append(why, fmt.Sprintf("retry %+v, not written by backend2", res.Retry))
	}
	return strings.Join(why, "; ")
}

// lossyCompleted is the scenario without the drain as intended: the call
// completed on backend1 after both progress events, nothing resumed.
func lossyCompleted(_ *netnsrig.Rig, res netnsrig.Result) string {
	var why []string
	if res.Drained != "" || len(res.Resumes) != 0 || res.Swapped {
		why = append(why, fmt.Sprintf("drained %q, %d resumes, swapped %v", res.Drained, len(res.Resumes), res.Swapped))
	}
	if !slices.Equal(res.Progress, []float64{1, 2}) {
		why = append(why, fmt.Sprintf("progress %v, not [1 2]", res.Progress))
	}
	if res.Call.Result != "invoice-42: written by backend1" || res.Call.Error != "" || res.Retry != nil {
		why = append(why, fmt.Sprintf("call %+v retry %+v, not completed on backend1", res.Call, res.Retry))
	}
	return strings.Join(why, "; ")
}

// lossyStory is what the client saw, without what differs from run to run
// (session and event ids, times, the order of concurrent requests): the
// run's HTTP exchanges, sorted, and its calls' outcomes. (When the first
// call's deadline passes, go-sdk's notifications/cancelled and the
// application's retry go out at the same time, in either order, on any
// link.)
func lossyStory(res netnsrig.Result) []string {
	session := func(id string) string {
		switch id {
		case "":
			return "-"
		case res.SessionID:
			return "S1"
		case res.SwappedTo:
			return "S2"
		}
		return "other"
	}
	event := func(id string) string {
		if i := strings.LastIndex(id, "_"); i >= 0 {
			return "E" + id[i:]
		}
		return id
	}
	// How the client stopped reading a stream that did not break is its
	// own business, not the wire's: go-sdk may close the body of a complete
	// response before it read the end, or not yet have closed it when the
	// report is made (races inside the client). Only a broken stream (an
	// unexpected EOF, a reset) tells of the wire.
	end := func(e string) string {
		switch e {
		case "", "eof", "closed by client", "context canceled", "context deadline exceeded":
			return "not broken"
		}
		return e
	}
	var story []string
	for _, e := range res.Exchanges {
		story = append(story, fmt.Sprintf("%s %s session %s last-event-id %q -> %d session %s %s events %d (%s..%s) end %q error %v",
			e.Method, e.RPC, session(e.Session), event(e.LastEventID), e.Status, session(e.ResponseSession),
			e.ContentType, e.Events, event(e.FirstEventID), event(e.LastEvent), end(e.End), e.Error != ""))
	}
	slices.Sort(story)
	story = append(story, fmt.Sprintf("progress %v; call result %q timed out %v", res.Progress, res.Call.Result, res.Call.TimedOut))
	if res.Retry != nil {
		story = append(story, fmt.Sprintf("retry result %q timed out %v", res.Retry.Result, res.Retry.TimedOut))
	}
	return story
}

// lossyVolatile are the record fields that differ between two runs of the
// same scenario whatever the link: ids derived from session ids, times,
// addresses and ports, and where in a connection an exchange fell (which
// connections the client reuses depends on timing).
var lossyVolatile = map[string]bool{
	"id": true, "time": true, "client": true, "server": true, "called_at": true,
	"first_seen": true, "last_seen": true, "connection": true, "exchange": true,
}

// lossySummaryKeys are the summary's fields about what was found: not
// packet or byte counts, which loss changes, nor capture gaps. A segment
// the network lost for good is a true hole on the client's wire, rightly
// reported as a gap: the server's last bytes (the chunked body's
// terminator) lost after the client had read the result and closed, the
// client answering the retransmission, or the server's FIN, with an RST.
// What a gap does to the findings (unverifiable checks) is compared.
var lossySummaryKeys = []string{
	"type", "http_exchanges", "mcp_exchanges", "non_mcp_exchanges", "sse_events", "mcp_sessions", "resumes",
	"findings", "violations", "unknown_outcomes", "unverifiable", "limits_hit", "partial_reason", "errors",
}

// lossyFindings turns analyze's records into comparable lines: every
// record but the summary whole, without its volatile fields, with the
// client's session id written S1, the swapped-to one S2, and the stream
// part of event ids by order of appearance; the summary's findings fields.
// Sorted.
func lossyFindings(recs []map[string]any, res netnsrig.Result) []string {
	var pairs []string
	for id, label := range map[string]string{res.SessionID: "<S1>", res.SwappedTo: "<S2>"} {
		if id != "" {
			pairs = append(pairs, id, label)
		}
	}
	streams := map[string]bool{}
	for _, r := range recs {
		for _, k := range []string{"last_event_id", "first_event_id", "stream_id"} {
			v, _ := r[k].(string)
			if i := strings.LastIndex(v, "_"); i > 0 {
				v = v[:i]
			}
			if v != "" && !streams[v] {
				streams[v] = true
				pairs = append(pairs, v, fmt.Sprintf("<stream%d>", len(streams)))
			}
		}
	}
	ids := strings.NewReplacer(pairs...)
	var canon func(v any) any
	canon = func(v any) any {
		switch v := v.(type) {
		case string:
			return ids.Replace(v)
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				out[i] = canon(e)
			}
			return out
		case map[string]any:
			out := map[string]any{}
			for k, e := range v {
				switch {
				case lossyVolatile[k]:
				case k == "violation_ids":
					n := 0
					if l, ok := e.([]any); ok {
						n = len(l)
					}
					out[k+"_count"] = n
				default:
					out[k] = canon(e)
				}
			}
			return out
		}
		return v
	}
	var lines []string
	for _, r := range recs {
		if r["type"] == "summary" {
			s := map[string]any{}
			for _, k := range lossySummaryKeys {
				s[k] = r[k]
			}
			r = s
		}
		b, _ := json.Marshal(canon(r))
		lines = append(lines, string(b))
	}
	slices.Sort(lines)
	return lines
}

// lossySummary is the summary record.
func lossySummary(t *testing.T, recs []map[string]any) map[string]any {
	t.Helper()
	for _, r := range recs {
		if r["type"] == "summary" {
			return r
		}
	}
	t.Fatal("analyze printed no summary")
	return nil
}

// lossyCountsEqual compares a JSON object of counts with want.
func lossyCountsEqual(v any, want map[string]int) bool {
	m, _ := v.(map[string]any)
	if len(m) != len(want) {
		return false
	}
	for k, n := range want {
		if m[k] != float64(n) {
			return false
		}
	}
	return true
}

// lossyBrief lists the record types analyze printed, with the violations'
// kinds and severities.
func lossyBrief(recs []map[string]any) string {
	var parts []string
	for _, r := range recs {
		switch r["type"] {
		case "violation":
			parts = append(parts, fmt.Sprintf("violation %v (%v)", r["kind"], r["severity"]))
		case "resume":
			parts = append(parts, fmt.Sprintf("resume %v", r["outcome"]))
		case "summary":
		default:
			parts = append(parts, fmt.Sprint(r["type"]))
		}
	}
	return strings.Join(parts, ", ")
}

// lossySegments count the TCP segments (with data, SYN or FIN) of a capture
// that carried nothing new: Again, a sequence range seen before (a
// retransmission or a duplicate); Late, one below the highest sequence
// number seen in its direction (filling a hole: a retransmission of a lost
// segment, or a reordered one). Client counts segments the client sent.
type lossySegments struct {
	Segments                int
	ClientAgain, ClientLate int
	ServerAgain, ServerLate int
	RetransmittedSYNsOrFINs int
}

func (s lossySegments) add(o lossySegments) lossySegments {
	return lossySegments{s.Segments + o.Segments, s.ClientAgain + o.ClientAgain, s.ClientLate + o.ClientLate,
		s.ServerAgain + o.ServerAgain, s.ServerLate + o.ServerLate, s.RetransmittedSYNsOrFINs + o.RetransmittedSYNsOrFINs}
}

func lossySegmentsOf(t *testing.T, pcap string, client netip.Addr) lossySegments {
	t.Helper()
	pkts, lt, err := pcaprec.ReadPackets(pcap)
	if err != nil {
		t.Fatal(err)
	}
	type flow struct {
		src, dst         netip.Addr
		srcPort, dstPort layers.TCPPort
	}
	type seen struct {
		ranges map[[2]uint32]bool
		end    uint32 // the highest sequence number seen, plus one
	}
	flows := map[flow]*seen{}
	var s lossySegments
	for _, p := range pkts {
		pkt := gopacket.NewPacket(p.Data, lt, gopacket.NoCopy)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			continue
		}
		n := uint32(len(tcp.Payload))
		if tcp.SYN {
			n++
		}
		if tcp.FIN {
			n++
		}
		if n == 0 {
			continue
		}
		s.Segments++
		src, _ := netip.AddrFromSlice(ip.SrcIP)
		dst, _ := netip.AddrFromSlice(ip.DstIP)
		f := flow{src, dst, tcp.SrcPort, tcp.DstPort}
		fs := flows[f]
		fromClient := src == client
		if fs == nil {
			fs = &seen{ranges: map[[2]uint32]bool{}, end: tcp.Seq}
			flows[f] = fs
		}
		r := [2]uint32{tcp.Seq, n}
		switch {
		case fs.ranges[r]:
			if fromClient {
				s.ClientAgain++
			} else {
				s.ServerAgain++
			}
			if len(tcp.Payload) == 0 {
				s.RetransmittedSYNsOrFINs++
			}
		case int32(tcp.Seq-fs.end) < 0:
			if fromClient {
				s.ClientLate++
			} else {
				s.ServerLate++
			}
		}
		fs.ranges[r] = true
		if end := tcp.Seq + n; int32(end-fs.end) > 0 {
			fs.end = end
		}
	}
	return s
}
