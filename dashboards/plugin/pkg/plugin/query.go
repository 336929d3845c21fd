package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/replaywatch/replaywatch/detector"
)

// Query types (the query's queryType).
const (
	QueryStory        = "story"        // one session's story: epochs, transitions, events, resumes, findings, annotations
	QueryFindings     = "findings"     // violations, filtered
	QueryResumeHealth = "resumeHealth" // resume outcomes per interval: a time series for panels and alert rules
)

// StoryParts are the story's frames by the name a query's part gives them.
var StoryParts = map[string]string{
	"timeline": "epoch timeline", "epochs": "epochs", "transitions": "transitions", "events": "events",
	"resumes": "resumes", "findings": "findings", "annotations": "annotations",
}

// Model is a query as the editor saves it.
type Model struct {
	QueryType string `json:"queryType"`
	// Session is the story's session id.
	Session string `json:"session"`
	// Part keeps one frame of the story (StoryParts), for a panel that
	// draws one (a state timeline of the epochs); "" keeps them all.
	Part string `json:"part"`
	// Filters of findings (and of resume health: Server).
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	Server   string `json:"server"`
	Client   string `json:"client"`
	// Limit lowers the data source's MaxRows for this query (0: MaxRows).
	Limit int `json:"limit"`
}

// QueryData answers each query with its frames, or its own error: one
// bad query never fails the others.
func (d *Datasource) QueryData(ctx context.Context, req *backend.QueryDataRequest) (*backend.QueryDataResponse, error) {
	resp := backend.NewQueryDataResponse()
	for _, q := range req.Queries {
		frames, err := d.run(ctx, q)
		if err != nil {
			resp.Responses[q.RefID] = backend.ErrDataResponse(backend.StatusBadRequest, err.Error())
			continue
		}
		resp.Responses[q.RefID] = backend.DataResponse{Frames: frames}
	}
	return resp, nil
}

func (d *Datasource) run(ctx context.Context, q backend.DataQuery) (data.Frames, error) {
	var m Model
	if len(q.JSON) > 0 {
		if err := json.Unmarshal(q.JSON, &m); err != nil {
			return nil, fmt.Errorf("query %s: %v", q.RefID, err)
		}
	}
	if q.QueryType != "" {
		m.QueryType = q.QueryType
	}
	tr := q.TimeRange
	if !tr.To.After(tr.From) {
		return nil, fmt.Errorf("time range %s to %s is empty", tr.From.UTC().Format(time.RFC3339), tr.To.UTC().Format(time.RFC3339))
	}
	if span := tr.To.Sub(tr.From); span > d.settings.MaxRange() {
		return nil, fmt.Errorf("time range of %s is over this data source's limit of %d days: narrow it (or raise maxRangeDays)",
			span.Round(time.Hour), d.settings.MaxRangeDays)
	}
	limit := d.settings.MaxRows
	if m.Limit > 0 && m.Limit < limit {
		limit = m.Limit
	}
	r := reader{d: d, from: tr.From.UTC(), to: tr.To.UTC(), limit: limit}
	switch m.QueryType {
	case QueryStory, "":
		if m.Session == "" {
			return nil, fmt.Errorf("a session story needs a session id (pick one: the editor searches them)")
		}
		frames, err := r.story(ctx, m.Session)
		if err != nil || m.Part == "" {
			return frames, err
		}
		for _, f := range frames {
			if f.Name == StoryParts[m.Part] {
				if m.Part == "annotations" && f.Meta != nil {
					// Alone, the annotations are the data asked for: an
					// annotation query (the editor asks for this part) reads
					// its events from the series, and Grafana 10.4 to 11.2
					// give it no frame marked as annotations.
					f.Meta.DataTopic = ""
				}
				return data.Frames{f}, nil
			}
		}
		return nil, fmt.Errorf("story part %q: want one of %s", m.Part, strings.Join(slices.Sorted(maps.Keys(StoryParts)), ", "))
	case QueryFindings:
		f, err := r.findings(ctx, m)
		return data.Frames{f}, err
	case QueryResumeHealth:
		f, err := r.resumeHealth(ctx, m.Server, q.Interval)
		return data.Frames{f}, err
	}
	return nil, fmt.Errorf("query type %q: want %s, %s or %s", m.QueryType, QueryStory, QueryFindings, QueryResumeHealth)
}

