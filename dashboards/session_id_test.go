package dashboards_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/dashboards"
	"github.com/replaywatch/replaywatch/sink/clickhouse"
	"github.com/replaywatch/replaywatch/test/chdbtest"
)

// TestSessionIDsFromTheWireStayValues opens the session dashboard on
// session ids a client could send (Mcp-Session-Id is any visible ASCII):
// quotes and backslashes must neither break a panel's SQL nor widen it to
// other sessions. Every table holds a row of another session in the time
// range; each panel that reads ${session} must return it for that session
// and nothing for the hostile ones.
func TestSessionIDsFromTheWireStayValues(t *testing.T) {
	ctx := context.Background()
	s := chdbtest.Open(t)
	v, err := clickhouse.ParseVersion(s.Version())
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range (clickhouse.Dialect{Version: v, Database: s.Database(), RetentionDays: 30}).Statements() {
		if err := s.Exec(ctx, stmt); err != nil {
			t.Fatalf("schema: %v\n%s", err, stmt)
		}
	}
	const other = "S-other"
	now := time.Now().UTC().Truncate(time.Second)
	for _, table := range clickhouse.TableNames() {
		res, err := s.Query(ctx, "SELECT count() FROM system.columns WHERE database = currentDatabase() AND table = '"+table+"' AND name IN ('session_id', 'time')")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.Rows[0][0]) != "2" {
			continue
		}
		insert := fmt.Sprintf("INSERT INTO %s (session_id, time) VALUES ('%s', '%s')", table, other, now.Add(-time.Minute).Format(time.DateTime))
		if err := s.Exec(ctx, insert); err != nil {
			t.Fatalf("%v\n%s", err, insert)
		}
	}
	var session *jsonDashboard
	for _, d := range loadDashboards(t) {
		if d.UID == dashboards.SessionUID {
			session = d
		}
	}
	checked := 0
	for _, p := range session.allPanels() {
		for _, q := range p.Targets {
			if !strings.Contains(q.RawSQL, "session") || strings.Contains(q.RawSQL, "FROM sessions") {
				continue
			}
			checked++
			for _, id := range []string{other, `x'OR'1'='1`, `x' OR 1 = 1 --`, `x\`, `S-other'--`} {
				qc := dashboards.QueryContext{From: now.Add(-time.Hour), To: now, Interval: time.Minute,
					Vars: map[string]string{dashboards.SessionVar: id}}
				sql, err := dashboards.Expand(q.RawSQL, qc)
				if err != nil {
					t.Fatal(err)
				}
				r, err := s.Query(ctx, sql)
				if err != nil {
					t.Errorf("%s, session %q: %v\n%s", p.Title, id, err, sql)
					continue
				}
				if want := id == other; (len(r.Rows) > 0) != want {
					t.Errorf("%s, session %q: %d rows, want rows: %v\n%s", p.Title, id, len(r.Rows), want, sql)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no panel of the session dashboard reads ${session}")
	}
}
