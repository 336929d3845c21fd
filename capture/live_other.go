//go:build !linux

package capture

import (
	"context"
	"errors"

	"github.com/replaywatch/replaywatch/decode"
)

var errLiveLinux = errors.New("capture: live capture needs Linux (AF_PACKET)")

// LiveCapture is a live capture; it needs Linux.
type LiveCapture struct{}

// NewLive checks the config and fails: live capture needs Linux.
func NewLive(cfg LiveConfig, _ func(worker int) decode.StreamFactory) (*LiveCapture, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errLiveLinux
}

// Run fails: live capture needs Linux.
func (c *LiveCapture) Run(context.Context) (LiveStats, error) { return LiveStats{}, errLiveLinux }

// Snapshot returns zero counters.
func (c *LiveCapture) Snapshot() LiveStats { return LiveStats{} }

// KernelDrops returns zero.
func (c *LiveCapture) KernelDrops() uint64 { return 0 }

// Close does nothing.
func (c *LiveCapture) Close() error { return nil }
