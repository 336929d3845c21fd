package decode

import (
	"fmt"
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
		for _, sources := range []int{0, 1, 3} {
			testRunHeapPops(t, tt.name, tt.key, sources)
		}
	}
}

// testRunHeapPops pushes batches from the given number of sources (0: with
// push, which chains nothing) and checks every pop against the items held.
func testRunHeapPops(t *testing.T, name string, key func(rng *rand.Rand, i int) int64, sources int) {
	t.Run(fmt.Sprintf("%s/%d sources", name, sources), func(t *testing.T) {
		rng := rand.New(rand.NewSource(1))
		var h runHeap
		var all []item
		seq := uint64(0)
		for batch := 0; batch < 20; batch++ {
			items := make([]item, rng.Intn(50))
			for i := range items {
				seq++
				items[i] = item{key: key(rng, len(all)+i), conn: uint64(rng.Intn(3)), seq: seq}
			}
			all = append(all, items...)
			if sources == 0 {
				h.push(items)
			} else {
				h.pushFrom(items, rng.Intn(sources))
			}
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
		for src, r := range h.tails {
			if r != nil {
				t.Fatalf("source %d still chains to a run after the heap emptied", src)
			}
		}
	})
}

// TestRunHeapChainsBatches checks that a source's batches that follow each
// other in order make one run, and that every chained batch comes back for
// reuse once popped.
func TestRunHeapChainsBatches(t *testing.T) {
	var h runHeap
	var batches [][]item
	for b := 0; b < 4; b++ {
		for src := 0; src < 2; src++ {
			items := make([]item, 3)
			for i := range items {
				items[i] = item{key: int64(10*b + i), conn: uint64(src)}
			}
			batches = append(batches, items)
			h.pushFrom(items, src)
		}
	}
	if len(h.runs) != 2 {
		t.Fatalf("%d runs, want one per source", len(h.runs))
	}
	// A batch that starts before its source's last item starts a run.
	h.pushFrom([]item{{key: 5, conn: 9}}, 0)
	if len(h.runs) != 3 {
		t.Fatalf("%d runs after an out-of-order batch, want 3", len(h.runs))
	}
	var prev item
	for i := 0; h.len() > 0; i++ {
		it := h.pop()
		if i > 0 && it.less(&prev) {
			t.Fatalf("pop %d = %+v after %+v", i, it, prev)
		}
		prev = it
	}
	if len(h.spare) != len(batches)+1 {
		t.Errorf("%d batches back for reuse, want %d", len(h.spare), len(batches)+1)
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
