// Package pipeline wires capture -> decode -> detector -> a sink of
// findings, for every entry point: the offline analysis of capture files
// (Files) and the live agent (Live). The order of the stages, the
// detector's clock, how capture loss reaches the detector and the shutdown
// order are declared here and nowhere else.
package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/capture"
	"github.com/replaywatch/replaywatch/decode"
	"github.com/replaywatch/replaywatch/detector"
	"github.com/replaywatch/replaywatch/sink"
)

// Config configures every stage of an analysis.
type Config struct {
	Capture capture.Config
	Decode  decode.Config
	Detect  detector.Config
	// MemProfile, when set, is a file for a heap profile taken once the
	// input is read, before the detector closes its sessions: it shows the
	// state held for open sessions.
	MemProfile string
}

// DefaultConfig is every stage's documented defaults.
func DefaultConfig() Config {
	return Config{Capture: capture.DefaultConfig(), Decode: decode.DefaultConfig(), Detect: detector.DefaultConfig()}
}

// Files analyses capture files, capture -> decode -> detector -> out, and
// returns the run's summary: the offline pipeline. An error is returned
// only when nothing could be read; a damaged file's readable part is
// analysed and the summary says what was lost.
func Files(ctx context.Context, files []string, cfg Config, out detector.Sink) (*sink.Summary, error) {
	start := time.Now()
	// Size decode by the workers capture will really run (zero means one per
	// core, and there is a cap), so every worker has a factory.
	cfg.Capture = cfg.Capture.WithDefaults()
	det := detector.New(cfg.Detect, withSource(out, detector.SourcePcap))
	var times trafficTimes
	cfg.Decode.ReuseObservations = true // its only consumers, times and det, keep nothing the pipeline reuses
	pipe := decode.NewPipeline(cfg.Decode, cfg.Capture.Workers, func(o *decode.Observation) {
		times.observe(o)
		det.Observe(o)
	})
	cstats, err := capture.ReadFiles(ctx, files, cfg.Capture, func(worker int) decode.StreamFactory {
		return pipe.Factory(worker)
	})
	pipe.Close()
	var problems []string
	var damaged []error
	if err != nil {
		if cstats.Packets == 0 {
			return nil, err
		}
		// Some packets were read before the problem (a truncated file): report
		// what they show and say what went wrong, file by file.
		for _, e := range splitErrors(err) {
			problems = append(problems, e.Error())
			if errors.Is(e, capture.ErrTruncated) || errors.Is(e, capture.ErrCorrupt) {
				damaged = append(damaged, e)
			}
		}
	}
	if cfg.MemProfile != "" {
		// Taken before Close so it shows the state held for open sessions.
		if err := writeHeapProfile(cfg.MemProfile); err != nil {
			problems = append(problems, err.Error())
		}
	}
	det.Close(times.last)
	s := buildSummary(cstats, pipe.Stats(), det.Stats(), problems)
	var damagedNames []string
	s.UnreadFileBytes, damagedNames = unreadBytes(ctx, files, damaged)
	assessCoverage(s, snapLength(files), damagedNames)
	times.report(s)
	s.Elapsed = time.Since(start)
	s.ElapsedSeconds = s.Elapsed.Seconds()
	return s, nil
}

// trafficTimes follows an analysis' observations: last is the detector's
// clock (every observation); first and end span the HTTP messages and
// events seen, the summary's capture times (a gap alone is not traffic
// analysed).
type trafficTimes struct{ first, end, last time.Time }

func (t *trafficTimes) observe(o *decode.Observation) {
	if o.Time.After(t.last) {
		t.last = o.Time
	}
	if o.Kind == decode.KindGap {
		return
	}
	if t.first.IsZero() || o.Time.Before(t.first) {
		t.first = o.Time
	}
	if o.Time.After(t.end) {
		t.end = o.Time
	}
}

// report sets the summary's capture times, when there was traffic.
func (t *trafficTimes) report(s *sink.Summary) {
	if !t.first.IsZero() {
		first, end := t.first.UTC(), t.end.UTC()
		s.CaptureStart, s.CaptureEnd = &first, &end
	}
}

