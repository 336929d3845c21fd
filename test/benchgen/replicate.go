package main

// Replication: the template (a few hundred live sessions) is copied many
// times into the big capture. Each copy is made a distinct set of sessions
// and connections: a client address of its own (10.x.y.z and a shifted
// port), session ids rewritten in place (same length, unique per copy), and
// timestamps shifted so copies overlap in time like concurrent clients.
// Checksums are recomputed, so tools that verify them accept the file.

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/replaywatch/replaywatch/test/inetsum"
)

// Layout of the packets pcaprec writes: Ethernet II, IPv4 without options
// (loopback recording), TCP.
const (
	ethHeaderLen    = 14
	ipv4MinHeader   = 20
	tcpMinHeader    = 20
	pcapFileHeader  = 24
	pcapRecordHead  = 16
	etherTypeIPv4   = 0x0800
	ipProtoTCP      = 6
	maxTemplateSize = 1 << 30 // a template is a few MB; this only guards memory
)

// idSuffixLen is how many trailing characters of each session id are
// replaced by the copy number. go-sdk ids are 26 characters of base32
// (crypto/rand.Text); six base32 digits number 2^30 copies, and the
// untouched 20-character prefix keeps ids of one copy apart.
const idSuffixLen = 6

// idAlphabet is go-sdk's session id alphabet, so rewritten ids look like
// the ones the SDK mints.
const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// maxCopies is bounded by the client addresses 10.0.0.1 .. 10.255.255.254
// and by idSuffixLen.
const maxCopies = 1<<24 - 2

var sessionHeader = regexp.MustCompile(`(?i)\r\nmcp-session-id:[ \t]*([^\r\n]*)`)

// patch overwrites n bytes of a packet's payload at off with
// newID[idOff:idOff+n] of session id number id.
type patch struct {
	off, id, idOff, n int
}

// tmplPacket is one packet of the template with its layer offsets.
type tmplPacket struct {
	ts         time.Time
	data       []byte
	fromClient bool
	tcpOff     int
	payOff     int
	patches    []patch
}

// template is a loaded template capture.
type template struct {
	packets []tmplPacket
	ids     []string // session ids seen in Mcp-Session-Id headers
	conns   int
}

type flowKey struct{ src, dst [6]byte }

// streamPiece locates a packet's payload inside its direction's byte stream.
type streamPiece struct{ pkt, start int }

type dirStream struct {
	data   []byte
	pieces []streamPiece
}

// loadTemplate reads a pcaprec capture and indexes every session id
// occurrence, including ones split across segments.
func loadTemplate(path string) (*template, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxTemplateSize {
		return nil, fmt.Errorf("template %s: %d bytes, more than %d", path, fi.Size(), maxTemplateSize)
	}
	r, err := pcapgo.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", path, err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("template %s: link type %v, want Ethernet", path, r.LinkType())
	}
	t := &template{}
	// clientOf maps a direction to (connection, sent by the client).
	type dirInfo struct {
		conn       int
		fromClient bool
	}
	dirs := map[flowKey]dirInfo{}
	var streams [][2]dirStream // per connection: [from client, from server]
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("template %s: packet %d: %w", path, len(t.packets)+1, err)
		}
		p := tmplPacket{ts: ci.Timestamp, data: data}
		key, syn, ack, err := parseTCP(&p)
		if err != nil {
			return nil, fmt.Errorf("template %s: packet %d: %w", path, len(t.packets)+1, err)
		}
		d, ok := dirs[key]
		if !ok {
			if !syn || ack {
				return nil, fmt.Errorf("template %s: packet %d: connection without a captured SYN", path, len(t.packets)+1)
			}
			d = dirInfo{conn: t.conns, fromClient: true}
			dirs[key] = d
			dirs[flowKey{src: key.dst, dst: key.src}] = dirInfo{conn: t.conns, fromClient: false}
			streams = append(streams, [2]dirStream{})
			t.conns++
		}
		p.fromClient = d.fromClient
		if n := len(p.data) - p.payOff; n > 0 {
			s := &streams[d.conn][dirIndex(d.fromClient)]
			s.pieces = append(s.pieces, streamPiece{pkt: len(t.packets), start: len(s.data)})
			s.data = append(s.data, p.data[p.payOff:]...)
		}
		t.packets = append(t.packets, p)
	}
	if len(t.packets) == 0 {
		return nil, fmt.Errorf("template %s: no packets", path)
	}
	if err := t.indexSessionIDs(streams); err != nil {
		return nil, fmt.Errorf("template %s: %w", path, err)
	}
	return t, nil
}

func dirIndex(fromClient bool) int {
	if fromClient {
		return 0
	}
	return 1
}

