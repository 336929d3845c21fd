package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	chsink "github.com/replaywatch/replaywatch/sink/clickhouse"
)

// agentFile is the agent's YAML configuration file. Every key has a flag of
// the same name in snake_case (clickhouse.spool_dir is --spool-dir,
// limits.max_sessions --max-sessions) but interfaces (--interface) and
// clickhouse.dsn (--clickhouse); flags win over the
// file, the environment (REPLAYWATCH_*) over the file too but not over
// flags. Unknown keys are an error, so a typo never passes silently.
type agentFile struct {
	Interfaces []string `yaml:"interfaces"`
	Ports      []uint16 `yaml:"ports"`
	Filter     string   `yaml:"filter"`
	Workers    *int     `yaml:"workers"`
	RingBlocks *int     `yaml:"ring_blocks"`
	RingBlock  *int     `yaml:"ring_block_size"`
	Listen     *string  `yaml:"listen"`
	OTLPGRPC   *string  `yaml:"otlp_grpc"`
	OTLPHTTP   *string  `yaml:"otlp_http"`
	Format     *string  `yaml:"format"`
	Node       *string  `yaml:"node"`
	LogLevel   *string  `yaml:"log_level"`
	// HashKeyFile: the key itself is better given by a Secret in the
	// environment (REPLAYWATCH_HASH_KEY).
	HashKeyFile *string `yaml:"hash_key_file"`
	// PartialHistory: this node sees only some of a session's connections.
	PartialHistory *bool `yaml:"partial_history"`

	ClickHouse struct {
		DSN           *string        `yaml:"dsn"`
		PasswordFile  *string        `yaml:"password_file"`
		Cluster       *string        `yaml:"cluster"`
		ApplySchema   *bool          `yaml:"apply_schema"`
		RetentionDays *int           `yaml:"retention_days"`
		SpoolDir      *string        `yaml:"spool_dir"`
		MaxSpoolBytes *int64         `yaml:"max_spool_bytes"`
		BatchRows     *int           `yaml:"batch_rows"`
		FlushInterval *time.Duration `yaml:"flush_interval"`
		StoreArgs     *bool          `yaml:"store_arguments"`
	} `yaml:"clickhouse"`

	Limits struct {
		MaxConnections        *int           `yaml:"max_connections"`
		MaxPagesTotal         *int           `yaml:"max_pages_total"`
		MaxPagesPerConnection *int           `yaml:"max_pages_per_connection"`
		ConnectionIdleTimeout *time.Duration `yaml:"connection_idle_timeout"`
		MaxHeaderBytes        *int           `yaml:"max_header_bytes"`
		MaxBodyBytes          *int           `yaml:"max_body_bytes"`
		MaxSSELineBytes       *int           `yaml:"max_sse_line_bytes"`
		MaxEventBytes         *int           `yaml:"max_event_bytes"`
		MaxSessions           *int           `yaml:"max_sessions"`
		MaxEventsPerSession   *int           `yaml:"max_events_per_session"`
		MaxServerEvents       *int           `yaml:"max_server_events"`
		SessionIdleTimeout    *time.Duration `yaml:"session_idle_timeout"`
		MemoryLimit           *string        `yaml:"memory_limit"`
	} `yaml:"limits"`
}

// loadAgentFile reads and strictly decodes a config file.
func loadAgentFile(path string) (*agentFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var f agentFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) { // EOF: an empty file, all defaults
		return nil, fmt.Errorf("config file %s: %v", path, err)
	}
	return &f, nil
}

// configPath finds --config in args before flags are parsed: the file's
// values become the flags' defaults.
func configPath(args []string) string {
	for i, a := range args {
		for _, p := range []string{"--config=", "-config="} {
			if v, ok := strings.CutPrefix(a, p); ok {
				return v
			}
		}
		if (a == "--config" || a == "-config") && i+1 < len(args) {
			return args[i+1]
		}
	}
	return os.Getenv("REPLAYWATCH_CONFIG")
}

// applyFile sets the flags named in the file, then the environment, before
// the command line is parsed: flags > environment > file > defaults.
func applyFile(fs *flag.FlagSet, f *agentFile) error {
	set := func(name string, v any) error {
		s, ok := flagText(v)
		if !ok {
			return nil // not in the file
		}
		if err := fs.Set(name, s); err != nil {
			return fmt.Errorf("config file: %s: %v", name, err)
		}
		return nil
	}
	if f != nil {
		l, c := &f.Limits, &f.ClickHouse
		for name, v := range map[string]any{
			"interface": f.Interfaces, "ports": f.Ports, "filter": f.Filter, "workers": f.Workers, "ring-blocks": f.RingBlocks, "ring-block-size": f.RingBlock, "listen": f.Listen,
			"otlp-grpc": f.OTLPGRPC, "otlp-http": f.OTLPHTTP,
			"format": f.Format, "node": f.Node, "log-level": f.LogLevel, "hash-key-file": f.HashKeyFile, "partial-history": f.PartialHistory,
			"clickhouse": c.DSN, "clickhouse-password-file": c.PasswordFile, "clickhouse-cluster": c.Cluster,
			"apply-schema": c.ApplySchema, "retention-days": c.RetentionDays, "spool-dir": c.SpoolDir,
			"max-spool-bytes": c.MaxSpoolBytes, "batch-rows": c.BatchRows, "flush-interval": c.FlushInterval,
			"store-arguments": c.StoreArgs,
			"max-connections": l.MaxConnections, "max-pages-total": l.MaxPagesTotal, "max-pages-per-connection": l.MaxPagesPerConnection,
			"connection-idle-timeout": l.ConnectionIdleTimeout, "max-header-bytes": l.MaxHeaderBytes, "max-body-bytes": l.MaxBodyBytes,
			"max-sse-line-bytes": l.MaxSSELineBytes, "max-event-bytes": l.MaxEventBytes, "max-sessions": l.MaxSessions,
			"max-events-per-session": l.MaxEventsPerSession, "max-server-events": l.MaxServerEvents,
			"session-idle-timeout": l.SessionIdleTimeout, "memory-limit": l.MemoryLimit,
		} {
			if err := set(name, v); err != nil {
				return err
			}
		}
	}
	// REPLAYWATCH_<FLAG> for every flag (dashes as underscores), e.g.
	// REPLAYWATCH_INTERFACE=eth0, REPLAYWATCH_MAX_SESSIONS=100000. The DSN
	// is REPLAYWATCH_CLICKHOUSE, as for analyze.
	var err error
	fs.VisitAll(func(fl *flag.Flag) {
		name := "REPLAYWATCH_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil && name != chsink.PasswordEnv {
			if e := fs.Set(fl.Name, v); e != nil {
				err = fmt.Errorf("environment %s: %v", name, e)
			}
		}
	})
	return err
}

// flagText renders a config file value as its flag would be written; ok is
// false when the key was absent (a nil pointer, an empty list or string).
func flagText(v any) (text string, ok bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "", false
		}
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
	case time.Duration:
		return x.String(), true
	case string:
		return x, x != ""
	}
	if rv.Kind() == reflect.Slice {
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(rv.Index(i).Interface())
		}
		return strings.Join(parts, ","), len(parts) > 0
	}
	return fmt.Sprint(rv.Interface()), true
}