// colKind is how a column's text becomes a frame field.
type colKind uint8

const (
	kString colKind = iota
	kTime
	kInt
	kBool
)

// col is one field of a frame and the SQL expression it is read from.
type col struct {
	name string
	expr string
	kind colKind
}

// reader reads frames for one query's time range and row limit.
type reader struct {
	d        *Datasource
	from, to time.Time
	limit    int
}

// frame runs SELECT cols FROM <db>.table FINAL WHERE where ORDER BY order
// LIMIT limit+1 and builds the frame; past the limit it keeps limit rows
// and says so in a notice. args bind where's parameters.
func (r reader) frame(ctx context.Context, name string, cols []col, table, where, order string, args ...any) (*data.Frame, error) {
	exprs := make([]string, len(cols))
	for i, c := range cols {
		exprs[i] = "toString(" + c.expr + ")"
	}
	sql := fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE %s ORDER BY %s LIMIT %d",
		strings.Join(exprs, ", "), r.d.settings.Database, table, where, order, r.limit+1)
	rows, err := r.d.query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %v", table, err)
	}
	f := data.NewFrame(name)
	cut := len(rows) > r.limit
	if cut {
		rows = rows[:r.limit]
	}
	for i, c := range cols {
		field, err := buildField(c, rows, i)
		if err != nil {
			return nil, fmt.Errorf("reading %s.%s: %v", table, c.name, err)
		}
		f.Fields = append(f.Fields, field)
	}
	if cut {
		f.AppendNotices(data.Notice{Severity: data.NoticeSeverityWarning,
			Text: fmt.Sprintf("more than %d rows: the first %d are shown; narrow the time range or the filters", r.limit, r.limit)})
	}
	return f, nil
}

// buildField makes column i of rows a field of c's kind.
func buildField(c col, rows [][]string, i int) (*data.Field, error) {
	switch c.kind {
	case kTime:
		v := make([]time.Time, len(rows))
		for j, row := range rows {
			t, err := parseTime(row[i])
			if err != nil {
				return nil, err
			}
			v[j] = t
		}
		return data.NewField(c.name, nil, v), nil
	case kInt:
		v := make([]int64, len(rows))
		for j, row := range rows {
			n, err := strconv.ParseInt(row[i], 10, 64)
			if err != nil {
				return nil, err
			}
			v[j] = n
		}
		return data.NewField(c.name, nil, v), nil
	case kBool:
		v := make([]bool, len(rows))
		for j, row := range rows {
			v[j] = row[i] == "1" || row[i] == "true"
		}
		return data.NewField(c.name, nil, v), nil
	}
	v := make([]string, len(rows))
	for j, row := range rows {
		v[j] = row[i]
	}
	return data.NewField(c.name, nil, v), nil
}

// parseTime reads a DateTime64(9, 'UTC') or (ClickHouse 18.16) DateTime
// as toString writes it.
func parseTime(s string) (time.Time, error) {
	return time.ParseInLocation("2006-01-02 15:04:05", s, time.UTC)
}