// parseTCP finds the layer offsets of an Ethernet/IPv4/TCP packet.
func parseTCP(p *tmplPacket) (key flowKey, syn, ack bool, err error) {
	b := p.data
	if len(b) < ethHeaderLen+ipv4MinHeader+tcpMinHeader {
		return key, false, false, fmt.Errorf("%d bytes, too short for Ethernet/IPv4/TCP", len(b))
	}
	if et := binary.BigEndian.Uint16(b[12:14]); et != etherTypeIPv4 {
		return key, false, false, fmt.Errorf("ethertype %#04x, want IPv4", et)
	}
	ip := b[ethHeaderLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipv4MinHeader || ip[9] != ipProtoTCP {
		return key, false, false, errors.New("not IPv4/TCP")
	}
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if total > len(ip) || total < ihl+tcpMinHeader {
		return key, false, false, fmt.Errorf("IPv4 total length %d does not fit %d captured bytes", total, len(ip))
	}
	p.tcpOff = ethHeaderLen + ihl
	tcp := b[p.tcpOff:]
	doff := int(tcp[12]>>4) * 4
	if doff < tcpMinHeader || p.tcpOff+doff > ethHeaderLen+total {
		return key, false, false, errors.New("bad TCP data offset")
	}
	p.payOff = p.tcpOff + doff
	// Ignore Ethernet padding past the IP packet.
	p.data = b[:ethHeaderLen+total]
	copy(key.src[:4], ip[12:16])
	copy(key.src[4:], tcp[0:2])
	copy(key.dst[:4], ip[16:20])
	copy(key.dst[4:], tcp[2:4])
	return key, tcp[13]&0x02 != 0, tcp[13]&0x10 != 0, nil
}

// indexSessionIDs collects the session ids of every Mcp-Session-Id header
// and records, per packet, where each occurrence of one lies (anywhere in
// the stream, split across segments or not).
func (t *template) indexSessionIDs(streams [][2]dirStream) error {
	index := map[string]int{}
	for _, c := range streams {
		for _, s := range c {
			for _, m := range sessionHeader.FindAllSubmatch(s.data, -1) {
				id := string(bytes.TrimSpace(m[1]))
				if _, ok := index[id]; !ok && id != "" {
					index[id] = len(t.ids)
					t.ids = append(t.ids, id)
				}
			}
		}
	}
	for _, c := range streams {
		for _, s := range c {
			for id, n := range index {
				for from := 0; ; {
					i := bytes.Index(s.data[from:], []byte(id))
					if i < 0 {
						break
					}
					i += from
					t.addPatches(s, i, n, len(id))
					from = i + len(id)
				}
			}
		}
	}
	return nil
}

// addPatches splits one occurrence at stream offset at over the packets
// holding it.
func (t *template) addPatches(s dirStream, at, id, n int) {
	k := sort.Search(len(s.pieces), func(i int) bool { return s.pieces[i].start > at }) - 1
	for done := 0; done < n; k++ {
		pc := s.pieces[k]
		p := &t.packets[pc.pkt]
		off := at + done - pc.start
		m := min(n-done, len(p.data)-p.payOff-off)
		p.patches = append(p.patches, patch{off: off, id: id, idOff: done, n: m})
		done += m
	}
}

// checkIDs says whether every session id can be rewritten into distinct
// ids per copy: long enough to keep a prefix, and no two sharing the prefix
// the rewriting keeps.
func (t *template) checkIDs() error {
	prefixes := map[string]bool{}
	for _, id := range t.ids {
		if len(id) < idSuffixLen+8 {
			return fmt.Errorf("session id %q too short to rewrite", id)
		}
		pre := id[:len(id)-idSuffixLen]
		if prefixes[pre] {
			return fmt.Errorf("two session ids share the prefix %q; copies would collide", pre)
		}
		prefixes[pre] = true
	}
	return nil
}

// copyIDs returns the session ids of copy k: each template id with its last
// idSuffixLen characters replaced by k in idAlphabet digits.
func (t *template) copyIDs(k int) [][]byte {
	suffix := make([]byte, idSuffixLen)
	for i, v := idSuffixLen-1, k; i >= 0; i-- {
		suffix[i] = idAlphabet[v%len(idAlphabet)]
		v /= len(idAlphabet)
	}
	out := make([][]byte, len(t.ids))
	for i, id := range t.ids {
		out[i] = append([]byte(id[:len(id)-idSuffixLen]), suffix...)
	}
	return out
}

// copyClientIP is copy k's client address: 10.0.0.1 for copy 0 onward.
func copyClientIP(k int) [4]byte {
	v := uint32(k + 1)
	return [4]byte{10, byte(v >> 16), byte(v >> 8), byte(v)}
}

// copyClientPort maps a template client port to copy k's: a bijection on
// 1024..65535, so connections within a copy stay apart.
func copyClientPort(orig uint16, k int) uint16 {
	if orig < 1024 {
		return orig
	}
	const span = 65536 - 1024
	return uint16(1024 + (int(orig)-1024+k*7919)%span)
}

// render writes copy k's version of p into buf and returns it.
func (t *template) render(buf []byte, p *tmplPacket, k int, ids [][]byte) []byte {
	buf = append(buf[:0], p.data...)
	ipOff := ethHeaderLen
	ip := buf[ipOff:p.tcpOff]
	tcp := buf[p.tcpOff:]
	addr := copyClientIP(k)
	// The client's MAC follows its address, as pcaprec derives it.
	if p.fromClient {
		copy(ip[12:16], addr[:])
		copy(buf[8:12], addr[:])
		binary.BigEndian.PutUint16(tcp[0:2], copyClientPort(binary.BigEndian.Uint16(tcp[0:2]), k))
	} else {
		copy(ip[16:20], addr[:])
		copy(buf[2:6], addr[:])
		binary.BigEndian.PutUint16(tcp[2:4], copyClientPort(binary.BigEndian.Uint16(tcp[2:4]), k))
	}
	pay := buf[p.payOff:]
	for _, pt := range p.patches {
		copy(pay[pt.off:pt.off+pt.n], ids[pt.id][pt.idOff:pt.idOff+pt.n])
	}
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:12], inetsum.Checksum(0, ip))
	tcp[16], tcp[17] = 0, 0
	binary.BigEndian.PutUint16(tcp[16:18], inetsum.TCP(ip, tcp))
	return buf
}

