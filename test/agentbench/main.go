// Command agentbench is the helper of scripts/bench-agent.sh, the live
// capture benchmark of replaywatch agent. It has five subcommands:
//
//	agentbench weave -out FILE [-base BASE.pcap] FIXTURE.pcap...
//	agentbench compare -analyze ANALYZE.jsonl -agent AGENT.jsonl
//	agentbench watch -url http://127.0.0.1:19464/metrics -pid PID -done FILE -out FILE
//	agentbench send -i IFACE [-mbps N] [-batch N] FILE.pcap
//	agentbench retime -mbps N -out FILE CAPTURE.pcap
//
// weave builds a capture that has violations in it. Each fixture capture
// (recorded on loopback, 127.0.0.1 on both sides) gets an address of its
// own, 172.31.0.K for the K-th fixture, on both sides, with the IPv4 and TCP
// checksums recomputed, so that no two fixtures share a connection or a
// client address (the detector links sessions by client address). Without
// -base the fixtures follow each other, one second apart. With -base they
// are spread evenly over the base capture's time span and merged into it by
// timestamp: the base's packets are copied unchanged. A fixture whose
// content is identical to an earlier one is skipped (the sample
// rolling-deploy.pcap is also a fixture).
//
// compare reads the JSON Lines of replaywatch analyze --format json and of
// replaywatch agent --format json on the same traffic, and compares them
// record by record: violations, unknown outcomes and unverifiable checks by
// id, resume attempts by id and outcome, sessions by session id and their
// counts. It prints a table per record type, up to -show differences of each
// kind, and two verdict lines:
//
//	findings (violations, unknown outcomes): MATCH
//	all records (+ resumes, sessions, unverifiable): DIFF
//
// The exit status is 0 whatever the verdict (2 on an error), so a script
// reads the verdict from the output.
//
// watch follows a running agent while tcpreplay sends: it scrapes /metrics
// every -interval (one process, so polling costs the machine little, which
// curl in a loop would not) until the -done file exists and the capture,
// decode and detector counters have not moved for -settle. It prints, one
// "name value" per line: t_first and t_last, the Unix times (seconds) of the
// first and the last scrape at which the capture's packet counter had moved
// (less half an interval: the middle of the interval in which it moved),
// cpu_start and cpu_end, the agent's user + system CPU seconds when watch
// started and when it ended (/proc/PID/stat), sys_start and sys_end, the
// system part of those, hwm_kib, its peak RSS (VmHWM), and max_gap, the
// longest time beyond -interval between two scrapes while the sender ran: a
// poller that sleeps 100 ms and then could not run for a second says the
// machine's cores were taken by other work. The last scrape is written to
// -out.
//
// send replays a capture onto an interface like tcpreplay -K, many frames
// per system call (see runSend).
//
// retime writes the capture with the times send -mbps gives its frames
// (see runRetime): what analyze must be given to see what the agent sees.
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/replaywatch/replaywatch/test/inetsum"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: agentbench weave|compare|watch|send|retime [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "weave":
		err = runWeave(os.Args[2:], os.Stdout)
	case "compare":
		err = runCompare(os.Args[2:], os.Stdout)
	case "watch":
		err = runWatch(os.Args[2:], os.Stdout)
	case "send":
		err = runSend(os.Args[2:], os.Stdout)
	case "retime":
		err = runRetime(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (want weave, compare, watch, send or retime)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		os.Exit(2)
	}
}

// ---- weave ----

type packet struct {
	ci   gopacket.CaptureInfo
	data []byte
}

const (
	ethHeaderLen = 14
	ipProtoTCP   = 6
)

var loopbackIP = [4]byte{127, 0, 0, 1}

// fixtureIP is the address the k-th fixture (from 1) gets on both sides.
func fixtureIP(k int) [4]byte {
	return [4]byte{172, 31, byte(k >> 8), byte(k)}
}