// story is one session's frames: its epochs (the session, the one it
// replaced and the one that replaced it, each when it overlaps the range,
// as the session search finds them), the transitions between them
// with their cause, its SSE events by stream, its resumes, its findings,
// and annotations for the moments that matter (marked as annotations, so
// that a panel of the whole story draws them over its data).
func (r reader) story(ctx context.Context, session string) (data.Frames, error) {
	inRange := func(column string) string { return column + " >= ? AND " + column + " <= ?" }
	epochs, err := r.frame(ctx, "epochs", []col{
		{"time", "first_seen", kTime}, {"end", "last_seen", kTime}, {"session", "session_id", kString},
		{"previous", "previous_session_id", kString}, {"link_confidence", "link_confidence", kString},
		{"ended", "ended", kString}, {"server", "server", kString}, {"client", "client", kString},
		{"protocol_version", "protocol_version", kString}, {"requests", "requests", kInt}, {"events", "events", kInt},
		{"resumes", "resumes", kInt}, {"violations", "violations", kInt},
	}, "sessions",
		"(session_id = ? OR previous_session_id = ? OR session_id IN (SELECT previous_session_id FROM "+r.d.settings.Database+
			".sessions FINAL WHERE session_id = ?)) AND last_seen >= ? AND first_seen <= ?",
		"first_seen, session_id", session, session, session, r.from, r.to)
	if err != nil {
		return nil, err
	}
	transitions, err := r.frame(ctx, "transitions", []col{
		{"time", "time", kTime}, {"from", "session_id", kString}, {"to", "new_session_id", kString},
		{"cause", "kind", kString}, {"severity", "severity", kString}, {"confidence", "confidence", kString},
		{"explanation", "explanation", kString},
	}, "violations", "(session_id = ? OR new_session_id = ?) AND new_session_id != '' AND "+inRange("time"),
		"time, kind", session, session, r.from, r.to)
	if err != nil {
		return nil, err
	}
	events, err := r.frame(ctx, "events", []col{
		{"time", "time", kTime}, {"stream", "stream_id", kString}, {"position", "position", kInt},
		{"event_id", "event_id", kString}, {"delivery", "delivery", kInt}, {"resumed", "resumed", kBool},
		{"priming", "priming", kBool}, {"method", "method", kString}, {"jsonrpc_id", "jsonrpc_id", kString},
		{"data_bytes", "data_bytes", kInt},
	}, "stream_events", "session_id = ? AND "+inRange("time"), "time, stream_id, delivery, position", session, r.from, r.to)
	if err != nil {
		return nil, err
	}
	resumes, err := r.frame(ctx, "resumes", []col{
		{"time", "time", kTime}, {"stream", "stream_id", kString}, {"last_event_id", "last_event_id", kString},
		{"first_event_id", "first_event_id", kString}, {"status", "status", kInt}, {"outcome", "outcome", kString},
		{"reason", "reason", kString}, {"replayed", "replayed", kInt}, {"response_session", "response_session_id", kString},
	}, "resumes", "session_id = ? AND "+inRange("time"), "time, id", session, r.from, r.to)
	if err != nil {
		return nil, err
	}
	findings, err := r.frame(ctx, "findings", findingCols(false),
		"violations", "(session_id = ? OR new_session_id = ?) AND "+inRange("time"), "time, kind, id", session, session, r.from, r.to)
	if err != nil {
		return nil, err
	}
	return data.Frames{epochTimeline(epochs), epochs, transitions, events, resumes, findings, annotations(epochs, findings, resumes)}, nil
}

// epochTimeline is the epochs as a state timeline panel reads them: at
// each epoch's start the session id becomes the state, and after the last
// epoch's end the state is empty (null), so the panel draws S1, then S2,
// and nothing after.
func epochTimeline(epochs *data.Frame) *data.Frame {
	var times []time.Time
	var states []*string
	var last time.Time
	start, _ := epochs.FieldByName("time")
	end, _ := epochs.FieldByName("end")
	session, _ := epochs.FieldByName("session")
	for i := range epochs.Rows() {
		id := session.At(i).(string)
		times, states = append(times, start.At(i).(time.Time)), append(states, &id)
		if e := end.At(i).(time.Time); e.After(last) {
			last = e
		}
	}
	if len(times) > 0 {
		times, states = append(times, last), append(states, nil)
	}
	return data.NewFrame("epoch timeline", data.NewField("time", nil, times), data.NewField("session", nil, states))
}

