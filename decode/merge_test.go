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

// TestRunHeapReusesSortedBatches checks that a batch pushed as one sorted
// run comes back for reuse once popped, cleared, and a split one does not.
func TestRunHeapReusesSortedBatches(t *testing.T) {
	var h runHeap
	obs := &Observation{}
	sorted := []item{{key: 1, obs: obs}, {key: 2, obs: obs}, {key: 3, obs: obs}}
	split := []item{{key: 5, obs: obs}, {key: 4, obs: obs}}
	h.push(sorted)
	h.push(split)
	for h.len() > 0 {
		h.pop()
	}
	b := h.takeSpare()
	if cap(b) != cap(sorted) || len(b) != 0 || &b[:1][0] != &sorted[0] {
		t.Fatalf("spare batch %p len %d cap %d, want the sorted batch back empty", b, len(b), cap(b))
	}
	for i, it := range b[:cap(b)] {
		if it != (item{}) {
			t.Errorf("spare item %d not cleared: %+v", i, it)
		}
	}
	if b := h.takeSpare(); b != nil {
		t.Errorf("a batch cut into several runs came back for reuse")
	}
}
