package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/replaywatch/replaywatch/dashboards/plugin/pkg/plugin"
)

// queryAll sends queries in one request, as Grafana does, and returns the
// responses by RefID.
func queryAll(t *testing.T, settings map[string]any, queries ...backend.DataQuery) backend.Responses {
	t.Helper()
	tp, pc := startPlugin(t, settings, "")
	resp, err := tp.Client.QueryData(context.Background(), &backend.QueryDataRequest{PluginContext: pc, Queries: queries})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Responses
}

// frameNamed is the response's frame of that name, or nil.
func frameNamed(dr backend.DataResponse, name string) *data.Frame {
	for _, f := range dr.Frames {
		if f.Name == name {
			return f
		}
	}
	return nil
}

// TestResumeHealthSeriesHaveUniqueLabels: Grafana's server-side expressions
// (alert rules) split the wide frame into one series per number field and
// tell them apart by their labels only; every field needs its own, or the
// rule fails with "frame cannot uniquely be identified by its labels".
func TestResumeHealthSeriesHaveUniqueLabels(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	out, err := srv.Client(context.Background(), "SELECT any(server) FROM "+db+".resumes FORMAT TSV", nil)
	if err != nil {
		t.Fatal(err)
	}
	server := strings.TrimSpace(string(out))
	if server == "" {
		t.Fatal("the fixtures have no resume with a server")
	}
	for _, tc := range []struct {
		name   string
		server string
	}{
		{"all servers", ""},
		{"one server", server},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := query("H", plugin.QueryResumeHealth, map[string]any{"server": tc.server}, tr)
			q.Interval = time.Minute
			dr := queryAll(t, settingsFor(srv, db), q)["H"]
			if dr.Error != nil || len(dr.Frames) != 1 {
				t.Fatalf("%v, %d frames", dr.Error, len(dr.Frames))
			}
			var names []string
			seen := map[string]string{}
			for _, f := range dr.Frames[0].Fields {
				if !f.Type().Numeric() {
					continue
				}
				names = append(names, f.Name)
				id := f.Labels.String()
				if id == "" {
					t.Errorf("field %s has no labels", f.Name)
				} else if other, dup := seen[id]; dup {
					t.Errorf("fields %s and %s have the same labels {%s}", other, f.Name, id)
				}
				seen[id] = f.Name
				if f.Labels["outcome"] != f.Name {
					t.Errorf("field %s: label outcome %q, want the field's name", f.Name, f.Labels["outcome"])
				}
				if f.Labels["server"] != tc.server {
					t.Errorf("field %s: label server %q, want %q", f.Name, f.Labels["server"], tc.server)
				}
			}
			if got, want := strings.Join(names, ","), "resumed,rejected_404,rejected_4xx,violated,unverifiable"; got != want {
				t.Errorf("number fields %s, want %s", got, want)
			}
		})
	}
}

// TestStoryEpochsOverlapRange: a session is part of its story's epochs when
// it overlaps the time range (as the session search finds it), also when it
// started before the range or runs past its end.
func TestStoryEpochsOverlapRange(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	out, err := srv.Client(context.Background(), "SELECT toString(first_seen), toString(last_seen) FROM "+db+
		".sessions FINAL WHERE session_id = '"+swapSession+"' FORMAT TSV", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := strings.Split(strings.TrimSpace(string(out)), "\t")
	if len(p) != 2 {
		t.Fatalf("session %s: %q", swapSession, out)
	}
	first, err1 := time.Parse(time.DateTime, p[0])
	last, err2 := time.Parse(time.DateTime, p[1])
	if err1 != nil || err2 != nil || last.Sub(first) < 3*time.Second {
		t.Fatalf("session %s: %q, want one that lasts a few seconds", swapSession, out)
	}
	for _, tc := range []struct {
		name  string
		r     backend.TimeRange
		found bool
	}{
		{"range around the session", tr, true},
		{"session runs past the range", backend.TimeRange{From: tr.From, To: last.Add(-time.Second)}, true},
		{"session started before the range", backend.TimeRange{From: first.Add(time.Second), To: tr.To}, true},
		{"range inside the session", backend.TimeRange{From: first.Add(time.Second), To: last.Add(-time.Second)}, true},
		{"range before the session", backend.TimeRange{From: tr.From, To: first.Add(-time.Second)}, false},
		{"range after the session", backend.TimeRange{From: last.Add(time.Second), To: tr.To}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dr := queryAll(t, settingsFor(srv, db), query("S", plugin.QueryStory, map[string]any{"session": swapSession}, tc.r))["S"]
			if dr.Error != nil {
				t.Fatal(dr.Error)
			}
			epochs := frameNamed(dr, "epochs")
			if epochs == nil {
				t.Fatal("no epochs frame")
			}
			sessions, _ := epochs.FieldByName("session")
			found := false
			for i := range epochs.Rows() {
				found = found || sessions.At(i).(string) == swapSession
			}
			if found != tc.found {
				t.Errorf("range %s..%s, session %s..%s: in the epochs %v, want %v",
					tc.r.From.Format(time.TimeOnly), tc.r.To.Format(time.TimeOnly), first.Format(time.TimeOnly), last.Format(time.TimeOnly), found, tc.found)
			}
		})
	}
}