// findingCols are a finding's fields; withParties adds session, server and
// client (the findings query lists many sessions).
func findingCols(withParties bool) []col {
	cols := []col{{"time", "time", kTime}, {"severity", "severity", kString}, {"kind", "kind", kString}}
	if withParties {
		cols = append(cols, col{"session", "session_id", kString}, col{"server", "server", kString}, col{"client", "client", kString})
	}
	return append(cols,
		col{"stream", "stream_id", kString}, col{"last_event_id", "last_event_id", kString},
		col{"first_event_id", "first_event_id", kString}, col{"new_session", "new_session_id", kString},
		col{"jsonrpc_ids", "arrayStringConcat(jsonrpc_ids, ',')", kString}, col{"tool", "tool", kString},
		col{"confidence", "confidence", kString}, col{"explanation", "explanation", kString},
		col{"evidence", "evidence", kString}, col{"id", "id", kString})
}

// annotations marks a story's moments: each epoch's start, each finding,
// each resume that did not resume. Fields as Grafana's annotation frames
// have them (time, title, text, tags).
func annotations(epochs, findings, resumes *data.Frame) *data.Frame {
	var times []time.Time
	var titles, texts, tags []string
	add := func(t time.Time, title, text, tag string) {
		times, titles, texts, tags = append(times, t), append(titles, title), append(texts, text), append(tags, tag)
	}
	str := func(f *data.Frame, name string, i int) string {
		field, _ := f.FieldByName(name)
		if field == nil {
			return ""
		}
		s, _ := field.ConcreteAt(i)
		v, _ := s.(string)
		return v
	}
	at := func(f *data.Frame, i int) time.Time {
		field, _ := f.FieldByName("time")
		t, _ := field.ConcreteAt(i)
		v, _ := t.(time.Time)
		return v
	}
	for i := range epochs.Rows() {
		text := "session " + str(epochs, "session", i)
		if p := str(epochs, "previous", i); p != "" {
			text += " after " + p + " (link " + str(epochs, "link_confidence", i) + ")"
		}
		add(at(epochs, i), "session "+str(epochs, "session", i), text, "epoch")
	}
	for i := range findings.Rows() {
		add(at(findings, i), str(findings, "severity", i)+" "+str(findings, "kind", i), str(findings, "explanation", i), "finding")
	}
	for i := range resumes.Rows() {
		if o := str(resumes, "outcome", i); o != string(detector.ResumeResumed) {
			add(at(resumes, i), "resume "+o, "Last-Event-ID "+str(resumes, "last_event_id", i)+": "+str(resumes, "reason", i), "resume")
		}
	}
	f := data.NewFrame("annotations",
		data.NewField("time", nil, times), data.NewField("title", nil, titles),
		data.NewField("text", nil, texts), data.NewField("tags", nil, tags))
	f.Meta = &data.FrameMeta{DataTopic: data.DataTopicAnnotations}
	return f
}

// findings is the violations of the time range that match m's filters.
func (r reader) findings(ctx context.Context, m Model) (*data.Frame, error) {
	where := []string{"time >= ? AND time <= ?"}
	args := []any{r.from, r.to}
	for _, f := range []struct{ column, value string }{
		{"kind", m.Kind}, {"severity", m.Severity}, {"server", m.Server}, {"client", m.Client},
	} {
		if f.value != "" {
			where = append(where, f.column+" = ?")
			args = append(args, f.value)
		}
	}
	return r.frame(ctx, "findings", findingCols(true), "violations", strings.Join(where, " AND "), "time DESC, kind, id", args...)
}

// resumeOutcomes are the resume outcomes, each a field of resume health.
var resumeOutcomes = []detector.ResumeOutcome{
	detector.ResumeResumed, detector.ResumeRejected404, detector.ResumeRejected4xx,
	detector.ResumeViolated, detector.ResumeUnverifiable,
}

