package decode

import (
	"fmt"
	"testing"
)

// Reference values from github.com/cespare/xxhash/v2 (XXH64, seed 0).
func TestXXH64(t *testing.T) {
	r := make([]byte, 0, 768)
	for range 3 {
		for j := range 256 {
			r = append(r, byte(j))
		}
	}
	for _, tt := range []struct {
		in   []byte
		want uint64
	}{
		{nil, 0xef46db3751d8e999},
		{[]byte("a"), 0xd24ec4f1a98c6e5b},
		{[]byte("abc"), 0x44bc2cf5ad770999},
		{r[:31], 0xc346d2b59b4d8ee1},
		{r[:32], 0xcbf59c5116ff32b4},
		{r[:33], 0x0c535d1acafb8ead},
		{r[:100], 0x6ac1e58032166597},
		{r, 0x8e03c838c596036f},
	} {
		t.Run(fmt.Sprint(len(tt.in)), func(t *testing.T) {
			if got := xxSum64(tt.in); got != tt.want {
				t.Fatalf("xxSum64 = %016x, want %016x", got, tt.want)
			}
			// Streaming gives the same hash however the input is split.
			for _, step := range []int{1, 3, 7, 31, 32, 33} {
				var x xxh64
				x.reset()
				for b := tt.in; len(b) > 0; {
					n := min(step, len(b))
					x.write(b[:n])
					b = b[n:]
				}
				if got := x.sum(); got != tt.want {
					t.Errorf("in pieces of %d: %016x, want %016x", step, got, tt.want)
				}
			}
		})
	}
}
