package capture

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/replaywatch/replaywatch/decode"
)

// Errors a caller can test with errors.Is. ErrNotCapture is fatal (nothing
// was read); ErrTruncated and ErrCorrupt come back with the Stats of a run
// that used every packet before the damage and went on with the next file.
var (
	ErrNotCapture = errors.New("not a pcap or pcapng file")
	ErrTruncated  = errors.New("truncated capture file")
	ErrCorrupt    = errors.New("damaged capture file")
)

// Stdin is the path that means standard input.
const Stdin = "-"

// stdin is what Stdin reads; tests replace it.
var stdin io.Reader = os.Stdin

const (
	// readBufferBytes is the read-ahead buffer per input file. pcapReader
	// peeks whole records in it, so it holds the largest one with its
	// 16-byte header.
	readBufferBytes = max(256<<10, MaxPacketBytes+16)
	// progressEvery is how many bytes pass between Progress calls.
	progressEvery = 1 << 20
	// ctxCheckEvery is how many packets pass between cancellation checks.
	ctxCheckEvery = 1024
)

// ReadFiles reads the capture files in order as one capture ("-" is standard
// input), reassembles their TCP connections and feeds each to a stream from
// newFactory(worker). Every file is checked to be a capture before any is
// read. A truncated or damaged file ends that file's reading, is counted and
// reported in the returned error (ErrTruncated, ErrCorrupt), and reading goes
// on with the next file; the Stats are valid in every case.
func ReadFiles(ctx context.Context, paths []string, cfg Config, newFactory func(worker int) decode.StreamFactory) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	cfg = cfg.WithDefaults()
	total, err := checkFiles(paths)
	if err != nil {
		return Stats{}, err
	}
	p := newPipeline(cfg, newFactory)
	st, readErr := readFiles(ctx, paths, total, cfg.Progress, p.handlePacket)
	wst := p.close()
	wst.Files, wst.TruncatedFiles, wst.CorruptFiles = st.Files, st.TruncatedFiles, st.CorruptFiles
	wst.DuplicatePackets, wst.OverlappingFiles, wst.ClockSteps = st.DuplicatePackets, st.OverlappingFiles, st.ClockSteps
	return wst, readErr
}

// RawRead reads the same files and decodes each packet's layers, without
// reassembly: the baseline ReadFiles is measured against.
func RawRead(ctx context.Context, paths []string) (Stats, error) {
	total, err := checkFiles(paths)
	if err != nil {
		return Stats{}, err
	}
	dec := newPacketDecoder()
	var counts Stats
	st, readErr := readFiles(ctx, paths, total, nil, func(data []byte, ci gopacket.CaptureInfo, lt layers.LinkType) {
		dec.classify(&counts, data, lt, ci.Length)
	})
	counts.Files, counts.TruncatedFiles, counts.CorruptFiles = st.Files, st.TruncatedFiles, st.CorruptFiles
	return counts, readErr
}

func displayName(path string) string {
	if path == Stdin {
		return "stdin"
	}
	return path
}

// checkFiles makes sure every file opens and starts like a capture, and
// returns their total size (-1 when standard input is among them).
func checkFiles(paths []string) (int64, error) {
	if len(paths) == 0 {
		return 0, errors.New("capture: no input files")
	}
	var total int64
	for _, path := range paths {
		if ReadOnce(path) {
			// Looking at its first bytes would consume them: the reader
			// checks them when it opens the file.
			total = -1
			continue
		}
		size, err := checkFile(path)
		if err != nil {
			return 0, err
		}
		if total >= 0 {
			total += size
		}
	}
	return total, nil
}

// ReadOnce says whether path can be read only once: standard input, or a
// file that is not a regular one (a named pipe, a shell's process
// substitution such as <(zcat x.pcap.gz), a device), whose bytes a first
// look would consume.
func ReadOnce(path string) bool {
	if path == Stdin {
		return true
	}
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && !fi.Mode().IsRegular()
}

