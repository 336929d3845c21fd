package membudget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"768MiB", 768 << 20, false},
		{"768Mi", 768 << 20, false},
		{"1GiB", 1 << 30, false},
		{" 2G ", 2 << 30, false},
		{"512MB", 512e6, false},
		{"1.5GiB", 3 << 29, false},
		{"1048576", 1 << 20, false},
		{"100 KiB", 100 << 10, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"12XB", 0, true},
		{"-1MiB", 0, true},
		{"1e30TiB", 0, true},
	} {
		got, err := Parse(c.in)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.err)
		}
	}
	for _, n := range []int64{1 << 20, 768 << 20, 3 << 30, 512} {
		if got, err := Parse(Format(n)); err != nil || got != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, got, err)
		}
	}
}

func TestPlan(t *testing.T) {
	p, err := NewPlan(768<<20, 128<<20, "test")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(768<<20 - 128<<20 - outsideHeap); p.HeapLimit != want {
		t.Errorf("heap limit %d, want %d", p.HeapLimit, want)
	}
	var sum int64
	for _, part := range p.Parts() {
		if part.Bytes <= 0 {
			t.Errorf("part %s has %d bytes", part.Name, part.Bytes)
		}
		sum += part.Bytes
	}
	// The collector needs room above the live heap the shares bound.
	if sum > p.HeapLimit/2 {
		t.Errorf("shares add up to %d, over half the heap limit %d", sum, p.HeapLimit)
	}
	if !strings.Contains(p.String(), "detector") {
		t.Errorf("String() = %q", p.String())
	}
	if _, err := NewPlan(100<<20, 64<<20, "test"); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("a limit below the rings and the runtime: %v", err)
	}
}

func TestCgroupLimit(t *testing.T) {
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		proc   string
		files  map[string]string
		want   int64
		wantOK bool
	}{
		{"v2 own group", "0::/kubepods/pod1/c1\n", map[string]string{"kubepods/pod1/c1/memory.max": "805306368\n", "memory.max": "max\n"}, 805306368, true},
		{"v2 namespace root", "0::/\n", map[string]string{"memory.max": "536870912\n"}, 536870912, true},
		{"v2 no limit", "0::/\n", map[string]string{"memory.max": "max\n"}, 0, false},
		{"v1", "12:cpu:/x\n7:memory:/docker/abc\n", map[string]string{"memory/docker/abc/memory.limit_in_bytes": "268435456\n"}, 268435456, true},
		{"v1 unlimited", "7:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"nothing", "", nil, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			proc := filepath.Join(dir, "proc-cgroup")
			write(t, proc, c.proc)
			root := filepath.Join(dir, "cgroup")
			for name, s := range c.files {
				write(t, filepath.Join(root, name), s)
			}
			got, path, ok := cgroupLimit(proc, root)
			if ok != c.wantOK || got != c.want {
				t.Errorf("cgroupLimit = %d (%s), %v; want %d, %v", got, path, ok, c.want, c.wantOK)
			}
		})
	}
}