func runWeave(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("weave", flag.ContinueOnError)
	out := fs.String("out", "", "output pcap file (required)")
	base := fs.String("base", "", "capture to weave the fixtures into (default: fixtures only, one after another)")
	gap := fs.Duration("gap", time.Second, "without -base: time between one fixture's last packet and the next one's first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() == 0 {
		return errors.New("weave: -out and at least one fixture are required")
	}
	var fixtures [][]packet
	seen := map[[32]byte]string{}
	for _, path := range fs.Args() {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if first, ok := seen[sum]; ok {
			fmt.Fprintf(stdout, "weave: %s skipped: the same bytes as %s\n", path, first)
			continue
		}
		seen[sum] = path
		pkts, err := readAll(path)
		if err != nil {
			return err
		}
		if len(pkts) == 0 {
			continue
		}
		k := len(fixtures) + 1
		for i := range pkts {
			if err := rewriteLoopback(pkts[i].data, fixtureIP(k)); err != nil {
				return fmt.Errorf("%s packet %d: %v", path, i+1, err)
			}
		}
		fixtures = append(fixtures, pkts)
	}
	if len(fixtures) == 0 {
		return errors.New("weave: no fixture packets")
	}

	// Where each fixture starts.
	var starts []time.Time
	var baseFirst, baseLast time.Time
	var basePackets int
	if *base != "" {
		var err error
		baseFirst, baseLast, basePackets, err = span(*base)
		if err != nil {
			return err
		}
		d := baseLast.Sub(baseFirst)
		for i := range fixtures {
			starts = append(starts, baseFirst.Add(d*time.Duration(i+1)/time.Duration(len(fixtures)+1)))
		}
	} else {
		t := fixtures[0][0].ci.Timestamp
		for _, f := range fixtures {
			starts = append(starts, t)
			t = t.Add(f[len(f)-1].ci.Timestamp.Sub(f[0].ci.Timestamp) + *gap)
		}
	}
	var woven []packet
	for i, f := range fixtures {
		shift := starts[i].Sub(f[0].ci.Timestamp)
		for _, p := range f {
			p.ci.Timestamp = p.ci.Timestamp.Add(shift)
			woven = append(woven, p)
		}
	}
	sort.SliceStable(woven, func(i, j int) bool { return woven[i].ci.Timestamp.Before(woven[j].ci.Timestamp) })

	tmp := *out + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	bw := bufio.NewWriterSize(f, 1<<20)
	w := pcapgo.NewWriterNanos(bw)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return err
	}
	written := 0
	emit := func(p packet) error {
		written++
		return w.WritePacket(p.ci, p.data)
	}
	if *base != "" {
		bf, err := os.Open(*base)
		if err != nil {
			return err
		}
		defer bf.Close()
		r, err := pcapgo.NewReader(bufio.NewReaderSize(bf, 1<<20))
		if err != nil {
			return fmt.Errorf("%s: %v", *base, err)
		}
		if r.LinkType() != layers.LinkTypeEthernet {
			return fmt.Errorf("%s: link type %s, want Ethernet", *base, r.LinkType())
		}
		for {
			data, ci, err := r.ReadPacketData()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %v", *base, err)
			}
			for len(woven) > 0 && woven[0].ci.Timestamp.Before(ci.Timestamp) {
				if err := emit(woven[0]); err != nil {
					return err
				}
				woven = woven[1:]
			}
			if err := emit(packet{ci, data}); err != nil {
				return err
			}
		}
	}
	for _, p := range woven {
		if err := emit(p); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	n := 0
	for _, f := range fixtures {
		n += len(f)
	}
	fmt.Fprintf(stdout, "weave: %d fixtures (%d packets, addresses 172.31.0.1 to %s)", len(fixtures), n,
		fmtIP(fixtureIP(len(fixtures))))
	if *base != "" {
		fmt.Fprintf(stdout, " spread over %s of %s (%d packets)", baseLast.Sub(baseFirst).Round(time.Millisecond), *base, basePackets)
	}
	fmt.Fprintf(stdout, ": %d packets in %s\n", written, *out)
	return nil
}

func fmtIP(a [4]byte) string { return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], a[2], a[3]) }

func readAll(path string) ([]packet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if r.LinkType() != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("%s: link type %s, want Ethernet", path, r.LinkType())
	}
	var out []packet
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		out = append(out, packet{ci, data})
	}
}