func checkFile(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if fi.IsDir() {
		return 0, fmt.Errorf("%s: is a directory, %w", path, ErrNotCapture)
	}
	if fi.Size() == 0 {
		return 0, fmt.Errorf("%s: empty file, %w", path, ErrNotCapture)
	}
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return 0, notCapture(path, magic[:])
	}
	if isGzip(magic[:]) {
		// Look inside: the capture's own magic comes first.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		if _, err := throughGzip(path, f); err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	if formatOf(magic[:]) == formatUnknown {
		return 0, notCapture(path, magic[:])
	}
	return fi.Size(), nil
}

func isGzip(magic []byte) bool { return len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b }

// throughGzip reads r, gzip-compressed, as a capture file named name: what
// it decompresses to must start like one, and a stream cut before that is
// truncated.
func throughGzip(name string, r io.Reader) (*bufio.Reader, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: gzip: %v", name, ErrNotCapture, err)
	}
	br := bufio.NewReaderSize(zr, readBufferBytes)
	magic, err := br.Peek(4)
	if len(magic) < 4 && err != nil {
		return nil, fmt.Errorf("%s: %w: its gzip data ends before the capture's header (%v)", name, ErrTruncated, err)
	}
	if formatOf(magic) == formatUnknown {
		return nil, fmt.Errorf("%s: %w inside its gzip compression", name, ErrNotCapture)
	}
	return br, nil
}

// Compressed says whether the file at path is gzip-compressed: read through
// its decompression, its offsets are not the file's.
func Compressed(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [2]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && isGzip(magic[:])
}

// notCapture is ErrNotCapture for the file named name, which starts with
// magic; a capture compressed otherwise than gzip is named as such, with
// the command that reads it.
func notCapture(name string, magic []byte) error {
	var what, cat string
	switch {
	case len(magic) >= 4 && binary.LittleEndian.Uint32(magic) == 0xfd2fb528:
		what, cat = "zstd", "zstdcat"
	case len(magic) >= 3 && string(magic[:3]) == "BZh":
		what, cat = "bzip2", "bzcat"
	case len(magic) >= 4 && string(magic[:4]) == "\xfd7zX":
		what, cat = "xz", "xzcat"
	default:
		return fmt.Errorf("%s: %w", name, ErrNotCapture)
	}
	return fmt.Errorf("%s: %w: it is %s-compressed; decompress it on the way in, e.g. replaywatch analyze <(%s FILE) or %s FILE | replaywatch analyze -",
		name, ErrNotCapture, what, cat, cat)
}

// IsCaptureStart says whether b begins like a pcap or pcapng file.
func IsCaptureStart(b []byte) bool { return formatOf(b) != formatUnknown }

type fileFormat uint8

const (
	formatUnknown fileFormat = iota
	formatPcap
	formatPcapng
)

func formatOf(magic []byte) fileFormat {
	if len(magic) < 4 {
		return formatUnknown
	}
	switch binary.LittleEndian.Uint32(magic) {
	case 0xa1b2c3d4, 0xd4c3b2a1, 0xa1b23c4d, 0x4d3cb2a1: // microsecond and nanosecond pcap, both byte orders
		return formatPcap
	case ngSectionHeader:
		return formatPcapng
	}
	return formatUnknown
}

// packetHandler receives each packet read; data is only valid during the
// call.
type packetHandler func(data []byte, ci gopacket.CaptureInfo, lt layers.LinkType)

