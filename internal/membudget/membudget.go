// Package membudget turns one memory limit, in bytes, into the limits of
// everything in replaywatch that grows with traffic, so that the process
// stays within the limit whatever the traffic does: an agent shares its
// node with the workloads it watches and must never outgrow its pod.
//
// The limit (--memory-limit) defaults to the cgroup's memory limit when the
// process has one (a container), else to DefaultLimit. From it come
//
//   - the Go runtime's soft limit (runtime/debug.SetMemoryLimit): the limit
//     less what lies outside the Go heap (packet rings, the binary);
//   - a share, in bytes, for each part that keeps state per connection,
//     session or observation: reassembly pages, decoder buffers, the
//     merger's queue, the detector's session state, the sink's batches.
//
// The shares add up to half the soft limit: the garbage collector needs
// room above the live heap, and it is the live heap the shares bound. Each
// part counts the bytes it holds and, at its share, sheds its oldest or
// largest state; what needed that state is reported unverifiable, never as
// a finding, and a metric says what was shed.
package membudget

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

const (
	// DefaultLimit is the limit when none is given and the process has no
	// cgroup memory limit (a workstation running analyze).
	DefaultLimit = 1 << 30
	// MinLimit is the smallest limit accepted once fixed costs are taken
	// off: below it the runtime alone does not fit.
	MinLimit = 48 << 20
	// outsideHeap is what the process holds besides the Go heap it
	// limits: the binary's pages, goroutine stacks, the runtime's own
	// structures, fragmentation. Measured at 18-30 MiB for an agent (its
	// telemetry and ClickHouse client included); the flood tests hold the
	// whole under the limit with this.
	outsideHeap = 48 << 20
)

// Fractions of the Go runtime's soft limit given to each part. They add up
// to one half: the rest is the collector's headroom above the live heap.
const (
	detectorShare   = 0.20
	reassemblyShare = 0.10
	decoderShare    = 0.08
	sinkShare       = 0.08
	mergerShare     = 0.04
)

// Plan is a limit divided.
type Plan struct {
	// Limit is the whole process' memory, as --memory-limit or the cgroup
	// gives it; From says where it came from.
	Limit int64
	From  string
	// Fixed is memory outside the Go heap that the caller reserves (packet
	// rings).
	Fixed int64
	// HeapLimit is the Go runtime's soft limit: Limit less Fixed and what
	// lies outside the heap.
	HeapLimit int64
	// The parts' shares, in bytes.
	Reassembly, Decoder, Merger, Detector, Sink int64
}

// NewPlan divides limit, of which fixed bytes are taken outside the Go heap.
func NewPlan(limit, fixed int64, from string) (Plan, error) {
	heap := limit - fixed - outsideHeap
	if heap < MinLimit {
		return Plan{}, fmt.Errorf("memory limit %s less %s of packet rings and %s outside the Go heap leaves %s: at least %s is needed",
			Format(limit), Format(fixed), Format(outsideHeap), Format(max(heap, 0)), Format(MinLimit))
	}
	share := func(f float64) int64 { return int64(float64(heap) * f) }
	return Plan{
		Limit: limit, From: from, Fixed: fixed, HeapLimit: heap,
		Reassembly: share(reassemblyShare), Decoder: share(decoderShare), Merger: share(mergerShare),
		Detector: share(detectorShare), Sink: share(sinkShare),
	}, nil
}

// Parts lists the shares by the name metrics and messages give them.
func (p Plan) Parts() []Part {
	return []Part{
		{"reassembly", p.Reassembly}, {"decoder", p.Decoder}, {"merger", p.Merger},
		{"detector", p.Detector}, {"sink", p.Sink},
	}
}

// Part is one share.
type Part struct {
	Name  string
	Bytes int64
}

// String is the plan as the agent and analyze log it.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "memory limit %s (%s), Go heap soft limit %s", Format(p.Limit), p.From, Format(p.HeapLimit))
	if p.Fixed > 0 {
		fmt.Fprintf(&b, ", packet rings %s", Format(p.Fixed))
	}
	for _, part := range p.Parts() {
		fmt.Fprintf(&b, ", %s %s", part.Name, Format(part.Bytes))
	}
	return b.String()
}

// Detect returns the process' cgroup memory limit (v2, then v1), or
// DefaultLimit when there is none, and says which.
func Detect() (int64, string) {
	if n, path, ok := cgroupLimit("/proc/self/cgroup", "/sys/fs/cgroup"); ok {
		return n, "cgroup " + path
	}
	return DefaultLimit, "default, no cgroup memory limit"
}

// unlimited is the value cgroup v1 reports for "no limit" (a page-rounded
// max int64) and above.
const unlimited = 1 << 62

// cgroupLimit reads the memory limit of the process' cgroup under root:
// v2's memory.max of its own group (found in procCgroup), else the
// namespace root's; then v1's memory.limit_in_bytes.
func cgroupLimit(procCgroup, root string) (int64, string, bool) {
	var candidates []string
	if f, err := os.Open(procCgroup); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// "0::/kubepods/pod.../container" (v2) or
			// "7:memory:/docker/..." (v1).
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				candidates = append(candidates, filepath.Join(root, parts[2], "memory.max"))
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				candidates = append(candidates, filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"))
			}
		}
		f.Close()
	}
	// Inside a container the cgroup namespace makes the group the root.
	candidates = append(candidates, filepath.Join(root, "memory.max"), filepath.Join(root, "memory", "memory.limit_in_bytes"))
	for _, path := range candidates {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			continue
		}
		return n, path, true
	}
	return 0, "", false
}

// Parse reads a size: a number of bytes, with an optional unit B, KiB,
// MiB, GiB, TiB (powers of 1024; K, M, G, T and Ki, Mi, Gi, Ti too), or
// kB, MB, GB, TB (powers of 1000), as Kubernetes and GOMEMLIMIT write them.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(t[:i]), strings.TrimSpace(t[i:])
	}
	mult, ok := units[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (768MiB, 1GiB, 512MB)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: %q is not a number of bytes", s, num)
	}
	v := f * float64(mult)
	if v >= 1<<63 {
		return 0, errors.New("size " + s + " is too large")
	}
	return int64(v), nil
}

var units = map[string]int64{
	"": 1, "B": 1,
	"K": 1 << 10, "Ki": 1 << 10, "KiB": 1 << 10,
	"M": 1 << 20, "Mi": 1 << 20, "MiB": 1 << 20,
	"G": 1 << 30, "Gi": 1 << 30, "GiB": 1 << 30,
	"T": 1 << 40, "Ti": 1 << 40, "TiB": 1 << 40,
	"kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
}

// Format writes n in binary units; whole MiB and GiB exactly, as Parse
// reads them back.
func Format(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + "GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + "KiB"
	}
	return strconv.FormatInt(n, 10) + "B"
}
