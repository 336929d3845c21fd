package clickhouse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/replaywatch/replaywatch/test/chtest"
)

// TestDSNSecretsNeverShown: a password given as a DSN query option
// (?password=, as clickhouse-go accepts it) appears in no message: not in
// the server's refusal, not when the server is unreachable, not in a
// deferred sink's report.
func TestDSNSecretsNeverShown(t *testing.T) {
	const secret = "S3CRETPW"
	srv := chtest.Shared(t)
	ctx := context.Background()
	refused := "clickhouse://default@" + srv.Addr + "/x?password=" + secret
	unreachable := "clickhouse://default@127.0.0.1:1/x?dial_timeout=1s&password=" + secret
	for _, dsn := range []string{refused, unreachable, "clickhouse://u:" + secret + "@" + srv.Addr + "/x"} {
		c, err := Connect(ctx, ConnectOptions{DSN: dsn})
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected", Redact(dsn))
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the password is in the error: %v", err)
		}
		if !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("the error does not name the (redacted) server: %v", err)
		}
	}
	cfg := fastConfig(t)
	cfg.CloseTimeout = time.Second
	s, err := NewDeferred(ConnectOptions{DSN: unreachable}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	feed(s, sampleRecords("S", time.Now()))
	if r := s.Close(ctx); strings.Contains(r.String(), secret) || r.LastError == "" {
		t.Errorf("report: %s", r)
	}
	for _, dsn := range []string{
		"clickhouse://h:9000/db?password=" + secret + "&secure=true",
		"clickhouse://h:9000/db?PASSWORD=" + secret,
		"clickhouse://h:9000/db?http_proxy=" + "http%3A%2F%2Fp%3A" + secret + "%40proxy%3A3128",
		"clickhouse://u:" + secret + "@h:9000/db?api_token=" + secret,
	} {
		if got := Redact(dsn); strings.Contains(got, secret) || !strings.Contains(got, "h:9000/db") {
			t.Errorf("Redact(%q) = %q", dsn, got)
		}
	}
}