// readFiles reads every file in order, several files merged in time order
// (readMerged). The returned Stats hold only Files, TruncatedFiles,
// CorruptFiles, DuplicatePackets and OverlappingFiles.
func readFiles(ctx context.Context, paths []string, total int64, progress func(read, total int64), handle packetHandler) (Stats, error) {
	cr := &countingReader{progress: progress, total: total, next: progressEvery}
	if len(paths) > 1 {
		return readMerged(ctx, paths, cr, handle)
	}
	var st Stats
	var errs []error
	for _, path := range paths {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		err := readOne(ctx, path, cr, &st, handle)
		st.Files++
		switch {
		case errors.Is(err, ErrTruncated):
			st.TruncatedFiles++
		case errors.Is(err, ErrCorrupt):
			st.CorruptFiles++
		case err != nil:
			// Not a capture (standard input is checked only here), or
			// cancelled: stop.
			errs = append(errs, err)
			cr.report()
			return st, errors.Join(errs...)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	cr.report()
	return st, errors.Join(errs...)
}

// zeroCopyReader is what pcapgo's two readers have in common.
type zeroCopyReader interface {
	ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

// source is one capture file being read.
type source struct {
	name     string
	rd       zeroCopyReader
	linkType func(gopacket.CaptureInfo) layers.LinkType
	close    func() error
	clock    *steadyClock // rd, its time kept from going back
}

// MaxClockStepBack is how far a packet's time may be behind the latest one
// read before it in the same file before it is taken for the capturing
// host's clock stepped back (NTP stepping it, a virtual machine resumed):
// a file holds packets in the order they were captured, so the rest of the
// file is shifted by the step and its time goes on from where it was. A
// capture's own reordering (several queues, interfaces or rings) is far
// smaller. Left as it was, a step back put later packets before earlier
// ones, and later exchanges and events were judged as if they came first.
const MaxClockStepBack = 100 * time.Millisecond

// steadyClock keeps a file's packet times from going back by more than
// MaxClockStepBack: it counts each such step and shifts what follows.
type steadyClock struct {
	zeroCopyReader
	latest time.Time
	shift  time.Duration
	steps  int
}

func (c *steadyClock) ZeroCopyReadPacketData() ([]byte, gopacket.CaptureInfo, error) {
	data, ci, err := c.zeroCopyReader.ZeroCopyReadPacketData()
	if err != nil {
		return data, ci, err
	}
	if c.shift != 0 {
		ci.Timestamp = ci.Timestamp.Add(c.shift)
	}
	if !ci.Timestamp.Before(c.latest) {
		c.latest = ci.Timestamp // the usual case
	} else if back := c.latest.Sub(ci.Timestamp); back > MaxClockStepBack {
		c.steps++
		c.shift += back
		ci.Timestamp = c.latest
	}
	return data, ci, nil
}

// openSource opens a capture file (or standard input) and reads its header.
// Its bytes are counted by cr.
func openSource(ctx context.Context, path string, cr *countingReader) (*source, error) {
	name := displayName(path)
	var src io.Reader
	closeFn := func() error { return nil }
	if path == Stdin {
		src = &interruptible{ctx: ctx, r: stdin}
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		src, closeFn = f, f.Close
	}
	br := bufio.NewReaderSize(cr.reader(src), readBufferBytes)
	magic, _ := br.Peek(4)
	if isGzip(magic) {
		// tcpdump -w - | gzip, and rotated captures, are kept so; the
		// progress still counts the file's own, compressed, bytes.
		gz, err := throughGzip(name, br)
		if err != nil {
			closeFn()
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr // stopped, not damaged
			}
			return nil, err
		}
		br = gz
		magic, _ = br.Peek(4)
	}
	if err := ctx.Err(); err != nil {
		closeFn()
		return nil, err
	}
	s := &source{name: name, close: closeFn}
	switch formatOf(magic) {
	case formatPcap:
		r, err := newPcapReader(br)
		if err != nil {
			closeFn()
			return nil, headerError(name, err)
		}
		lt := r.linkType
		s.rd, s.linkType = r, func(gopacket.CaptureInfo) layers.LinkType { return lt }
	case formatPcapng:
		var r *pcapgo.NgReader
		err := guardPanic(func() (err error) {
			r, err = pcapgo.NewNgReader(newNgGuard(br), pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true})
			return err
		})
		if err != nil {
			closeFn()
			return nil, headerError(name, err)
		}
		s.rd, s.linkType = r, func(ci gopacket.CaptureInfo) layers.LinkType {
			if len(ci.AncillaryData) > 0 {
				if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
					return lt
				}
			}
			return layers.LinkTypeNull
		}
	default:
		closeFn()
		return nil, notCapture(name, magic)
	}
	s.clock = &steadyClock{zeroCopyReader: s.rd}
	s.rd = s.clock
	return s, nil
}

func readOne(ctx context.Context, path string, cr *countingReader, st *Stats, handle packetHandler) error {
	src, err := openSource(ctx, path, cr)
	if err != nil {
		return err
	}
	defer src.close()
	defer func() { st.ClockSteps += src.clock.steps }()
	var n uint64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		read, ci, err := readBatch(src.rd, ctxCheckEvery, src.linkType, handle)
		n += uint64(read)
		if err != nil {
			return recordError(src.name, n, ci, err)
		}
	}
}

