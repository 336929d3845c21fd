package capture

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
)

// mergeInput is one file of a merged read, with its next packet.
type mergeInput struct {
	src         *source
	data        []byte // a copy: the reader reuses its buffer
	ci          gopacket.CaptureInfo
	n           uint64 // packets read
	pending     bool
	first, last time.Time
}

// readMerged reads several capture files as one capture, packet by packet in
// capture-time order, as mergecap does: files cut from one capture in turn
// come out in their order, and files whose times overlap (the same file
// given twice, two captures of one link, a rotated capture restarted) are
// interleaved instead of replayed one after the other. A packet identical to
// one of the last DuplicateWindow packets (same time, same bytes) is a
// second copy of it and is dropped; copies that differ (another interface's
// link header) reach reassembly, which takes each TCP byte once by its
// sequence number. Stats counts both, and the returned Stats say how many
// files overlapped.
func readMerged(ctx context.Context, paths []string, cr *countingReader, handle packetHandler) (Stats, error) {
	var st Stats
	var errs []error
	var ins []*mergeInput
	defer func() {
		for _, in := range ins {
			in.src.close()
		}
	}()
	for _, path := range paths {
		src, err := openSource(ctx, path, cr)
		st.Files++
		switch {
		case errors.Is(err, ErrTruncated):
			st.TruncatedFiles++
			errs = append(errs, err)
			continue
		case errors.Is(err, ErrCorrupt):
			st.CorruptFiles++
			errs = append(errs, err)
			continue
		case err != nil:
			return st, errors.Join(append(errs, err)...)
		}
		in := &mergeInput{src: src}
		ins = append(ins, in)
		if err := in.advance(); err != nil {
			countFileError(&st, err)
			errs = append(errs, err)
		}
	}
	dups := newCopyWindow(DuplicateWindow)
	for k := 0; ; k++ {
		if k%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				errs = append(errs, err)
				break
			}
		}
		var next *mergeInput
		for _, in := range ins {
			if in.pending && (next == nil || in.ci.Timestamp.Before(next.ci.Timestamp)) {
				next = in
			}
		}
		if next == nil {
			break
		}
		if dups.seen(next.ci.Timestamp, next.data) {
			st.DuplicatePackets++
		} else {
			handle(next.data, next.ci, next.src.linkType(next.ci))
		}
		if err := next.advance(); err != nil {
			countFileError(&st, err)
			errs = append(errs, err)
		}
	}
	st.OverlappingFiles = overlapping(ins)
	for _, in := range ins {
		st.ClockSteps += in.src.clock.steps
	}
	cr.report()
	return st, errors.Join(errs...)
}

// advance reads the input's next packet; the error is the one that ended
// the file (nil at a clean end).
func (in *mergeInput) advance() error {
	var data []byte
	var err error
	perr := guardPanic(func() error {
		data, in.ci, err = in.src.rd.ZeroCopyReadPacketData()
		return nil
	})
	if perr != nil {
		err = perr
	}
	if err != nil {
		in.pending = false
		return recordError(in.src.name, in.n, in.ci, err)
	}
	in.n++
	in.pending = true
	in.data = append(in.data[:0], data...)
	if in.n == 1 {
		in.first = in.ci.Timestamp
	}
	in.last = in.ci.Timestamp
	return nil
}

func countFileError(st *Stats, err error) {
	switch {
	case errors.Is(err, ErrTruncated):
		st.TruncatedFiles++
	case errors.Is(err, ErrCorrupt):
		st.CorruptFiles++
	}
}

// overlapping counts the files whose time range overlaps another's.
func overlapping(ins []*mergeInput) int {
	var withPackets []*mergeInput
	for _, in := range ins {
		if in.n > 0 {
			withPackets = append(withPackets, in)
		}
	}
	slices.SortFunc(withPackets, func(a, b *mergeInput) int { return a.first.Compare(b.first) })
	n := 0
	var end time.Time
	counted := false
	for i, in := range withPackets {
		if i > 0 && !in.first.After(end) {
			if !counted {
				n++ // the earlier file of the overlap
			}
			n++
			counted = true
		} else {
			counted = false
		}
		if in.last.After(end) {
			end = in.last
		}
	}
	return n
}

// copyWindow remembers the last packets of a merged read by a hash of their
// time and bytes, to recognise a second copy of one.
type copyWindow struct {
	recentSet[uint64]
	seed maphash.Seed
}

func newCopyWindow(size int) *copyWindow {
	return &copyWindow{recentSet: newRecentSet[uint64](size), seed: maphash.MakeSeed()}
}

// seen reports whether a packet with this time and these bytes was among
// the last ones, and remembers it otherwise.
func (w *copyWindow) seen(ts time.Time, data []byte) bool {
	var h maphash.Hash
	h.SetSeed(w.seed)
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], uint64(ts.Unix()))
	binary.LittleEndian.PutUint32(b[8:], uint32(ts.Nanosecond()))
	h.Write(b[:])
	h.Write(data)
	sum := h.Sum64()
	return w.recentSet.seen(sum, sum)
}
