package decode

import (
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strings"
)

// Bodies under Content-Encoding gzip (x-gzip) or deflate are inflated as
// they arrive, so that a compression middleware in front of an MCP server
// hides nothing. Any other coding (br, zstd, a list of codings) is delimited
// and counted, not read (Request/Response.EncodedUnread).
const (
	// inflaterBytes is what one open inflater holds, as the buffer budget
	// counts it (MaxBufferedBytes): flate's 32 KiB window, its Huffman
	// tables, the output buffer and the goroutine's stack.
	inflaterBytes = 64 << 10
	// inflateChunk is the most one inflated piece holds.
	inflateChunk = 16 << 10
	// maxInflateRatio and inflateAllowance bound what a body may inflate
	// to: inflateAllowance plus maxInflateRatio times its compressed bytes.
	// Text compresses well under that; a decompression bomb does not, and
	// is cut there (End.Limit EndInflateRatio), the rest not read.
	maxInflateRatio  = 200
	inflateAllowance = 1 << 20
)

// End.Limit values of a compressed body that stopped inflating partway: the
// rest of it was not read.
const (
	// EndInflateRatio: it inflated past maxInflateRatio.
	EndInflateRatio = "maxInflateRatio"
	// EndNotInflated: its data would not inflate. Not a limit: the body
	// is as unread as one under a coding the decoder does not read.
	EndNotInflated = "Content-Encoding"
)

// coding is what the decoder does with a Content-Encoding.
type coding uint8

const (
	codingNone coding = iota
	codingGzip
	codingDeflate
	codingUnread // any other: counted, not read
)

func codingOf(v string) coding {
	switch {
	case v == "":
		return codingNone
	case strings.EqualFold(v, "gzip"), strings.EqualFold(v, "x-gzip"):
		return codingGzip
	case strings.EqualFold(v, "deflate"):
		return codingDeflate
	}
	return codingUnread
}

// errInflateRatio ends an inflater whose output outgrew maxInflateRatio;
// errStopped is how its goroutine ends then.
var (
	errInflateRatio = errors.New("inflated past maxInflateRatio")
	errStopped      = errors.New("inflater stopped")
)

// inflater inflates one body. compress/flate pulls its input from an
// io.Reader, while a body arrives pushed, a packet at a time: so the reader
// runs on a goroutine of its own, and write hands it the compressed bytes
// and waits until it wants more. Every piece it inflates meanwhile is given
// to emit on write's goroutine before write returns, so the decoder reads
// the inflated bytes in order, stamped with the packet that completed them.
// Between calls the goroutine is blocked waiting for input; close ends it.
type inflater struct {
	in   chan []byte   // compressed bytes, to the goroutine
	out  chan inflated // pieces, requests for input and the end, from it
	more chan bool     // after a piece: go on (true) or stop (false)
	done bool          // the goroutine has ended
	// err is why inflating stopped before the body ended: corrupt data
	// or errInflateRatio. nil while it runs, and after a clean end.
	err             error
	inBytes, output int64
}

// inflated is one message from an inflater's goroutine: a piece of output
// (data), its end (end, with the reader's error), or neither: it wants input.
type inflated struct {
	data []byte
	end  bool
	err  error
}

// newInflater starts inflating a body of coding c (gzip or deflate).
func newInflater(c coding) *inflater {
	z := &inflater{in: make(chan []byte), out: make(chan inflated), more: make(chan bool)}
	go z.run(c)
	<-z.out // it wants its first input
	return z
}

// write feeds p to the inflater and gives emit every piece inflated from
// it. p is not used once write returns.
func (z *inflater) write(p []byte, emit func([]byte)) {
	if z.done || len(p) == 0 {
		return
	}
	z.inBytes += int64(len(p))
	z.in <- p
	z.pump(emit)
}

// close ends the body: what the inflater still holds goes to emit (nil
// drops it), and the goroutine ends.
func (z *inflater) close(emit func([]byte)) {
	if z.done {
		return
	}
	close(z.in)
	z.pump(emit)
}

