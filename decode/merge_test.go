package decode

import (
	"math/rand"
	"slices"
	"testing"
)

func TestRunHeapPopsInOrder(t *testing.T) {
	tests := []struct {
		name string
		key  func(rng *rand.Rand, i int) int64
	}{
		{"sorted", func(_ *rand.Rand, i int) int64 { return int64(i) }},
		{"reversed", func(_ *rand.Rand, i int) int64 { return int64(-i) }},
		{"random", func(rng *rand.Rand, _ int) int64 { return rng.Int63n(1000) }},
		{"equal keys", func(*rand.Rand, int) int64 { return 7 }},
		{"mostly sorted", func(rng *rand.Rand, i int) int64 { return int64(i) - rng.Int63n(3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			var h runHeap
			var all []item
			seq := uint64(0)
			for batch := 0; batch < 20; batch++ {
				items := make([]item, rng.Intn(50))
				for i := range items {
					seq++
					items[i] = item{key: tt.key(rng, len(all)+i), conn: uint64(rng.Intn(3)), seq: seq}
				}
				all = append(all, items...)
				h.push(items)
				// Interleave pops with pushes, as the merger does.
				for k := rng.Intn(10); k > 0 && h.len() > 0; k-- {
					all = removeItem(t, all, h.pop())
				}
			}
			if h.len() != len(all) {
				t.Fatalf("len %d, want %d", h.len(), len(all))
			}
			slices.SortFunc(all, func(a, b item) int {
				if a.less(&b) {
					return -1
				}
				if b.less(&a) {
					return 1
				}
				return 0
			})
			for i := range all {
				if got := h.pop(); got != all[i] {
					t.Fatalf("pop %d = %+v, want %+v", i, got, all[i])
				}
			}
			if h.len() != 0 || len(h.runs) != 0 {
				t.Fatalf("left %d items in %d runs", h.len(), len(h.runs))
			}
		})
	}
}

// removeItem checks that it is the minimum of all and removes it.
func removeItem(t *testing.T, all []item, it item) []item {
	t.Helper()
	at := -1
	for i := range all {
		if all[i] == it {
			at = i
		}
		if all[i].less(&it) {
			t.Fatalf("popped %+v while %+v was held", it, all[i])
		}
	}
	if at < 0 {
		t.Fatalf("popped %+v that was never pushed", it)
	}
	return append(all[:at], all[at+1:]...)
}
