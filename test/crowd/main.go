// Command crowd merges loopback captures into one, every client behind one
// address (damage.Crowd): the probes' way to put many runs of one program
// behind one NAT and see what the detector makes of them.
//
//	go run ./test/crowd -stagger 50ms -out merged.pcap a.pcap b.pcap ...
//
// A capture's implementation (its server's Host in the merged capture) is
// the part of its file name before the first "-", as in the pipeline's
// crowd test.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/replaywatch/replaywatch/test/damage"
	"github.com/replaywatch/replaywatch/test/pcaprec"
)

func main() {
	out := flag.String("out", "", "the merged capture to write")
	stagger := flag.Duration("stagger", 0, "each capture starts this long after the previous one")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: crowd -out merged.pcap [-stagger d] capture.pcap ...")
		os.Exit(2)
	}
	if err := run(*out, *stagger, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "crowd:", err)
		os.Exit(1)
	}
}

func run(out string, stagger time.Duration, paths []string) error {
	var captures []damage.Capture
	for _, p := range paths {
		pkts, lt, err := pcaprec.ReadPackets(p)
		if err != nil {
			return err
		}
		family, _, _ := strings.Cut(filepath.Base(p), "-")
		captures = append(captures, damage.Capture{Packets: pkts, LinkType: lt, Implementation: family})
	}
	merged, err := damage.Crowd(captures, stagger)
	if err != nil {
		return err
	}
	return pcaprec.WritePackets(out, captures[0].LinkType, 65535, merged)
}