// span reads a capture's first and last timestamps and counts its packets.
func span(path string) (first, last time.Time, n int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return first, last, 0, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return first, last, 0, fmt.Errorf("%s: %v", path, err)
	}
	for {
		_, ci, err := r.ZeroCopyReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return first, last, n, fmt.Errorf("%s: %v", path, err)
		}
		if n == 0 {
			first = ci.Timestamp
		}
		last = ci.Timestamp
		n++
	}
	if n == 0 {
		return first, last, 0, fmt.Errorf("%s: no packets", path)
	}
	return first, last, n, nil
}

// rewriteLoopback replaces 127.0.0.1 by addr in an Ethernet/IPv4 frame's
// source and destination and recomputes the IPv4 and TCP checksums. Other
// frames are left alone; a TCP segment cut short by the snap length is an
// error (its checksum could not be recomputed).
func rewriteLoopback(frame []byte, addr [4]byte) error {
	if len(frame) < ethHeaderLen+20 || binary.BigEndian.Uint16(frame[12:14]) != 0x0800 {
		return nil
	}
	ip := frame[ethHeaderLen:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ip[0]>>4 != 4 || ihl < 20 || total < ihl || len(ip) < total {
		return fmt.Errorf("IPv4 header damaged or packet cut short (%d of %d bytes)", len(ip), total)
	}
	ip = ip[:total]
	changed := false
	for _, off := range []int{12, 16} {
		if [4]byte(ip[off:off+4]) == loopbackIP {
			copy(ip[off:off+4], addr[:])
			changed = true
		}
	}
	if !changed {
		return nil
	}
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:12], inetsum.Checksum(0, ip[:ihl]))
	fragment := binary.BigEndian.Uint16(ip[6:8])&0x3fff != 0
	if ip[9] == ipProtoTCP && !fragment && total-ihl >= 20 {
		tcp := ip[ihl:]
		tcp[16], tcp[17] = 0, 0
		binary.BigEndian.PutUint16(tcp[16:18], inetsum.TCP(ip[:ihl], tcp))
	}
	return nil
}

// ---- compare ----

// recordKinds are the record types compared, in the order printed, with the
// field that identifies a record and the fields compared between the two
// sides' records of the same identity.
var recordKinds = []struct {
	typ     string
	key     string
	fields  []string
	finding bool // part of the "findings" verdict
}{
	{"violation", "id", []string{"kind", "severity", "session_id"}, true},
	{"unknown_outcome", "id", []string{"reason", "reissued_in_session"}, true},
	{"unverifiable", "id", []string{"check", "reason"}, false},
	{"resume", "id", []string{"outcome", "status", "replayed", "violation_ids"}, false},
	{"session", "session_id", []string{"ended", "start_seen", "requests", "events", "streams", "resumes", "violations",
		"previous_session", "link_confidence"}, false},
}

// record is one line, reduced to its identity and compared fields.
type record struct {
	key    string
	fields string // "name=value ..." of the compared fields
	desc   string // a short description for the diff
}

func runCompare(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	analyzePath := fs.String("analyze", "", "replaywatch analyze --format json output (required)")
	agentPath := fs.String("agent", "", "replaywatch agent --format json output (required)")
	show := fs.Int("show", 5, "differences shown per record type and kind of difference")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *analyzePath == "" || *agentPath == "" {
		return errors.New("compare: -analyze and -agent are required")
	}
	a, err := readRecords(*analyzePath)
	if err != nil {
		return err
	}
	b, err := readRecords(*agentPath)
	if err != nil {
		return err
	}
	res := compare(a, b)
	res.print(stdout, *show)
	return nil
}

