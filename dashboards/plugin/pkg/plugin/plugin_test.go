package plugin_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/experimental"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"

	"github.com/replaywatch/replaywatch/dashboards/plugin/pkg/plugin"
	"github.com/replaywatch/replaywatch/test/chtest"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata/")

func TestMain(m *testing.M) {
	code := chtest.Main(m)
	if served.tp.Server != nil {
		served.tp.Shutdown()
	}
	os.Exit(code)
}

// fixtures are the real SDK captures loaded into the database: a session
// swap under a rolling deploy, and a re-initialisation after a 404 that
// reuses the old cursor (a chain of two sessions).
var fixtures = []string{"ts-session-swap.pcap", "ts-reinit-after-404-lasteventid.pcap"}

const (
	swapSession  = "99021765-a80c-4089-96dd-7b0c2cb16687"
	hashKey      = "plugin-test-hash-key-0123456789ab" // fixed: stored hashes, hence golden frames, repeat
	fixtureDir   = "../../../../pipeline/testdata/fixtures"
	replaywatchP = "../../../../cmd/replaywatch"
)

var loaded struct {
	once     sync.Once
	srv      *chtest.Server
	db       string
	from, to time.Time
	err      error
}

// database is a database of the shared test server loaded the way the
// README says: schema apply, then analyze --clickhouse on the fixtures,
// by the real binary. Loaded once for all tests.
func database(t *testing.T) (*chtest.Server, string) {
	t.Helper()
	srv := chtest.Shared(t)
	loaded.once.Do(func() {
		loaded.srv = srv
		loaded.db = "plugin_fixtures"
		dir, err := os.MkdirTemp("", "plugin-test-")
		if err != nil {
			loaded.err = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "replaywatch")
		if out, err := exec.Command("go", "build", "-o", bin, replaywatchP).CombinedOutput(); err != nil {
			loaded.err = err
			t.Logf("go build: %s", out)
			return
		}
		dsn := srv.DSN(loaded.db)
		run := func(args ...string) {
			if loaded.err != nil {
				return
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), "REPLAYWATCH_HASH_KEY="+hashKey)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
				err = nil // violations found: what the fixtures are for
			}
			if err != nil {
				loaded.err = err
				t.Logf("replaywatch %v: %s", args, out)
			}
		}
		run("schema", "apply", "--clickhouse", dsn)
		for _, f := range fixtures {
			run("analyze", "--format", "json", "--clickhouse", dsn, "--spool-dir", filepath.Join(dir, "spool"), filepath.Join(fixtureDir, f))
		}
	})
	if loaded.err != nil {
		t.Fatalf("loading the fixtures: %v", loaded.err)
	}
	return loaded.srv, loaded.db
}

// fixtureRange is a time range around every fixture's traffic.
func fixtureRange(t *testing.T, srv *chtest.Server, db string) backend.TimeRange {
	t.Helper()
	out, err := srv.Client(context.Background(), "SELECT toString(min(first_seen)), toString(max(last_seen)) FROM "+db+".sessions FORMAT TSV", nil)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Fields(strings.TrimSpace(string(out)))
	if len(parts) != 4 {
		t.Fatalf("fixture range: %q", out)
	}
	from, err1 := time.Parse("2006-01-02 15:04:05", parts[0]+" "+parts[1])
	to, err2 := time.Parse("2006-01-02 15:04:05", parts[2]+" "+parts[3])
	if err1 != nil || err2 != nil {
		t.Fatalf("fixture range: %q", out)
	}
	return backend.TimeRange{From: from.Add(-time.Hour), To: to.Add(time.Hour)}
}

var served struct {
	once sync.Once
	tp   datasourcetest.TestPlugin
	err  error
	uid  atomic.Int64
}

// startPlugin returns the plugin served over real gRPC (the SDK's
// datasourcetest; one server per test binary, as its metrics allow) and the
// plugin context Grafana would send for a data source with these settings
// (a new instance each call).
func startPlugin(t *testing.T, jsonData map[string]any, password string) (datasourcetest.TestPlugin, backend.PluginContext) {
	t.Helper()
	served.once.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			served.err = err
			return
		}
		addr := ln.Addr().String()
		ln.Close()
		served.tp, served.err = datasourcetest.Manage(plugin.NewDatasource, datasourcetest.ManageOpts{Address: addr})
	})
	if served.err != nil {
		t.Fatal(served.err)
	}
	raw, _ := json.Marshal(jsonData)
	pc := backend.PluginContext{
		PluginID: plugin.ID,
		DataSourceInstanceSettings: &backend.DataSourceInstanceSettings{
			ID: served.uid.Add(1), UID: fmt.Sprintf("rw-test-%d", served.uid.Load()), Name: "replaywatch", JSONData: raw, Updated: time.Now(),
			DecryptedSecureJSONData: map[string]string{"password": password},
		},
	}
	return served.tp, pc
}