// pump takes the goroutine's messages until it wants input or ends. The
// goroutine only ever waits for input after saying so, so write's send
// never blocks for long, and after its end nothing is sent to it.
func (z *inflater) pump(emit func([]byte)) {
	for {
		m := <-z.out
		switch {
		case m.end:
			z.done = true
			if z.err == nil && m.err != nil && m.err != io.EOF && m.err != io.ErrUnexpectedEOF {
				// A body cut short (io.ErrUnexpectedEOF) is its End's to
				// say, not the inflater's.
				z.err = m.err
			}
			return
		case m.data != nil:
			z.output += int64(len(m.data))
			if z.output > inflateAllowance+maxInflateRatio*z.inBytes {
				z.err = errInflateRatio
				z.more <- false
				continue
			}
			if emit != nil {
				emit(m.data)
			}
			z.more <- true
		default:
			return
		}
	}
}

// failed says inflating stopped before the body's end: the rest of the body
// is not read.
func (z *inflater) failed() bool { return z.err != nil }

func (z *inflater) run(c coding) {
	f := &feed{z: z}
	var r io.Reader
	var err error
	if c == codingGzip {
		r, err = gzip.NewReader(f)
	} else {
		r, err = newDeflateReader(f)
	}
	if err == nil {
		buf := make([]byte, inflateChunk)
		for err == nil {
			var n int
			n, err = r.Read(buf)
			if n > 0 {
				z.out <- inflated{data: buf[:n]}
				if !<-z.more {
					err = errStopped
				}
			}
		}
	}
	z.out <- inflated{end: true, err: err}
}

// newDeflateReader reads HTTP's deflate: zlib (RFC 1950) as the standard
// says, or raw deflate (RFC 1951) as some servers send, told apart by the
// zlib header's check bits.
func newDeflateReader(f *feed) (io.Reader, error) {
	var hdr [2]byte
	for i := range hdr {
		b, err := f.ReadByte()
		if err != nil {
			return nil, err
		}
		hdr[i] = b
	}
	f.cur = append(hdr[:], f.cur...) // read again
	if hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
		return zlib.NewReader(f)
	}
	return flate.NewReader(f), nil
}

// feed is the goroutine's side of the input: a flate.Reader (Read and
// ReadByte, so neither gzip nor flate wraps it in a bufio.Reader that would
// read ahead) over the slices write hands in.
type feed struct {
	z      *inflater
	cur    []byte
	closed bool // close was called: no more input
}

func (f *feed) fill() bool {
	for len(f.cur) == 0 {
		if f.closed {
			return false
		}
		f.z.out <- inflated{} // wants input
		p, ok := <-f.z.in
		if !ok {
			f.closed = true
			return false
		}
		f.cur = p
	}
	return true
}

func (f *feed) Read(b []byte) (int, error) {
	if !f.fill() {
		return 0, io.EOF
	}
	n := copy(b, f.cur)
	f.cur = f.cur[n:]
	return n, nil
}

func (f *feed) ReadByte() (byte, error) {
	if !f.fill() {
		return 0, io.EOF
	}
	c := f.cur[0]
	f.cur = f.cur[1:]
	return c, nil
}

// startCoding readies the body of the message just parsed for its
// Content-Encoding value: an inflater for gzip and deflate. hasBody says
// bytes will follow. It reports whether the body will be read (false: it is
// EncodedUnread).
func (d *dir) startCoding(value string, hasBody bool) bool {
	c := codingOf(value)
	switch {
	case c == codingNone || !hasBody:
		return true
	case c == codingUnread:
		return false
	case d.c.w.inflaters >= d.c.w.maxInflaters:
		d.c.w.stats.inflateLimitHits.Add(1)
		return false
	}
	d.c.w.inflaters++
	d.inflate = newInflater(c)
	if d.plain == nil {
		d.plain = d.readPlain
	}
	return true
}

// endCoding ends the body's inflater, reading what it still holds, and
// counts the body. It returns the End.Limit for a body whose inflating
// stopped partway (EndInflateRatio, EndNotInflated); "" when it did not, or
// there was none.
func (d *dir) endCoding() string {
	z := d.inflate
	if z == nil {
		return ""
	}
	z.close(d.plain)
	d.inflate = nil
	st := d.c.w.stats
	d.c.w.inflaters--
	switch {
	case z.err == errInflateRatio:
		st.inflatedBodies.Add(1)
		st.inflateLimitHits.Add(1)
		return EndInflateRatio
	case z.failed():
		st.encodedUnread.Add(1)
		return EndNotInflated
	}
	st.inflatedBodies.Add(1)
	return ""
}

// dropCoding ends the body's inflater, if any, without reading what it
// still holds: the message is given up.
func (d *dir) dropCoding() {
	if d.inflate != nil {
		d.inflate.close(nil)
		d.inflate = nil
		d.c.w.inflaters--
	}
}
