package pipeline

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// sharedStoreFixture is test/fixturegen's capture of three TypeScript
// SDK tenants behind one event store keyed by stream id, with the server's
// log of what each resume replayed beside it.
const sharedStoreFixture = "ts-shared-store-get-stream"

// leak is the truth: a resume of session resumed replayed events that
// session from had been sent.
type leak struct{ resumed, from string }

// sessionInData finds the sending session the fixture server writes into
// each announcement.
var sessionInData = regexp.MustCompile(`\(session ([0-9a-f-]+)\)`)

// sharedStoreTruth reads the server's replay log: every (resumed session,
// other session) pair whose events a resume replayed.
func sharedStoreTruth(t *testing.T, path string) []leak {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var truth []leak
	seen := map[leak]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct {
			Resume   string
			Replayed []struct{ ID, Data string }
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, e := range r.Replayed {
			m := sessionInData.FindStringSubmatch(e.Data)
			if m == nil {
				t.Fatalf("%s: replayed event %s names no session: %q", path, e.ID, e.Data)
			}
			if l := (leak{r.Resume, m[1]}); l.from != l.resumed && !seen[l] {
				seen[l] = true
				truth = append(truth, l)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return truth
}

// TestSharedStoreLeaks: every other session whose events the server's log
// shows replayed into a resume is reported once as a critical
// cross_stream_replay naming both sessions (another tenant's, by its
// Authorization), and nothing else is reported.
func TestSharedStoreLeaks(t *testing.T) {
	dir := filepath.Join("testdata", "fixtures")
	truth := sharedStoreTruth(t, filepath.Join(dir, sharedStoreFixture+".replays.jsonl"))
	if len(truth) == 0 {
		t.Fatal("the server log holds no cross-session replay: the scenario did not run as designed")
	}
	recs := analyzeJSON(t, filepath.Join(dir, sharedStoreFixture+".pcap"))
	found := map[leak]int{}
	falses := 0
	for _, r := range recs {
		if r["type"] != "violation" {
			continue
		}
		l := leak{str(r["session_id"]), str(r["new_session_id"])}
		if r["kind"] != "cross_stream_replay" || r["severity"] != "critical" || !slices.Contains(truth, l) {
			falses++
			t.Errorf("false: %v %v %s -> %s: %v", r["kind"], r["severity"], l.resumed, l.from, r["explanation"])
			continue
		}
		found[l]++
	}
	missed := 0
	for _, l := range truth {
		switch found[l] {
		case 0:
			missed++
			t.Errorf("missed: session %s replayed events of session %s", l.resumed, l.from)
		case 1:
		default:
			t.Errorf("reported %d times: session %s replayed events of session %s", found[l], l.resumed, l.from)
		}
	}
	t.Logf("\n%-32s %6s %9s %7s %6s\n%-32s %6d %9d %7d %6d", "scenario", "truth", "reported", "missed", "false",
		sharedStoreFixture, len(truth), len(found), missed, falses)
}

func str(v any) string { s, _ := v.(string); return s }