// splitErrors undoes errors.Join: capture joins one error per damaged file.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// buildSummary gathers the three stages' counters into the report's
// summary. Limits are prefixed by the stage that owns them.
func buildSummary(c capture.Stats, d decode.Stats, det detector.Stats, problems []string) *sink.Summary {
	s := &sink.Summary{
		Files: c.Files, Packets: c.Packets, Bytes: c.Bytes, TCPConnections: c.Connections,
		HTTPExchanges: uint64(d.HTTPExchanges), MCPExchanges: uint64(det.MCPExchanges),
		NonMCPExchanges: uint64(det.NonMCPExchanges), SSEEvents: uint64(d.SSEEvents),
		MCPSessions: uint64(det.SessionsSeen), CaptureGaps: c.Gaps, CaptureGapBytes: c.GapBytes,
		PayloadBytes: c.PayloadBytes, SnaplenBytes: c.SnaplenBytes, UndecodablePackets: c.Undecodable, TunnelledPackets: c.Tunnelled,
		InflatedBodies: uint64(d.InflatedBodies), EncodedUnreadBodies: uint64(d.EncodedUnread),
		TLSConnections: uint64(d.TLSConnections), ProxyProtocolHeaders: uint64(d.ProxyHeaders), HTTP2Connections: uint64(d.HTTP2Connections), HTTP2Bytes: uint64(d.HTTP2Bytes),
		UnknownOutcomes: int(det.UnknownOutcomes), HeaderMismatches: int(det.HeaderMismatches),
		ProxyHops: int(det.ProxyHops),
		Resumes:   map[string]int{}, Findings: map[string]int{}, LimitsHit: map[string]int{}, Revisions: map[string]int{},
		Errors: problems,
	}
	for k, n := range det.Resumes {
		s.Resumes[string(k)] = int(n)
	}
	for k, n := range det.Revisions {
		s.Revisions[k] = int(n)
	}
	s.RevisionsByPair = make(map[string]map[string]int, len(det.PairRevisions))
	for pair, revs := range det.PairRevisions {
		m := make(map[string]int, len(revs))
		for k, n := range revs {
			m[k] = int(n)
		}
		s.RevisionsByPair[pair] = m
	}
	for k, n := range det.Violations {
		s.Findings[string(k)] = int(n)
		s.Violations += int(n)
	}
	for _, n := range det.Unverifiable {
		s.Unverifiable += int(n)
	}
	limit := func(name string, n uint64) {
		if n > 0 {
			s.LimitsHit[name] += int(n)
		}
	}
	limit("capture.MaxBufferedPages", c.PageLimitHits)
	limit("capture.MaxConnections", c.Evictions)
	limit("decode.MaxHeaderBytes", uint64(d.HeaderLimitHits))
	limit("decode.MaxSSELineBytes", uint64(d.LineLimitHits))
	limit("decode.MaxEventBytes", uint64(d.EventLimitHits))
	limit("decode.MaxBodyBytes", uint64(d.BodyLimitHits))
	limit("decode.MaxInflatingBodies", uint64(d.InflateLimitHits))
	limit("decode.MaxPipelinedRequests", uint64(d.PipelineOverflows))
	limit("decode.MaxBufferedObservations", uint64(d.LateAfterEarlyRelease))
	limit("decode.MaxBufferedBytes", uint64(d.BufferLimitHits))
	for k, n := range det.LimitsHit {
		limit("detector."+k, uint64(n))
	}
	if c.Undecodable > 0 {
		s.Errors = append(s.Errors, fmt.Sprintf("%d packets could not be decoded", c.Undecodable))
	}
	if d.TLSConnections > 0 && det.MCPExchanges == 0 {
		// A node's capture carries TLS beside plain MCP; one with TLS and
		// no MCP at all is likely MCP over TLS.
		s.Errors = append(s.Errors, fmt.Sprintf("no MCP traffic was recognised, and %d TCP connection(s) were TLS, whose content packets cannot show: "+
			"for MCP over TLS, read the clients' OpenTelemetry spans (analyze --spans)", d.TLSConnections))
	}
	if d.HTTP2Connections > 0 {
		s.Errors = append(s.Errors, fmt.Sprintf("HTTP/2 (h2c) on %d TCP connection(s), which replaywatch does not decode: "+
			"MCP in them is not analysed, and checks between their client address and server are unverifiable while they are open", d.HTTP2Connections))
	}
	s.Errors = append(s.Errors, c.Warnings()...)
	return s
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	return pprof.WriteHeapProfile(f)
}

