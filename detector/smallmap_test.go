package detector

import (
	"strconv"
	"testing"
)

// The slice and the map behind a smallMap must agree with a plain map
// through growth past smallMapMax and deletions on both sides of it.
func TestSmallMapMatchesMap(t *testing.T) {
	var m smallMap[string, int]
	want := map[string]int{}
	check := func(step string) {
		t.Helper()
		if m.len() != len(want) {
			t.Fatalf("%s: len %d, want %d", step, m.len(), len(want))
		}
		for k, v := range want {
			if got, ok := m.get(k); !ok || got != v {
				t.Fatalf("%s: get(%s) = %d, %v; want %d", step, k, got, ok, v)
			}
		}
		n := 0
		for k, v := range m.all() {
			if want[k] != v {
				t.Fatalf("%s: all yields %s=%d, want %d", step, k, v, want[k])
			}
			n++
		}
		if n != len(want) {
			t.Fatalf("%s: all yields %d entries, want %d", step, n, len(want))
		}
		if _, ok := m.get("absent"); ok || m.at("absent") != 0 {
			t.Fatalf("%s: absent key found", step)
		}
	}
	for i := 0; i < 3*smallMapMax; i++ {
		k := strconv.Itoa(i)
		m.set(k, i)
		want[k] = i
		if i%3 == 0 {
			m.set(k, -i) // overwrite
			want[k] = -i
		}
		if i%4 == 1 {
			m.del(strconv.Itoa(i - 1))
			delete(want, strconv.Itoa(i-1))
		}
		check("step " + k)
	}
}
