package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
)

// ID is the plugin's id (plugin.json), Grafana's <org>-<name>-datasource.
const ID = "replaywatch-sessions-datasource"

// Defaults of Settings.
const (
	DefaultDatabase = "replaywatch"
	// DefaultMaxRows bounds the rows one query reads per frame.
	DefaultMaxRows = 10_000
	// DefaultMaxRangeDays bounds the time range one query may read.
	DefaultMaxRangeDays = 31
	// HardMaxRows is the most MaxRows may be set to: a frame is built in
	// the plugin's memory.
	HardMaxRows = 1_000_000
	// HardMaxRangeDays is the most MaxRangeDays may be set to (about
	// 100 years).
	HardMaxRangeDays = 36_500
)

// Settings are the data source's settings: jsonData, and the password
// from secureJsonData (never in jsonData, never logged).
type Settings struct {
	// Address is host:port of ClickHouse's native protocol (9000).
	Address  string `json:"address"`
	Database string `json:"database"`
	User     string `json:"user"`
	// MaxRows bounds each frame; a query that would return more says so.
	MaxRows int `json:"maxRows"`
	// MaxRangeDays refuses queries over a longer time range.
	MaxRangeDays int `json:"maxRangeDays"`

	password string
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// LoadSettings reads and checks an instance's settings.
func LoadSettings(s backend.DataSourceInstanceSettings) (Settings, error) {
	var st Settings
	if len(s.JSONData) > 0 {
		if err := json.Unmarshal(s.JSONData, &st); err != nil {
			return Settings{}, fmt.Errorf("settings: %v", err)
		}
	}
	st.password = s.DecryptedSecureJSONData["password"]
	if st.Database == "" {
		st.Database = DefaultDatabase
	}
	if st.MaxRows == 0 {
		st.MaxRows = DefaultMaxRows
	}
	if st.MaxRangeDays == 0 {
		st.MaxRangeDays = DefaultMaxRangeDays
	}
	switch {
	case st.Address == "":
		return Settings{}, errors.New("settings: no ClickHouse address (host:port of its native protocol, e.g. clickhouse:9000)")
	case !identRE.MatchString(st.Database):
		// The database is named in SQL, where it cannot be a parameter.
		return Settings{}, fmt.Errorf("settings: database %q: want letters, digits and _", st.Database)
	case st.MaxRows < 0 || st.MaxRows > HardMaxRows:
		return Settings{}, fmt.Errorf("settings: maxRows %d: want 1 to %d", st.MaxRows, HardMaxRows)
	case st.MaxRangeDays < 0 || st.MaxRangeDays > HardMaxRangeDays:
		return Settings{}, fmt.Errorf("settings: maxRangeDays %d: want 1 to %d", st.MaxRangeDays, HardMaxRangeDays)
	}
	_, port, err := net.SplitHostPort(st.Address)
	if err != nil {
		return Settings{}, fmt.Errorf("settings: address %q: want host:port (%v)", st.Address, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strings.Trim(port, "0123456789") != "" {
		return Settings{}, fmt.Errorf("settings: address %q: want a port number from 1 to 65535 after the host, e.g. clickhouse:9000", st.Address)
	}
	return st, nil
}

// MaxRange is MaxRangeDays as a duration; days past what a duration
// holds (about 292 years) are the longest duration.
func (s Settings) MaxRange() time.Duration {
	const day = 24 * time.Hour
	if s.MaxRangeDays > int(math.MaxInt64/day) {
		return math.MaxInt64
	}
	return time.Duration(s.MaxRangeDays) * day
}

// dsn is the sink package's DSN for these settings (the password in it
// is redacted from every message by that package).
func (s Settings) dsn() string {
	u := url.URL{Scheme: "clickhouse", Host: s.Address, Path: "/" + s.Database}
	if s.User != "" || s.password != "" {
		u.User = url.UserPassword(s.User, s.password)
	}
	return u.String()
}
