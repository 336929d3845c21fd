package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	tests := []struct {
		read, total int64
		elapsed     time.Duration
		want        []string
	}{
		{0, 100 << 20, time.Second, []string{"[>", "  0%", "0 B / 100.0 MiB", "0 B/s"}},
		{50 << 20, 100 << 20, 2 * time.Second, []string{" 50%", "50.0 MiB / 100.0 MiB", "25.0 MiB/s"}},
		{100 << 20, 100 << 20, time.Second, []string{"100%", "[==============================]"}},
		{3 << 30, -1, 3 * time.Second, []string{"read 3.0 GiB", "1.0 GiB/s"}},
	}
	for _, tt := range tests {
		got := Line(tt.read, tt.total, tt.elapsed)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("Line(%d, %d) = %q, want it to contain %q", tt.read, tt.total, got, w)
			}
		}
	}
}

func TestNilBarDrawsNothing(t *testing.T) {
	var b *Bar
	b.Update(1, 2)
	b.Done()
}

func TestBarRedrawsAndClears(t *testing.T) {
	var out bytes.Buffer
	b := New(&out)
	b.Update(10, 100)
	b.Done()
	if !strings.Contains(out.String(), " 10%") || !strings.HasSuffix(out.String(), "\r") {
		t.Fatalf("unexpected output %q", out.String())
	}
}