// MinAnalysedShare is the share of a capture's TCP payload bytes that must
// reach the decoder for the capture to count as analysed. Below it, most of
// the traffic is gone (cut by the snap length, lost in gaps, in the unread
// part of a damaged file): "no violations" would speak for a minority of
// it, so analyze exits 2 unless --allow-partial. The same half applies to
// packets whose headers could not be decoded.
const MinAnalysedShare = 0.5

// fullSnapLength is the snap length from which a capture is taken to keep
// whole packets (tcpdump -s 0 writes 262144, older versions 65535). A
// shorter one is named as a likely cause when bytes were lost.
const fullSnapLength = 65535

// assessCoverage sets the summary's analysed share and, when the capture
// could not be analysed, the reason and what to do. snap is the smallest
// snap length the input files declare (0: unknown); damaged names the
// files whose unread part is in s.UnreadFileBytes.
func assessCoverage(s *sink.Summary, snap int, damaged []string) {
	// Snap-length cuts are counted in the gap bytes too; max guards a
	// capture that counted them only as cuts.
	lostGaps := max(s.CaptureGapBytes, s.SnaplenBytes)
	if total := s.PayloadBytes + lostGaps + s.UnreadFileBytes; total > 0 {
		// HTTP/2 is HTTP the decoder does not read, unlike other protocols
		// (not MCP, so nothing to analyse).
		share := float64(s.PayloadBytes-min(s.HTTP2Bytes, s.PayloadBytes)) / float64(total)
		s.AnalysedShare = &share
	}
	shortSnap := snap > 0 && snap < fullSnapLength
	snapNote := fmt.Sprintf("the capture's snap length is %d bytes, so longer packets were cut", snap)
	var why, advice []string
	if s.AnalysedShare != nil && *s.AnalysedShare < MinAnalysedShare {
		var causes []string
		if s.SnaplenBytes > 0 {
			cut := fmt.Sprintf("%s bytes were cut by the capture's snap length", grouped(s.SnaplenBytes))
			if snap > 0 {
				cut += fmt.Sprintf(" (%d bytes)", snap)
			}
			causes = append(causes, cut)
			advice = append(advice, "recapture with -s 0")
		}
		if g := lostGaps - s.SnaplenBytes; g > 0 {
			lost := fmt.Sprintf("%s bytes were lost in capture gaps", grouped(g))
			switch {
			case s.SnaplenBytes == 0 && shortSnap:
				lost += " (" + snapNote + ")"
				advice = append(advice, "recapture with -s 0")
			case s.LimitsHit["capture.MaxBufferedPages"] > 0:
				lost += " (some forced by the reassembly page limits)"
				advice = append(advice, "raise --max-pages-per-connection and --max-pages-total")
			default:
				advice = append(advice, "recapture without dropped packets (tcpdump -B for a larger buffer)")
			}
			causes = append(causes, lost)
		}
		if s.HTTP2Bytes > 0 {
			causes = append(causes, fmt.Sprintf("%s bytes were HTTP/2 (h2c), which is not decoded", grouped(s.HTTP2Bytes)))
			advice = append(advice, "capture where the MCP traffic speaks HTTP/1.1 (between a proxy and the servers) or analyse the clients' spans (--spans)")
		}
		if s.UnreadFileBytes > 0 {
			causes = append(causes, fmt.Sprintf("%s bytes of %s could not be read past the damage",
				grouped(s.UnreadFileBytes), strings.Join(damaged, ", ")))
			advice = append(advice, "copy or repair the damaged file")
		}
		only := "only " + sink.Percent(*s.AnalysedShare)
		if *s.AnalysedShare > 0 && *s.AnalysedShare < 0.01 {
			only = sink.Percent(*s.AnalysedShare)
		}
		why = append(why, fmt.Sprintf("%s of TCP payload bytes could be analysed: %s", only, strings.Join(causes, ", ")))
	}
	if s.Packets > 0 && float64(s.UndecodablePackets) > float64(s.Packets)*(1-MinAnalysedShare) {
		bad := fmt.Sprintf("%s of %s packets could not be decoded (headers damaged or cut, or a link type not supported)",
			grouped(s.UndecodablePackets), grouped(s.Packets))
		if shortSnap && s.SnaplenBytes == 0 {
			bad += "; " + snapNote
		}
		if shortSnap {
			advice = append(advice, "recapture with -s 0")
		}
		why = append(why, bad)
	}
	if len(why) == 0 {
		return
	}
	if s.MCPExchanges == 0 {
		why = append(why, "no MCP traffic was recognised in what remained")
	}
	reason := strings.Join(why, "; ")
	s.PartialReason = &reason
	slices.Sort(advice)
	s.PartialAdvice = strings.Join(slices.Compact(advice), " and ")
}