// readRecords reads JSON Lines into records per type; a type's records
// are a multiset: a key seen twice is kept twice ("key#2").
func readRecords(path string) (map[string][]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]record{}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		typ, _ := m["type"].(string)
		for _, k := range recordKinds {
			if k.typ != typ {
				continue
			}
			key := str(m[k.key])
			seen[typ+"\x00"+key]++
			if n := seen[typ+"\x00"+key]; n > 1 {
				key = fmt.Sprintf("%s#%d", key, n)
			}
			var fields []string
			for _, f := range k.fields {
				fields = append(fields, f+"="+str(m[f]))
			}
			desc := fmt.Sprintf("%s %s", typ, key)
			for _, f := range []string{"kind", "outcome", "reason", "ended"} {
				if v, ok := m[f]; ok && v != nil {
					desc += fmt.Sprintf(" %s=%s", f, str(v))
					break
				}
			}
			if s := str(m["session_id"]); s != "" && k.key != "session_id" {
				desc += " session=" + s
			}
			if c := str(m["client"]); c != "" {
				desc += " client=" + c
			}
			out[typ] = append(out[typ], record{key: key, fields: strings.Join(fields, " "), desc: desc})
		}
	}
	return out, sc.Err()
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case float64:
		return fmt.Sprintf("%g", x)
	case bool:
		return fmt.Sprintf("%t", x)
	case []any:
		s := make([]string, len(x))
		for i, e := range x {
			s[i] = str(e)
		}
		slices.Sort(s)
		return strings.Join(s, ",")
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

type typeResult struct {
	typ            string
	finding        bool
	analyze, agent int
	same           int
	onlyAnalyze    []record
	onlyAgent      []record
	differ         [][2]record
}

func (t typeResult) match() bool {
	return len(t.onlyAnalyze) == 0 && len(t.onlyAgent) == 0 && len(t.differ) == 0
}

type compareResult []typeResult

func compare(a, b map[string][]record) compareResult {
	var res compareResult
	for _, k := range recordKinds {
		t := typeResult{typ: k.typ, finding: k.finding, analyze: len(a[k.typ]), agent: len(b[k.typ])}
		bm := map[string]record{}
		for _, r := range b[k.typ] {
			bm[r.key] = r
		}
		for _, r := range a[k.typ] {
			o, ok := bm[r.key]
			switch {
			case !ok:
				t.onlyAnalyze = append(t.onlyAnalyze, r)
			case o.fields != r.fields:
				t.differ = append(t.differ, [2]record{r, o})
			default:
				t.same++
			}
			delete(bm, r.key)
		}
		for _, r := range b[k.typ] {
			if _, ok := bm[r.key]; ok {
				t.onlyAgent = append(t.onlyAgent, r)
			}
		}
		res = append(res, t)
	}
	return res
}

func (res compareResult) print(w io.Writer, show int) {
	fmt.Fprintf(w, "%-16s %8s %8s %8s %8s %8s %9s\n", "record", "analyze", "agent", "same", "differ", "analyze+", "agent+")
	for _, t := range res {
		fmt.Fprintf(w, "%-16s %8d %8d %8d %8d %8d %9d\n", t.typ, t.analyze, t.agent, t.same, len(t.differ), len(t.onlyAnalyze), len(t.onlyAgent))
	}
	fmt.Fprintln(w, "(analyze+: only analyze has it; agent+: only the agent has it; differ: both, with other values)")
	for _, t := range res {
		for i, r := range t.onlyAnalyze {
			if i == show {
				fmt.Fprintf(w, "  ... %d more only in analyze\n", len(t.onlyAnalyze)-show)
				break
			}
			fmt.Fprintf(w, "  only in analyze: %s\n", r.desc)
		}
		for i, r := range t.onlyAgent {
			if i == show {
				fmt.Fprintf(w, "  ... %d more only in the agent\n", len(t.onlyAgent)-show)
				break
			}
			fmt.Fprintf(w, "  only in agent:   %s\n", r.desc)
		}
		for i, d := range t.differ {
			if i == show {
				fmt.Fprintf(w, "  ... %d more differ\n", len(t.differ)-show)
				break
			}
			fmt.Fprintf(w, "  differs: %s\n    analyze: %s\n    agent:   %s\n", d[0].desc, d[0].fields, d[1].fields)
		}
	}
	findings, all := true, true
	for _, t := range res {
		if !t.match() {
			all = false
			if t.finding {
				findings = false
			}
		}
	}
	fmt.Fprintf(w, "findings (violations, unknown outcomes): %s\n", verdict(findings))
	fmt.Fprintf(w, "all records (+ resumes, sessions, unverifiable): %s\n", verdict(all))
}

func verdict(ok bool) string {
	if ok {
		return "MATCH"
	}
	return "DIFF"
}
