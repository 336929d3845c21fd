package main

import (
	"bytes"
	"errors"
	"log/slog"
	"testing"
)

// TestLineHandler: the sink's records read as analyze's own lines.
func TestLineHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(newLineHandler(&buf, "replaywatch analyze: "))
	log.Info("not shown")
	log.Warn("clickhouse sink: insert failed; retrying", "table", "violations", "rows", 12)
	log.With("spool", "/tmp/s").Error("clickhouse sink: cannot write spool", "err", errors.New("disk full"))
	log.Warn("plain")
	want := "replaywatch analyze: warning: clickhouse sink: insert failed; retrying (table=violations, rows=12)\n" +
		"replaywatch analyze: error: clickhouse sink: cannot write spool (spool=/tmp/s, err=disk full)\n" +
		"replaywatch analyze: warning: plain\n"
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}