// readBatch hands up to max packets to handle. A panic inside pcapgo becomes
// the error that ends the file, as guardPanic makes it; one in handle is not
// the reader's to hide and goes on. One deferred recover per batch instead of
// guardPanic per packet: the closure and defer were a tenth of a raw read.
func readBatch(rd zeroCopyReader, max int, linkType func(gopacket.CaptureInfo) layers.LinkType, handle packetHandler) (read int, ci gopacket.CaptureInfo, err error) {
	inPcapgo := false
	defer func() {
		if inPcapgo {
			if r := recover(); r != nil {
				ci, err = gopacket.CaptureInfo{}, fmt.Errorf("pcapgo: %v", r)
			}
		}
	}()
	for read < max {
		var data []byte
		inPcapgo = true
		data, ci, err = rd.ZeroCopyReadPacketData()
		inPcapgo = false
		if err != nil {
			return read, ci, err
		}
		read++
		handle(data, ci, linkType(ci))
	}
	return read, ci, nil
}

// guardPanic runs a pcapgo call and turns a panic into an error. pcapgo
// indexes some pcapng option fields without checking their length (found by
// FuzzReadFile), and damaged input must never crash a run; the reader is not
// used again after an error, so its state does not matter.
func guardPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pcapgo: %v", r)
		}
	}()
	return f()
}

func headerError(name string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || err.Error() == "Not enough data for read" {
		return fmt.Errorf("%s: %w: cut inside the file header", name, ErrTruncated)
	}
	return fmt.Errorf("%s: %w: bad file header: %v", name, ErrCorrupt, err)
}

// recordError turns the error that ended a file into nil (a clean end),
// ErrTruncated or ErrCorrupt.
func recordError(name string, n uint64, ci gopacket.CaptureInfo, err error) error {
	switch {
	case err == io.EOF && ci.CaptureLength == 0:
		return nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err // stopped (interruptible): the file is not damaged
	case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF):
		// pcapgo returns io.EOF when a record header arrived but none of
		// its data did.
		return fmt.Errorf("%s: %w: cut mid-record after %d packets", name, ErrTruncated, n)
	}
	return fmt.Errorf("%s: %w: record %d: %v", name, ErrCorrupt, n+1, err)
}

// interruptible reads r until ctx ends; from then on Read returns ctx's
// error at once, even while a read of r blocks. Standard input from a pipe
// that stays open (a capture tool still writing) blocks a read that
// neither a signal nor closing the file would end. Reads go through the
// reader's own buffer, so a read abandoned at cancellation never writes
// into a caller's slice; its goroutine ends with the process.
type interruptible struct {
	ctx     context.Context
	r       io.Reader
	buf     []byte
	pending chan readResult // the read in flight, if any
}

type readResult struct {
	n   int
	err error
}

func (s *interruptible) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	if s.pending == nil {
		if s.buf == nil {
			s.buf = make([]byte, readBufferBytes)
		}
		s.pending = make(chan readResult, 1)
		buf, done := s.buf[:min(len(p), len(s.buf))], s.pending
		go func() {
			n, err := s.r.Read(buf)
			done <- readResult{n, err}
		}()
	}
	select {
	case r := <-s.pending:
		s.pending = nil
		return copy(p, s.buf[:r.n]), r.err
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	}
}

// countingReader counts the bytes read from the input files for Progress;
// the files read at once (readMerged) share one.
type countingReader struct {
	read     int64
	total    int64
	next     int64
	progress func(read, total int64)
}

// reader wraps one file's reader so that its bytes are counted.
func (c *countingReader) reader(r io.Reader) io.Reader { return &countedFile{r: r, c: c} }

type countedFile struct {
	r io.Reader
	c *countingReader
}

func (f *countedFile) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	c := f.c
	c.read += int64(n)
	if c.progress != nil && c.read >= c.next {
		c.next = c.read + progressEvery
		c.progress(c.read, c.total)
	}
	return n, err
}

func (c *countingReader) report() {
	if c.progress != nil {
		c.progress(c.read, c.total)
	}
}
