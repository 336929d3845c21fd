// Package progress draws a one-line progress bar on a terminal: bytes read
// of the total and the read rate. It redraws at most a few times a second so
// a fast reader does not spend its time on the terminal.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/replaywatch/replaywatch/internal/humanize"
	"golang.org/x/term"
)

// redrawEvery limits how often the bar is drawn.
const redrawEvery = 200 * time.Millisecond

// Bar is a progress bar; the zero value of *Bar (nil) draws nothing, so
// callers need not check whether progress is wanted.
type Bar struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	last  time.Time
	width int
}

// ForTerminal returns a Bar on f when f is a terminal, else nil.
func ForTerminal(f *os.File) *Bar {
	if !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return New(f)
}

// New returns a Bar drawing on w.
func New(w io.Writer) *Bar {
	now := time.Now()
	return &Bar{w: w, start: now}
}

// Update reports read bytes of total (total < 0 when unknown, e.g. stdin).
func (b *Bar) Update(read, total int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if now.Sub(b.last) < redrawEvery {
		return
	}
	b.last = now
	b.draw(read, total, now)
}

// Done clears the bar.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.width > 0 {
		fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", b.width))
	}
}

func (b *Bar) draw(read, total int64, now time.Time) {
	line := Line(read, total, now.Sub(b.start))
	pad := ""
	if len(line) < b.width {
		pad = strings.Repeat(" ", b.width-len(line))
	}
	b.width = len(line)
	fmt.Fprintf(b.w, "\r%s%s", line, pad)
}

// Line renders the bar's text, e.g.
// "[=========>          ]  45%  450.0 MiB / 1.0 GiB  120.5 MiB/s".
func Line(read, total int64, elapsed time.Duration) string {
	rate := ""
	if s := elapsed.Seconds(); s > 0 {
		rate = fmt.Sprintf("  %s/s", humanize.Bytes(int64(float64(read)/s)))
	}
	if total <= 0 {
		return fmt.Sprintf("read %s%s", humanize.Bytes(read), rate)
	}
	const cells = 30
	frac := float64(read) / float64(total)
	frac = min(max(frac, 0), 1)
	done := int(frac * cells)
	bar := strings.Repeat("=", done)
	if done < cells {
		bar += ">" + strings.Repeat(" ", cells-done-1)
	}
	return fmt.Sprintf("[%s] %3.0f%%  %s / %s%s", bar, frac*100, humanize.Bytes(read), humanize.Bytes(total), rate)
}