func settingsFor(srv *chtest.Server, db string) map[string]any {
	return map[string]any{"address": addrOf(srv), "database": db, "maxRangeDays": 3650}
}

func addrOf(srv *chtest.Server) string {
	u, _ := url.Parse(srv.DSN(""))
	return u.Host
}

func query(refID, queryType string, model map[string]any, tr backend.TimeRange) backend.DataQuery {
	model["queryType"] = queryType
	raw, _ := json.Marshal(model)
	return backend.DataQuery{RefID: refID, QueryType: queryType, JSON: raw, TimeRange: tr, Interval: time.Second, MaxDataPoints: 1000}
}

// TestQueryTypesGolden: each query type over the loaded fixtures, as
// Grafana asks over gRPC, against golden frames in testdata/ (go test
// -update rewrites them).
func TestQueryTypesGolden(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	tp, pc := startPlugin(t, settingsFor(srv, db), "")
	for _, tc := range []struct {
		name string
		q    backend.DataQuery
	}{
		{"story-session-swap", query("A", plugin.QueryStory, map[string]any{"session": swapSession}, tr)},
		{"story-session-swap-timeline", query("E", plugin.QueryStory, map[string]any{"session": swapSession, "part": "timeline"}, tr)},
		{"findings-critical", query("B", plugin.QueryFindings, map[string]any{"severity": "critical"}, tr)},
		{"findings-kind", query("C", plugin.QueryFindings, map[string]any{"kind": "unknown_last_event_id_accepted"}, tr)},
		{"resume-health", func() backend.DataQuery {
			q := query("D", plugin.QueryResumeHealth, map[string]any{}, backend.TimeRange{From: tr.From, To: tr.From.Add(3 * time.Hour)})
			q.Interval = time.Minute
			return q
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := tp.Client.QueryData(context.Background(), &backend.QueryDataRequest{PluginContext: pc, Queries: []backend.DataQuery{tc.q}})
			if err != nil {
				t.Fatal(err)
			}
			dr := resp.Responses[tc.q.RefID]
			if dr.Error != nil {
				t.Fatalf("query error: %v", dr.Error)
			}
			experimental.CheckGoldenJSONResponse(t, "testdata", tc.name, &dr, *update)
		})
	}
}

