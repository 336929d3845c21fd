package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
)

// MaxSessionsListed bounds one session search.
const MaxSessionsListed = 200

// Session is one entry of a session search.
type Session struct {
	ID         string    `json:"session_id"`
	Server     string    `json:"server"`
	Client     string    `json:"client"`
	FirstSeen  time.Time `json:"first_seen"`
	LastSeen   time.Time `json:"last_seen"`
	Ended      string    `json:"ended"`
	Violations int64     `json:"violations"`
}

// CallResource serves GET sessions?q=PREFIX&from=MS&to=MS&violations=1:
// the sessions of a time range whose id starts with q (newest first, at
// most MaxSessionsListed), for the editor's session picker.
func (d *Datasource) CallResource(ctx context.Context, req *backend.CallResourceRequest, sender backend.CallResourceResponseSender) error {
	reply := func(status int, v any) error {
		body, _ := json.Marshal(v)
		return sender.Send(&backend.CallResourceResponse{Status: status, Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: body})
	}
	if req.Path != "sessions" {
		return reply(http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no resource %q: try sessions", req.Path)})
	}
	if req.Method != http.MethodGet {
		return reply(http.StatusMethodNotAllowed, map[string]string{"error": "sessions is read with GET"})
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return reply(http.StatusBadRequest, map[string]string{"error": err.Error()})
	}
	sessions, err := d.searchSessions(ctx, u.Query())
	if err != nil {
		return reply(http.StatusBadRequest, map[string]string{"error": err.Error()})
	}
	return reply(http.StatusOK, sessions)
}

func (d *Datasource) searchSessions(ctx context.Context, q url.Values) ([]Session, error) {
	to := time.Now().UTC()
	from := to.Add(-24 * time.Hour)
	for name, t := range map[string]*time.Time{"from": &from, "to": &to} {
		if v := q.Get(name); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s=%q: want milliseconds since 1970", name, v)
			}
			*t = time.UnixMilli(ms).UTC()
		}
	}
	if !to.After(from) {
		return nil, fmt.Errorf("from is not before to")
	}
	if to.Sub(from) > d.settings.MaxRange() {
		return nil, fmt.Errorf("time range over this data source's limit of %d days", d.settings.MaxRangeDays)
	}
	where, args := "last_seen >= ? AND first_seen <= ?", []any{from, to}
	if p := q.Get("q"); p != "" {
		where += " AND startsWith(session_id, ?)"
		args = append(args, p)
	}
	if q.Get("violations") == "1" {
		where += " AND violations > 0"
	}
	r := reader{d: d, from: from, to: to, limit: MaxSessionsListed}
	f, err := r.frame(ctx, "sessions", []col{
		{"session_id", "session_id", kString}, {"server", "server", kString}, {"client", "client", kString},
		{"first_seen", "first_seen", kTime}, {"last_seen", "last_seen", kTime}, {"ended", "ended", kString},
		{"violations", "violations", kInt},
	}, "sessions", where, "last_seen DESC, session_id", args...)
	if err != nil {
		return nil, err
	}
	out := make([]Session, f.Rows())
	for i := range out {
		out[i] = Session{
			ID: f.Fields[0].At(i).(string), Server: f.Fields[1].At(i).(string), Client: f.Fields[2].At(i).(string),
			FirstSeen: f.Fields[3].At(i).(time.Time), LastSeen: f.Fields[4].At(i).(time.Time),
			Ended: f.Fields[5].At(i).(string), Violations: f.Fields[6].At(i).(int64),
		}
	}
	return out, nil
}