// TestResumeHealthPointsWithinLimit: resume health has no more points than
// the row limit, whatever the range's alignment to the interval; the points
// are a step apart and cover the range.
func TestResumeHealthPointsWithinLimit(t *testing.T) {
	srv, db := database(t)
	base := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC) // an even second, a whole minute
	type rangeCase struct {
		from, to time.Time
		interval time.Duration
		limit    int
	}
	cases := []rangeCase{{base.Add(time.Second), base.Add(20 * time.Second), 2 * time.Second, 10}}
	for _, off := range []time.Duration{0, time.Second, 2 * time.Second, 59 * time.Second} {
		for _, span := range []time.Duration{time.Second, 5 * time.Second, 19 * time.Second, 20 * time.Second, 21 * time.Second, 7 * time.Minute} {
			for _, interval := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 7 * time.Second} {
				for _, limit := range []int{1, 2, 3, 10} {
					cases = append(cases, rangeCase{base.Add(off), base.Add(off + span), interval, limit})
				}
			}
		}
	}
	var queries []backend.DataQuery
	for i, c := range cases {
		q := query(fmt.Sprint(i), plugin.QueryResumeHealth, map[string]any{"limit": c.limit}, backend.TimeRange{From: c.from, To: c.to})
		q.Interval = c.interval
		queries = append(queries, q)
	}
	resp := queryAll(t, settingsFor(srv, db), queries...)
	for i, c := range cases {
		name := fmt.Sprintf("range %s..%s interval %s limit %d", c.from.Format(time.TimeOnly), c.to.Format(time.TimeOnly), c.interval, c.limit)
		dr := resp[fmt.Sprint(i)]
		if dr.Error != nil || len(dr.Frames) != 1 {
			t.Errorf("%s: %v, %d frames", name, dr.Error, len(dr.Frames))
			continue
		}
		times, _ := dr.Frames[0].FieldByName("time")
		n := times.Len()
		if n < 1 || n > c.limit {
			t.Errorf("%s: %d points, want 1 to %d", name, n, c.limit)
			continue
		}
		firstT, lastT := times.At(0).(time.Time), times.At(n-1).(time.Time)
		if firstT.After(c.from) {
			t.Errorf("%s: the first point %s is after the range's start", name, firstT.Format(time.TimeOnly))
		}
		if n == 1 {
			continue
		}
		step := times.At(1).(time.Time).Sub(firstT)
		if !lastT.Add(step).After(c.to) || step < c.interval || lastT.Sub(firstT) != time.Duration(n-1)*step {
			t.Errorf("%s: %d points %s..%s, step %s: want them evenly spaced, covering the range, at least the interval apart",
				name, n, firstT.Format(time.TimeOnly), lastT.Format(time.TimeOnly), step)
		}
	}
}