// TestHealth: a good database, and each way one can be wrong, each with a
// message that says what to do.
func TestHealth(t *testing.T) {
	srv, db := database(t)
	empty := chtest.NewDatabase(t, srv)
	old := chtest.NewDatabase(t, srv)
	ctx := context.Background()
	// A database an old release migrated to version 1 only (clickhouse-client:
	// the native driver's Exec takes no INSERT ... VALUES on 18.16).
	if err := srv.Exec(ctx, "CREATE TABLE "+old+".schema_migrations (version UInt32, name String, applied_at DateTime DEFAULT now(), replaywatch String) ENGINE = MergeTree ORDER BY version"); err != nil {
		t.Fatal(err)
	}
	if out, err := srv.Client(ctx, "INSERT INTO "+old+".schema_migrations (version, name, replaywatch) VALUES (1, 'findings tables', 'old')", nil); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	closed := func() string {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		return ln.Addr().String()
	}()
	for _, tc := range []struct {
		name     string
		settings map[string]any
		password string
		status   backend.HealthStatus
		want     string
	}{
		{"good", settingsFor(srv, db), "", backend.HealthStatusOk, "replaywatch schema version"},
		{"no schema", settingsFor(srv, empty), "", backend.HealthStatusError, "has no replaywatch schema: run `replaywatch schema apply"},
		{"old schema", settingsFor(srv, old), "", backend.HealthStatusError, "schema version 1; this plugin reads version"},
		{"nothing listening", map[string]any{"address": closed, "database": db}, "", backend.HealthStatusError, "cannot reach ClickHouse at " + closed},
		{"wrong password", map[string]any{"address": addrOf(srv), "database": db, "user": "default"}, "not-the-password", backend.HealthStatusError, `refused the connection as user "default" (check the user and the password)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, pc := startPlugin(t, tc.settings, tc.password)
			res, err := tp.Client.CheckHealth(ctx, &backend.CheckHealthRequest{PluginContext: pc})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s", res.Status, res.Message)
			if res.Status != tc.status || !strings.Contains(res.Message, tc.want) {
				t.Errorf("health %v %q, want %v containing %q", res.Status, res.Message, tc.status, tc.want)
			}
			if tc.password != "" && strings.Contains(res.Message, tc.password) {
				t.Errorf("the message shows the password: %q", res.Message)
			}
		})
	}
}

// TestBadSettings: settings Grafana could send that cannot work are
// refused with what is wrong (the instance is not made).
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		settings map[string]any
		want     string
	}{
		{map[string]any{}, "no ClickHouse address"},
		{map[string]any{"address": "clickhouse"}, "want host:port"},
		{map[string]any{"address": "ch:9000", "database": "x; DROP DATABASE y"}, "want letters, digits and _"},
		{map[string]any{"address": "ch:9000", "maxRows": 10_000_000}, "maxRows"},
	} {
		raw, _ := json.Marshal(tc.settings)
		_, err := plugin.NewDatasource(context.Background(), backend.DataSourceInstanceSettings{JSONData: raw})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings %v: %v, want an error saying %q", tc.settings, err, tc.want)
		}
	}
}

// TestHostileQueries: values from the editor are bound, never spliced into
// SQL; ranges and row counts are bounded; a bad query fails alone.
func TestHostileQueries(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	settings := settingsFor(srv, db)
	settings["maxRows"] = 2
	settings["maxRangeDays"] = 7
	tp, pc := startPlugin(t, settings, "")
	queries := []backend.DataQuery{
		query("quote", plugin.QueryStory, map[string]any{"session": "x' OR '1'='1"}, tr),
		query("backslash", plugin.QueryFindings, map[string]any{"kind": `session_swap\' OR 1=1 --`}, tr),
		query("huge", plugin.QueryFindings, map[string]any{}, backend.TimeRange{From: tr.From.Add(-400 * 24 * time.Hour), To: tr.To}),
		query("nosession", plugin.QueryStory, map[string]any{}, tr),
		query("unknown", "drop", map[string]any{}, tr),
		query("badpart", plugin.QueryStory, map[string]any{"session": swapSession, "part": "everything"}, tr),
		query("capped", plugin.QueryFindings, map[string]any{}, tr),
	}
	resp, err := tp.Client.QueryData(context.Background(), &backend.QueryDataRequest{PluginContext: pc, Queries: queries})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"quote", "backslash"} {
		dr := resp.Responses[ref]
		if dr.Error != nil {
			t.Errorf("%s: %v", ref, dr.Error)
			continue
		}
		for _, f := range dr.Frames {
			if f.Rows() != 0 && f.Name != "annotations" {
				t.Errorf("%s: frame %s has %d rows: the value reached the SQL", ref, f.Name, f.Rows())
			}
		}
	}
	for ref, want := range map[string]string{
		"huge": "over this data source's limit of 7 days", "nosession": "needs a session id", "unknown": `query type "drop"`,
		"badpart": `story part "everything": want one of annotations, epochs, events`,
	} {
		if dr := resp.Responses[ref]; dr.Error == nil || !strings.Contains(dr.Error.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", ref, dr.Error, want)
		}
	}
	capped := resp.Responses["capped"]
	if capped.Error != nil || len(capped.Frames) != 1 || capped.Frames[0].Rows() != 2 ||
		capped.Frames[0].Meta == nil || len(capped.Frames[0].Meta.Notices) != 1 {
		t.Errorf("capped findings: %v %v, want 2 rows and a notice", capped.Error, capped.Frames)
	}
}

// TestSessionSearch: the picker's resource, over real gRPC.
func TestSessionSearch(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	tp, pc := startPlugin(t, settingsFor(srv, db), "")
	search := func(rawQuery string) (int, []plugin.Session, string) {
		t.Helper()
		var got []*backend.CallResourceResponse
		err := tp.Client.CallResource(context.Background(), &backend.CallResourceRequest{
			PluginContext: pc, Path: "sessions", Method: "GET", URL: "sessions?" + rawQuery,
		}, backend.CallResourceResponseSenderFunc(func(r *backend.CallResourceResponse) error { got = append(got, r); return nil }))
		if err != nil || len(got) != 1 {
			t.Fatalf("sessions?%s: %v, %d responses", rawQuery, err, len(got))
		}
		var sessions []plugin.Session
		json.Unmarshal(got[0].Body, &sessions)
		return got[0].Status, sessions, string(got[0].Body)
	}
	span := "from=" + strconv.FormatInt(tr.From.UnixMilli(), 10) + "&to=" + strconv.FormatInt(tr.To.UnixMilli(), 10)
	status, all, body := search(span)
	if status != 200 || len(all) < 3 {
		t.Fatalf("all sessions: %d %s", status, body)
	}
	status, some, _ := search(span + "&q=" + url.QueryEscape(swapSession[:8]))
	if status != 200 || len(some) != 1 || some[0].ID != swapSession || some[0].Violations != 1 {
		t.Errorf("prefix %s: %d %+v", swapSession[:8], status, some)
	}
	if status, withV, _ := search(span + "&violations=1"); status != 200 || len(withV) == 0 || len(withV) >= len(all) {
		t.Errorf("violations=1: %d, %d of %d sessions", status, len(withV), len(all))
	}
	if status, none, _ := search(span + "&q=" + url.QueryEscape("' OR 1=1 --")); status != 200 || len(none) != 0 {
		t.Errorf("hostile prefix: %d %+v", status, none)
	}
	if status, _, body := search("from=yesterday"); status != 400 || !strings.Contains(body, "milliseconds") {
		t.Errorf("bad from: %d %s", status, body)
	}
}