// grouped prints n with thousands separators: 12,345.
func grouped(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// snapLength is the smallest snap length the input files declare in their
// headers (pcap file header, first pcapng interface), 0 when none is known
// (standard input and pipes are not read twice).
func snapLength(files []string) int {
	least := 0
	for _, path := range files {
		if capture.ReadOnce(path) {
			continue
		}
		if n := fileSnapLength(path); n > 0 && (least == 0 || n < least) {
			least = n
		}
	}
	return least
}

const (
	ngSectionHeader   = 0x0a0d0d0a
	ngInterface       = 1
	ngByteOrderMagic  = 0x1a2b3c4d
	pcapHeaderBytes   = 24
	pcapRecordHeader  = 16
	ngBlockHeaderSize = 12 // type, length, and the trailing length
)

// ngOrder reads the byte order of a pcapng section from its header block.
func ngOrder(shb []byte) binary.ByteOrder {
	if binary.LittleEndian.Uint32(shb[8:12]) == ngByteOrderMagic {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

func fileSnapLength(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	var h [pcapHeaderBytes]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0
	}
	switch binary.LittleEndian.Uint32(h[0:4]) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		return int(binary.LittleEndian.Uint32(h[16:20]))
	case 0xd4c3b2a1, 0x4d3cb2a1:
		return int(binary.BigEndian.Uint32(h[16:20]))
	case ngSectionHeader:
		order := ngOrder(h[:])
		var idb [16]byte
		if _, err := f.ReadAt(idb[:], int64(order.Uint32(h[4:8]))); err != nil || order.Uint32(idb[0:4]) != ngInterface {
			return 0
		}
		return int(order.Uint32(idb[12:16]))
	}
	return 0
}

// unreadBytes is how many bytes of the damaged input files were never read,
// and those files' names. Each damaged file is read again up to its damage
// (capture.RawRead) to learn where reading stopped; standard input and
// pipes cannot be read again, and a compressed file's offsets are not its
// decompressed ones: they are not counted.
func unreadBytes(ctx context.Context, files []string, damaged []error) (uint64, []string) {
	var total uint64
	var names []string
	for _, e := range damaged {
		for _, path := range files {
			if capture.ReadOnce(path) || capture.Compressed(path) || !strings.HasPrefix(e.Error(), path+": ") {
				continue
			}
			fi, err := os.Stat(path)
			if err != nil {
				break
			}
			st, _ := capture.RawRead(ctx, []string{path})
			size := uint64(fi.Size())
			if read := readOffset(path, st.Packets, st.Bytes); read < size {
				total += size - read
				if !slices.Contains(names, path) {
					names = append(names, path)
				}
			}
			break
		}
	}
	return total, names
}

// readOffset is where a reader stopped in a capture file after packets
// records holding bytes captured bytes: exact for pcap; for pcapng the
// blocks are walked to the one after the last packet read.
func readOffset(path string, packets, bytes uint64) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	size := uint64(fi.Size())
	var h [ngBlockHeaderSize]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return 0
	}
	if binary.LittleEndian.Uint32(h[0:4]) != ngSectionHeader {
		return pcapHeaderBytes + pcapRecordHeader*packets + bytes
	}
	var off, seen uint64
	order := ngOrder(h[:])
	for {
		if _, err := f.ReadAt(h[:], int64(off)); err != nil {
			return off
		}
		typ := binary.LittleEndian.Uint32(h[0:4]) // the section header's type reads the same in both orders
		if typ == ngSectionHeader {
			order = ngOrder(h[:])
		} else {
			typ = order.Uint32(h[0:4])
		}
		n := uint64(order.Uint32(h[4:8]))
		if n < ngBlockHeaderSize || n%4 != 0 || off+n > size {
			return off
		}
		switch typ {
		case 2, 3, 6: // packet, simple packet and enhanced packet blocks
			if seen == packets {
				return off
			}
			seen++
		}
		off += n
	}
}
