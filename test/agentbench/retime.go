package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/replaywatch/replaywatch/test/pcaprec"
)

// runRetime writes a copy of a capture whose packets carry the times that
// send -mbps gives them on the wire: each frame when the frames before it
// are due at the rate, from the capture's first time on. send keeps no
// timing of the capture, and the detector's time windows (a proxy's hop
// within a second, its memory of a second's requests) then see another
// traffic than analyze of the file: analyze of this copy is the agent's
// reference for a paced run.
func runRetime(args []string) error {
	fs := flag.NewFlagSet("retime", flag.ContinueOnError)
	out := fs.String("out", "", "output pcap file (required)")
	mbps := fs.Float64("mbps", 0, "the rate send -mbps paces to (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *mbps <= 0 || fs.NArg() != 1 {
		return errors.New("usage: agentbench retime -mbps N -out FILE CAPTURE.pcap")
	}
	pkts, lt, err := pcaprec.ReadPackets(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%s: %w", fs.Arg(0), err)
	}
	pkts = retime(pkts, *mbps)
	return pcaprec.WritePackets(*out, lt, 65535, pkts)
}

// retime gives the frames (the empty ones dropped, as send does) the times
// they are due at mbps, the first at its own time.
func retime(pkts []pcaprec.Packet, mbps float64) []pcaprec.Packet {
	out := pkts[:0]
	var start time.Time
	sent := 0
	for _, p := range pkts {
		if len(p.Data) == 0 {
			continue
		}
		if len(out) == 0 {
			start = p.CI.Timestamp
		}
		p.CI.Timestamp = start.Add(time.Duration(float64(sent*8) / (mbps * 1e6) * float64(time.Second)))
		sent += len(p.Data)
		out = append(out, p)
	}
	return out
}
