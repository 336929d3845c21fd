package plugin

import (
	"testing"
	"time"
)

// TestHealthPointsFitTheLimit: brute force over ranges, intervals and row
// limits, down to one point and up to the longest range the settings
// allow: resume health's points are at most limit, a step (at least the
// interval) apart, from the range's start rounded down to the step, and
// cover the range.
func TestHealthPointsFitTheLimit(t *testing.T) {
	base := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC).Unix()
	day := int64(24 * 60 * 60)
	spans := []int64{0, 1, 2, 5, 19, 20, 21, 59, 3600, 3601, day - 1, 31 * day, 365*day + 7, HardMaxRangeDays * day}
	intervals := []time.Duration{0, time.Millisecond, time.Second, 2 * time.Second, 7 * time.Second, time.Minute, time.Hour}
	for _, off := range []int64{0, 1, 2, 3, 7, 59} {
		for _, span := range spans {
			for _, interval := range intervals {
				for _, limit := range []int{1, 2, 3, 10, 1000, HardMaxRows} {
					from, to := base+off, base+off+span
					step, first, n := healthPoints(from, to, interval, limit)
					if n < 1 || n > limit || step < max(int64(interval/time.Second), 1) || first%step != 0 ||
						first > from || first+int64(n-1)*step > to || first+int64(n)*step <= to {
						t.Errorf("range %d+%d, interval %s, limit %d: step %d, first %d (%+d), %d points",
							from, span, interval, limit, step, first, first-from, n)
					}
				}
			}
		}
	}
}
