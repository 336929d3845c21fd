// Package dataset builds the data the dashboards are tested and pictured
// on: the real pipeline (the replaywatch binary's `schema apply` and
// `analyze` of pipeline/testdata/fixtures/*.pcap) into a ClickHouse
// 18.16 server started by test/chtest, every table then copied into a
// chDB (ClickHouse 26.x) database laid out by the current schema, and the
// time range and session a dashboard would be opened with.
//
// The dashboards' tests and the picture renderer (dashboards/pictures) use
// it, so the pictures show exactly what the tests check.
package dataset

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/dashboards/plugin/pkg/plugin"
	"github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/test/chdbtest"
	"github.com/replaywatch/replaywatch/test/chtest"
)

// BuildBinary builds cmd/replaywatch of the module at root into dir and
// returns its path.
func BuildBinary(root, dir string) (string, error) {
	bin := filepath.Join(dir, "replaywatch")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/replaywatch")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/replaywatch: %v\n%s", err, out)
	}
	return bin, nil
}

// datasetHashKey is the hash key of every dataset analysis (test data, not
// a secret).
const datasetHashKey = "replaywatch-dashboards-dataset-hash-key-0001"

// Run runs the replaywatch binary in root. Exit status 1 is no failure:
// analyze exits 1 when it found violations, which the fixtures are made to
// have.
func Run(root, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = root
	// A fixed hash key: the records hold keyed hashes (arguments, event
	// data), and a machine's own key (created on first use) would make
	// the pictures and golden files differ from one machine to the next.
	cmd.Env = append(os.Environ(), "REPLAYWATCH_HASH_KEY="+datasetHashKey)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil && !isFindingsExit(err) {
		return fmt.Errorf("replaywatch %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

func isFindingsExit(err error) bool {
	ee, ok := err.(*exec.ExitError)
	return ok && ee.ExitCode() == 1
}

// Analyze applies the schema to database db of srv and fills it with an
// analyze run of the fixture captures, spooling to spoolDir.
func Analyze(root, bin string, srv *chtest.Server, db, spoolDir string) error {
	dsn := srv.DSN(db)
	pcaps, err := filepath.Glob(filepath.Join(root, "pipeline/testdata/fixtures/*.pcap"))
	if err != nil || len(pcaps) == 0 {
		return fmt.Errorf("no fixture captures under %s: %v", root, err)
	}
	for i := range pcaps {
		pcaps[i], _ = filepath.Rel(root, pcaps[i])
	}
	if err := Run(root, bin, "schema", "apply", "--clickhouse", dsn); err != nil {
		return err
	}
	return Run(root, bin, append([]string{"analyze", "--clickhouse", dsn, "--spool-dir", spoolDir}, pcaps...)...)
}

// CopyToChDB opens a chDB session (chdbtest.Open: it skips or fails tb
// without libchdb.so), applies the current schema to it and copies every
// table of database db of srv into it. logf, if not nil, is told each
// table's row count.
func CopyToChDB(tb testing.TB, srv *chtest.Server, db string, logf func(format string, args ...any)) (*chdbtest.Session, error) {
	tb.Helper()
	s := chdbtest.Open(tb)
	v, err := clickhouse.ParseVersion(s.Version())
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	for _, stmt := range (clickhouse.Dialect{Version: v, Database: s.Database(), RetentionDays: 30}).Statements() {
		if err := s.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("%s: %v", stmt, err)
		}
	}
	for _, table := range clickhouse.TableNames() {
		// JSONEachRow carries every type across: 18.16's DateTime prints
		// "YYYY-MM-DD hh:mm:ss", which DateTime64(9) reads.
		out, err := srv.Client(ctx, "SELECT * FROM "+db+"."+table+" FORMAT JSONEachRow", nil)
		if err != nil {
			return nil, err
		}
		n := bytes.Count(out, []byte("\n"))
		if len(bytes.TrimSpace(out)) == 0 {
			n = 0
		} else if err := s.Exec(ctx, "INSERT INTO "+table+" FORMAT JSONEachRow\n"+string(out)); err != nil {
			return nil, fmt.Errorf("copying %s to chDB: %v", table, err)
		}
		if logf != nil {
			logf("%s: %d rows", table, n)
		}
	}
	return s, nil
}

// QueryContext is what the dashboards are opened with over the data: the
// data's time range, to the second, widened by a minute each side as the
// time picker would round it; Grafana's interval for a panel about 1000
// points wide; and, in the session variable, a session that had its id
// swapped (a session_swap finding), the corrupted session worth showing.
func QueryContext(s *chdbtest.Session) (dashboards.QueryContext, error) {
	ctx := context.Background()
	r, err := s.Query(ctx, `SELECT toUnixTimestamp(min(t)), toUnixTimestamp(max(t)) FROM (
		SELECT time AS t FROM stream_events UNION ALL SELECT time FROM violations
		UNION ALL SELECT first_seen FROM sessions UNION ALL SELECT last_seen FROM sessions)`)
	if err != nil {
		return dashboards.QueryContext{}, err
	}
	if len(r.Rows) != 1 {
		return dashboards.QueryContext{}, fmt.Errorf("time range: %d rows", len(r.Rows))
	}
	lo, _ := r.Rows[0][0].(uint64)
	hi, _ := r.Rows[0][1].(uint64)
	from := time.Unix(int64(lo)-60, 0).UTC()
	to := time.Unix(int64(hi)+60, 0).UTC()
	r, err = s.Query(ctx, `SELECT min(session_id) FROM violations FINAL WHERE kind = 'session_swap'`)
	if err != nil {
		return dashboards.QueryContext{}, err
	}
	session := ""
	if len(r.Rows) == 1 {
		session, _ = r.Rows[0][0].(string)
	}
	if session == "" {
		return dashboards.QueryContext{}, fmt.Errorf("the fixtures hold no session_swap: the session dashboard has nothing to show")
	}
	return dashboards.QueryContext{From: from, To: to, Interval: max(to.Sub(from)/1000, time.Second).Truncate(time.Second),
		Vars: map[string]string{dashboards.SessionVar: session}}, nil
}

// Data is the data set with what it is looked at with.
type Data struct {
	Session *chdbtest.Session
	Query   dashboards.QueryContext
	// Story is replaywatch's own data source (dashboards/plugin) over the
	// ClickHouse 18.16 database the data came from: the story panels'
	// queries run on it.
	Story *plugin.Datasource
}

// StoryFrames runs a panel's query of the replaywatch data source (its
// JSON, as the dashboard holds it) the way Grafana does: template
// variables replaced in the fields the plugin's frontend interpolates,
// then QueryData with the data's time range and interval.
func (d *Data) StoryFrames(ctx context.Context, target json.RawMessage) (data.Frames, error) {
	var m map[string]any
	if err := json.Unmarshal(target, &m); err != nil {
		return nil, err
	}
	for k, v := range m {
		if s, ok := v.(string); ok && k != "datasource" {
			m[k] = dashboards.ReplaceVariables(s, d.Query)
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	qt, _ := m["queryType"].(string)
	resp, err := d.Story.QueryData(ctx, &backend.QueryDataRequest{Queries: []backend.DataQuery{{
		RefID: "A", QueryType: qt, JSON: raw, Interval: d.Query.Interval, MaxDataPoints: 1000,
		TimeRange: backend.TimeRange{From: d.Query.From, To: d.Query.To},
	}}})
	if err != nil {
		return nil, err
	}
	r := resp.Responses["A"]
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Frames, nil
}

// Build does it all on srv, in a new database db it expects to exist:
// Analyze, CopyToChDB, QueryContext, and the replaywatch data source over
// db.
func Build(tb testing.TB, root, bin string, srv *chtest.Server, db string, logf func(string, ...any)) (*Data, error) {
	tb.Helper()
	spool, err := os.MkdirTemp("", "dataset-spool-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(spool)
	if err := Analyze(root, bin, srv, db, spool); err != nil {
		return nil, err
	}
	s, err := CopyToChDB(tb, srv, db, logf)
	if err != nil {
		return nil, err
	}
	qc, err := QueryContext(s)
	if err != nil {
		return nil, err
	}
	settings, err := json.Marshal(map[string]any{"address": srv.Addr, "database": db, "maxRangeDays": 3650})
	if err != nil {
		return nil, err
	}
	story, err := plugin.NewDatasource(context.Background(), backend.DataSourceInstanceSettings{JSONData: settings})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(story.(*plugin.Datasource).Dispose)
	return &Data{Session: s, Query: qc, Story: story.(*plugin.Datasource)}, nil
}
