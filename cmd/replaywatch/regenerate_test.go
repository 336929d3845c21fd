package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/replaywatch/replaywatch/test/fixturespec"
	"github.com/replaywatch/replaywatch/test/pcaprec"
	"github.com/replaywatch/replaywatch/test/testenv"
)

// TestRegeneratedFixtures records every fixture afresh from the real SDKs
// (go-sdk in-process, the TypeScript SDK under node) and checks each new
// capture against the spec written with it. The committed captures prove
// the pipeline; this proves the generator still produces what the specs
// claim on this machine, with these SDK versions, so nobody depends on
// captures that can no longer be made.
func TestRegeneratedFixtures(t *testing.T) {
	if testing.Short() {
		t.Skip("records real SDK traffic for about a minute; skipped with -short")
	}
	if _, err := exec.LookPath("node"); err != nil {
		if testenv.InCI() {
			t.Fatal("node is needed to record the TypeScript SDK fixtures")
		}
		t.Skip("node not installed")
	}
	dir := t.TempDir()
	// While the SDKs talk, the agent captures the same traffic live: the
	// proxies listen on agentProxyHost, so a filter keeps only the client-side
	// leg (the proxy-to-backend leg carries the same bytes again).
	agent := startLiveAgent(t, "host "+agentProxyHost)
	cmd := exec.Command("go", "run", "./test/fixturegen", "-out", dir, "-sample", "")
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), pcaprec.ProxyHostEnv+"="+agentProxyHost)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fixturegen: %v\n%s", err, out)
	}
	if fresh, committed := fixturespec.Count(t, dir), fixturespec.Count(t, fixtureDir); fresh != committed {
		t.Errorf("generator wrote %d specs, %d are committed", fresh, committed)
	}
	t.Run("specs", func(t *testing.T) { runSpecs(t, dir) })
	t.Run("agent_matches_analyze", func(t *testing.T) {
		if agent == nil {
			t.Skip("live capture needs root")
		}
		compareLiveWithOffline(t, agent.stop(t), dir)
	})
}