// TestMaxRangeDaysBounds: maxRangeDays up to the documented maximum works;
// above it the settings are refused (a huge value once overflowed the
// duration and refused every query).
func TestMaxRangeDaysBounds(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	for _, tc := range []struct {
		days    int
		refused string // "": accepted, and a query over the fixtures runs
	}{
		{1, ""},
		{3650, ""},
		{plugin.HardMaxRangeDays, ""},
		{plugin.HardMaxRangeDays + 1, fmt.Sprintf("maxRangeDays %d: want 1 to %d", plugin.HardMaxRangeDays+1, plugin.HardMaxRangeDays)},
		{200_000, "maxRangeDays 200000: want 1 to"},
		{-1, "maxRangeDays -1: want 1 to"},
	} {
		t.Run(fmt.Sprint(tc.days), func(t *testing.T) {
			settings := settingsFor(srv, db)
			settings["maxRangeDays"] = tc.days
			raw, _ := json.Marshal(settings)
			_, err := plugin.NewDatasource(context.Background(), backend.DataSourceInstanceSettings{JSONData: raw})
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Errorf("settings: %v, want an error saying %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("settings: %v", err)
			}
			dr := queryAll(t, settings, query("F", plugin.QueryFindings, map[string]any{}, backend.TimeRange{From: tr.From, To: tr.From.Add(23 * time.Hour)}))["F"]
			if dr.Error != nil {
				t.Errorf("a 23 hour range: %v", dr.Error)
			}
		})
	}
}

// TestMaxRangeNeverOverflows: MaxRange of any number of days is the days
// as a duration, or the longest duration when they do not fit in one: never
// negative (a huge maxRangeDays once refused every query).
func TestMaxRangeNeverOverflows(t *testing.T) {
	const day = 24 * time.Hour
	const fits = int(math.MaxInt64 / int64(day)) // 106751 days
	for _, tc := range []struct {
		days int
		want time.Duration
	}{
		{1, day},
		{31, 31 * day},
		{plugin.HardMaxRangeDays, time.Duration(plugin.HardMaxRangeDays) * day},
		{fits, time.Duration(fits) * day},
		{fits + 1, math.MaxInt64},
		{200_000, math.MaxInt64},
		{math.MaxInt, math.MaxInt64},
	} {
		if got := (plugin.Settings{MaxRangeDays: tc.days}).MaxRange(); got != tc.want {
			t.Errorf("MaxRange of %d days: %s, want %s", tc.days, got, tc.want)
		}
	}
}

// TestAddressPort: the address needs a host and a numeric port 1 to 65535.
func TestAddressPort(t *testing.T) {
	for _, tc := range []struct {
		address string
		refused string // "": accepted
	}{
		{"clickhouse:9000", ""},
		{"127.0.0.1:1", ""},
		{"[::1]:65535", ""},
		{"clickhouse", "want host:port"},
		{"clickhouse:", "want a port number from 1 to 65535"},
		{"clickhouse:native", "want a port number from 1 to 65535"},
		{"clickhouse:99999", "want a port number from 1 to 65535"},
		{"clickhouse:0", "want a port number from 1 to 65535"},
		{"clickhouse:-1", "want a port number from 1 to 65535"},
		{"clickhouse:+9000", "want a port number from 1 to 65535"},
	} {
		t.Run(tc.address, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"address": tc.address})
			_, err := plugin.NewDatasource(context.Background(), backend.DataSourceInstanceSettings{JSONData: raw})
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("%v, want an error saying %q", err, tc.refused)
			}
		})
	}
}

// TestStoryAnnotationsDataTopic: the whole story marks its annotations
// frame as annotations (Grafana draws it over the panel), but the
// annotations part alone comes as data: an annotation query (which asks
// for that part) reads its events from the series, and Grafana 10.4 to
// 11.2 drop frames marked as annotations before the data source sees them.
func TestStoryAnnotationsDataTopic(t *testing.T) {
	srv, db := database(t)
	tr := fixtureRange(t, srv, db)
	resp := queryAll(t, settingsFor(srv, db),
		query("all", plugin.QueryStory, map[string]any{"session": swapSession}, tr),
		query("part", plugin.QueryStory, map[string]any{"session": swapSession, "part": "annotations"}, tr))
	for _, tc := range []struct {
		ref   string
		topic data.DataTopic
	}{
		{"all", data.DataTopicAnnotations},
		{"part", ""},
	} {
		dr := resp[tc.ref]
		f := frameNamed(dr, "annotations")
		if dr.Error != nil || f == nil || f.Rows() == 0 {
			t.Errorf("%s: %v, want an annotations frame with rows", tc.ref, dr.Error)
			continue
		}
		var topic data.DataTopic
		if f.Meta != nil {
			topic = f.Meta.DataTopic
		}
		if topic != tc.topic {
			t.Errorf("%s: annotations frame's data topic %q, want %q", tc.ref, topic, tc.topic)
		}
	}
}