// resumeHealth counts resumes per outcome and interval over the range: a
// wide time series, every interval present (zero when nothing happened),
// so an alert rule can reduce it. Each count field is labelled with its
// outcome (and the server, when one is asked for): Grafana's server-side
// expressions split the frame into one series per field and tell them
// apart by their labels only.
func (r reader) resumeHealth(ctx context.Context, server string, interval time.Duration) (*data.Frame, error) {
	step, first, n := healthPoints(r.from.Unix(), r.to.Unix(), interval, r.limit)
	where, args := "time >= ? AND time <= ?", []any{r.from, r.to}
	if server != "" {
		where += " AND server = ?"
		args = append(args, server)
	}
	sql := fmt.Sprintf("SELECT toString(intDiv(toUnixTimestamp(time), %d) * %d) AS bucket, toString(outcome), toString(count()) FROM %s.resumes FINAL WHERE %s GROUP BY bucket, outcome ORDER BY bucket",
		step, step, r.d.settings.Database, where)
	rows, err := r.d.query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("reading resumes: %v", err)
	}
	times := make([]time.Time, n)
	for i := range times {
		times[i] = time.Unix(first+int64(i)*step, 0).UTC()
	}
	counts := make(map[string][]int64, len(resumeOutcomes))
	for _, o := range resumeOutcomes {
		counts[string(o)] = make([]int64, n)
	}
	for _, row := range rows {
		b, err1 := strconv.ParseInt(row[0], 10, 64)
		c, err2 := strconv.ParseInt(row[2], 10, 64)
		i := int(floorDiv(b-first, step))
		if err1 != nil || err2 != nil || i < 0 || i >= n || counts[row[1]] == nil {
			continue
		}
		counts[row[1]][i] += c
	}
	f := data.NewFrame("resume health", data.NewField("time", nil, times))
	for _, o := range resumeOutcomes {
		labels := data.Labels{"outcome": string(o)}
		if server != "" {
			labels["server"] = server
		}
		field := data.NewField(string(o), labels, counts[string(o)])
		// Panels name the series by outcome, as before the labels.
		field.Config = &data.FieldConfig{DisplayNameFromDS: string(o)}
		f.Fields = append(f.Fields, field)
	}
	f.Meta = &data.FrameMeta{Type: data.FrameTypeTimeSeriesWide, PreferredVisualization: data.VisTypeGraph}
	return f, nil
}

// healthPoints are resume health's points over [from, to] (seconds since
// 1970): a step of the interval (at least a second), the first point from
// rounded down to a multiple of the step, and their number, at most limit:
// the step is widened until the points from the first to to fit.
func healthPoints(from, to int64, interval time.Duration, limit int) (step, first int64, n int) {
	step = max(int64(interval/time.Second), 1)
	count := func(step int64) int64 { return floorDiv(to, step) - floorDiv(from, step) + 1 }
	if limit < 1 || count(step) <= int64(limit) {
		return step, floorDiv(from, step) * step, int(count(step))
	}
	// No step below ceil((to-from)/limit) fits; ceil((to-from)/(limit-1))
	// always does (any limit-1 steps cover the range). Between them
	// whether one fits depends on where the multiples fall: try the
	// shorter ones first, a bounded number of them.
	span, lim := to-from, int64(limit)
	sure := to + 1 // limit 1: one point, from 1970, when no shorter step fits
	if limit > 1 {
		sure = (span + lim - 2) / (lim - 1)
	}
	s := max(step+1, (span+lim-1)/lim)
	for tries := 0; s < sure && count(s) > lim && tries < 1<<16; tries++ {
		s++
	}
	if count(s) > lim {
		s = sure
	}
	return s, floorDiv(from, s) * s, int(count(s))
}

// floorDiv is a/b rounded down (b > 0), also for times before 1970.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