// replicateStats says what replicate wrote.
type replicateStats struct {
	Copies, Sessions int
	Packets          int64
	Bytes            int64
	Span             time.Duration // capture time from first to last packet
}

// copyCursor is one copy in progress during the merge.
type copyCursor struct {
	k     int
	next  int // index into template packets
	shift time.Duration
}

type cursorHeap struct {
	t *template
	c []*copyCursor
}

func (h *cursorHeap) ts(i int) time.Time {
	c := h.c[i]
	return h.t.packets[c.next].ts.Add(c.shift)
}
func (h *cursorHeap) Len() int           { return len(h.c) }
func (h *cursorHeap) Less(i, j int) bool { return h.ts(i).Before(h.ts(j)) }
func (h *cursorHeap) Swap(i, j int)      { h.c[i], h.c[j] = h.c[j], h.c[i] }
func (h *cursorHeap) Push(x any)         { h.c = append(h.c, x.(*copyCursor)) }
func (h *cursorHeap) Pop() any {
	x := h.c[len(h.c)-1]
	h.c = h.c[:len(h.c)-1]
	return x
}

// replicate writes copies of t to w, as many as it takes to reach target
// bytes; copies start stride apart in capture time and every started copy
// is finished, so no session is cut by the end of the file. Packets of all
// copies are merged in timestamp order.
func (t *template) replicate(w io.Writer, target int64, stride time.Duration) (replicateStats, error) {
	var st replicateStats
	if stride <= 0 {
		return st, errors.New("stride must be positive")
	}
	if err := t.checkIDs(); err != nil {
		return st, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return st, err
	}
	st.Bytes = pcapFileHeader
	h := &cursorHeap{t: t}
	ids := map[int][][]byte{} // session ids of copies in progress
	base := t.packets[0].ts
	var buf []byte
	var first, last time.Time
	starting := true
	// Copies are started until the ones started fill target (at least one),
	// so the file ends at most one template over it.
	var perCopy int64
	for i := range t.packets {
		perCopy += int64(pcapRecordHead + len(t.packets[i].data))
	}
	for {
		if starting && st.Copies > 0 && pcapFileHeader+int64(st.Copies)*perCopy >= target {
			starting = false
		}
		if starting && (h.Len() == 0 || !base.Add(time.Duration(st.Copies)*stride).After(h.ts(0))) {
			if st.Copies >= maxCopies {
				return st, fmt.Errorf("more than %d copies needed; record a larger template", maxCopies)
			}
			c := &copyCursor{k: st.Copies, shift: time.Duration(st.Copies) * stride}
			ids[c.k] = t.copyIDs(c.k)
			heap.Push(h, c)
			st.Copies++
			continue
		}
		if h.Len() == 0 {
			break
		}
		c := h.c[0]
		p := &t.packets[c.next]
		ts := p.ts.Add(c.shift)
		buf = t.render(buf, p, c.k, ids[c.k])
		if err := pw.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(buf), Length: len(buf)}, buf); err != nil {
			return st, err
		}
		if first.IsZero() {
			first = ts
		}
		last = ts
		st.Packets++
		st.Bytes += int64(pcapRecordHead + len(buf))
		c.next++
		if c.next == len(t.packets) {
			heap.Pop(h)
			delete(ids, c.k)
		} else {
			heap.Fix(h, 0)
		}
	}
	st.Sessions = st.Copies * len(t.ids)
	st.Span = last.Sub(first)
	return st, bw.Flush()
}
