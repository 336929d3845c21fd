package capture

import "fmt"

// Stats counts what a run read and every limit or damage it met. Counters are
// totals over all files and workers.
type Stats struct {
	Files       int    // input files opened (standard input counts as one)
	Packets     uint64 // packet records read
	Bytes       uint64 // captured bytes of those packets
	TCP         uint64 // packets decoded down to TCP
	NonTCP      uint64 // decodable packets that carried no TCP (ARP, UDP, ICMP, ...)
	Fragments   uint64 // IP fragments (not reassembled: their TCP is lost)
	Undecodable uint64 // packets whose headers were damaged or of an unsupported link type
	Tunnelled   uint64 // of the TCP ones, packets taken out of a tunnel (VXLAN, Geneve, GRE, ERSPAN II, IP in IP)

	Connections           uint64 // streams handed to a StreamFactory
	ConnectionsWithoutSYN uint64 // of those, connections whose handshake was not captured
	PayloadBytes          uint64 // bytes delivered through TCPStream.Data
	Gaps                  uint64 // TCPStream.Gap calls
	GapBytes              uint64 // bytes those gaps reported lost
	SnaplenBytes          uint64 // payload bytes packets lost to the capture's snap length
	Fins                  uint64 // TCPStream.Fin calls
	Resets                uint64 // connections closed by an RST
	StaleResets           uint64 // RSTs outside their receiver's window (RFC 9293 3.10.7.4), ignored as it ignores them
	IdleFlushes           uint64 // connections closed after IdleTimeout without packets
	Evictions             uint64 // connections closed because MaxConnections was reached
	PageLimitHits         uint64 // gaps forced by a buffered-pages limit rather than by a timeout

	DuplicatePackets uint64 // packets identical to one read just before from another file (dropped)
	// ReplayedConnections counts connections whose handshake came again
	// after they had ended (another capture point's copy of them, read
	// later): the copy's segments were ignored.
	ReplayedConnections uint64
	OverlappingFiles    int // input files whose time range overlaps another's (merged in time order)

	ClockSteps     int // times a file's packet times went back by more than MaxClockStepBack (the rest of the file was shifted)
	TruncatedFiles int // files cut mid-record (the packets before the cut were used)
	CorruptFiles   int // files with a damaged record (the packets before it were used)
}

func (s *Stats) add(o Stats) {
	s.Files += o.Files
	s.Packets += o.Packets
	s.Bytes += o.Bytes
	s.TCP += o.TCP
	s.NonTCP += o.NonTCP
	s.Fragments += o.Fragments
	s.Undecodable += o.Undecodable
	s.Tunnelled += o.Tunnelled
	s.Connections += o.Connections
	s.ConnectionsWithoutSYN += o.ConnectionsWithoutSYN
	s.PayloadBytes += o.PayloadBytes
	s.Gaps += o.Gaps
	s.GapBytes += o.GapBytes
	s.SnaplenBytes += o.SnaplenBytes
	s.Fins += o.Fins
	s.Resets += o.Resets
	s.StaleResets += o.StaleResets
	s.IdleFlushes += o.IdleFlushes
	s.Evictions += o.Evictions
	s.PageLimitHits += o.PageLimitHits
	s.DuplicatePackets += o.DuplicatePackets
	s.ReplayedConnections += o.ReplayedConnections
	s.OverlappingFiles += o.OverlappingFiles
	s.ClockSteps += o.ClockSteps
	s.TruncatedFiles += o.TruncatedFiles
	s.CorruptFiles += o.CorruptFiles
}

// Warnings says, in words for the report, what the capture lost or held
// twice: nothing of it is a finding, but a reader of the findings must know.
func (s Stats) Warnings() []string {
	var out []string
	if s.OverlappingFiles > 0 {
		out = append(out, fmt.Sprintf("%d of the %d input files overlap in time: they were merged packet by packet in time order, %d packets held twice were counted once", s.OverlappingFiles, s.Files, s.DuplicatePackets))
	} else if s.DuplicatePackets > 0 {
		out = append(out, fmt.Sprintf("%d packets were held twice in the input and counted once", s.DuplicatePackets))
	}
	if s.ClockSteps > 0 {
		where := fmt.Sprintf("at %d places", s.ClockSteps)
		if s.ClockSteps == 1 {
			where = "once"
		}
		out = append(out, fmt.Sprintf("the capture's clock went back by more than %v %s (stepped by NTP, or a virtual machine resumed): the packets after each step were shifted to keep capture order", MaxClockStepBack, where))
	}
	if s.ReplayedConnections > 0 {
		out = append(out, fmt.Sprintf("%d TCP connections were read again after they had ended, with the same handshake: another capture point's copy of them (the other end's capture, say), read once", s.ReplayedConnections))
	}
	return out
}
