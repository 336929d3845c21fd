// Package plugin is the backend of the replaywatch Grafana data source: it
// reads the replaywatch ClickHouse database (sink/clickhouse's schema) and
// answers Grafana's queries with data frames: a session's story, findings,
// resume health (alertable), a health check and a session search.
package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/instancemgmt"

	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
)

// connectTimeout bounds connecting to ClickHouse.
const connectTimeout = 5 * time.Second

// Datasource is one configured instance of the data source. Grafana makes
// a new one when the settings change and disposes of the old.
type Datasource struct {
	settings Settings

	mu   sync.Mutex
	conn *chsink.Conn // opened on first use; reopened after a failure
}

var (
	_ backend.QueryDataHandler      = (*Datasource)(nil)
	_ backend.CheckHealthHandler    = (*Datasource)(nil)
	_ backend.CallResourceHandler   = (*Datasource)(nil)
	_ instancemgmt.InstanceDisposer = (*Datasource)(nil)
)

// NewDatasource makes an instance from its settings. It does not connect:
// a data source whose server is down still loads, and says why in its
// health check and queries.
func NewDatasource(_ context.Context, s backend.DataSourceInstanceSettings) (instancemgmt.Instance, error) {
	st, err := LoadSettings(s)
	if err != nil {
		return nil, err
	}
	return &Datasource{settings: st}, nil
}

// Dispose closes the connection.
func (d *Datasource) Dispose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
}

// connection returns the open connection, connecting when there is none.
func (d *Datasource) connection(ctx context.Context) (*chsink.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		return d.conn, nil
	}
	c, err := chsink.Connect(ctx, chsink.ConnectOptions{DSN: d.settings.dsn(), DialTimeout: connectTimeout})
	if err != nil {
		return nil, err
	}
	d.conn = c
	return c, nil
}

// dropConnection forgets a connection that failed, so the next query
// connects again.
func (d *Datasource) dropConnection(c *chsink.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == c {
		d.conn.Close()
		d.conn = nil
	}
}

// query runs one read and returns its rows as strings (every column is
// read as text, which the 18.16 and current servers give alike).
func (d *Datasource) query(ctx context.Context, sql string, args ...any) ([][]string, error) {
	c, err := d.connection(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.QueryStrings(ctx, sql, args...)
	if err != nil && chsink.Unreachable(err) {
		d.dropConnection(c)
	}
	return rows, err
}

// CheckHealth says whether the database can be read and is the schema this
// plugin reads, and if not, exactly what is wrong.
func (d *Datasource) CheckHealth(ctx context.Context, _ *backend.CheckHealthRequest) (*backend.CheckHealthResult, error) {
	fail := func(format string, args ...any) *backend.CheckHealthResult {
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: fmt.Sprintf(format, args...)}
	}
	c, err := d.connection(ctx)
	switch {
	case err != nil && chsink.Unreachable(err):
		return fail("cannot reach ClickHouse at %s (its native protocol port, 9000 by default): %v", d.settings.Address, err), nil
	case err != nil:
		return fail("ClickHouse at %s refused the connection as user %q (check the user and the password): %v", d.settings.Address, d.settings.User, err), nil
	}
	v, err := chsink.AppliedVersion(ctx, c, c.Dialect())
	if err != nil {
		d.dropConnection(c)
		return fail("ClickHouse %s answers, but reading the schema of database %q failed: %v", c.Dialect().Version, d.settings.Database, err), nil
	}
	switch {
	case v == 0:
		return fail("database %q on ClickHouse %s has no replaywatch schema: run `replaywatch schema apply --clickhouse clickhouse://%s/%s`, or point the data source at the database the agents write",
			d.settings.Database, c.Dialect().Version, d.settings.Address, d.settings.Database), nil
	case v < chsink.SchemaVersion:
		return fail("database %q has replaywatch schema version %d; this plugin reads version %d: run `replaywatch schema apply` (migrations add columns, never drop data)",
			d.settings.Database, v, chsink.SchemaVersion), nil
	case v > chsink.SchemaVersion:
		return &backend.CheckHealthResult{Status: backend.HealthStatusOk, Message: fmt.Sprintf(
			"database %q has replaywatch schema version %d, newer than this plugin's %d: it reads what it knows; update the plugin for the rest",
			d.settings.Database, v, chsink.SchemaVersion)}, nil
	}
	return &backend.CheckHealthResult{Status: backend.HealthStatusOk, Message: fmt.Sprintf(
		"ClickHouse %s, database %q, replaywatch schema version %d", c.Dialect().Version, d.settings.Database, v)}, nil
}
