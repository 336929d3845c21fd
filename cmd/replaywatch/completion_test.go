package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHelpOnStandardOutput: asked for, every command's help goes to
// standard output with exit 0 (so `replaywatch analyze --help | less`
// works); a usage error goes to standard error with exit 2.
func TestHelpOnStandardOutput(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help", "analyze"}, {"analyze", "--help"}, {"agent", "-h"}, {"schema", "--help"},
		{"schema", "apply", "--help"}, {"completion", "--help"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, nil, &stdout, &stderr)
		if code != exitOK || !strings.Contains(stdout.String(), "Usage") || stderr.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %.60q, stderr %.60q", args, code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"analyze", "--no-such-flag"}, nil, &stdout, &stderr); code != exitError || stdout.Len() != 0 || !strings.Contains(stderr.String(), "no-such-flag") {
		t.Errorf("a bad flag: exit %d, stdout %q", code, stdout.String())
	}
}

// TestCompletion sources the bash script in a real bash and asks it what
// completes: commands, schema verbs, every flag of analyze and agent.
func TestCompletion(t *testing.T) {
	var script bytes.Buffer
	if code := run([]string{"completion", "bash"}, nil, &script, os.Stderr); code != exitOK {
		t.Fatalf("exit %d", code)
	}
	path := filepath.Join(t.TempDir(), "replaywatch.bash")
	os.WriteFile(path, script.Bytes(), 0o644)
	complete := func(words ...string) []string {
		t.Helper()
		line := `source "$1"; shift; COMP_WORDS=(replaywatch "$@"); COMP_CWORD=$#; _replaywatch; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command("bash", append([]string{"-c", line, "bash", path}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	check := func(got []string, want ...string) {
		t.Helper()
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("completions %v lack %s", got, w)
			}
		}
	}
	check(complete("an"), "analyze")
	check(complete("schema", ""), "apply", "status", "print")
	check(complete("analyze", "--shut"), "--shutdown-timeout")
	sets := commandFlags()
	check(complete("analyze", "--"), flagNames(sets["analyze"])...)
	check(complete("agent", "--"), flagNames(sets["agent"])...)
	check(complete("schema", "apply", "--"), flagNames(sets["schema"])...)
	if n := len(flagNames(sets["analyze"])); n < 30 {
		t.Errorf("analyze has only %d flags?", n)
	}

	for _, shell := range []string{"zsh", "fish"} {
		var out bytes.Buffer
		if code := run([]string{"completion", shell}, nil, &out, os.Stderr); code != exitOK || !strings.Contains(out.String(), "shutdown-timeout") {
			t.Errorf("%s: exit %d\n%.300s", shell, code, out.String())
		}
	}
}

// TestParseInterspersed: flags anywhere among the files, "--" ends them.
func TestParseInterspersed(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		format string
		rest   []string
	}{
		{[]string{"a.pcap"}, "text", []string{"a.pcap"}},
		{[]string{"--format", "json", "a.pcap", "b.pcap"}, "json", []string{"a.pcap", "b.pcap"}},
		{[]string{"a.pcap", "--format", "json", "b.pcap"}, "json", []string{"a.pcap", "b.pcap"}},
		{[]string{"a.pcap", "b.pcap", "--format=json"}, "json", []string{"a.pcap", "b.pcap"}},
		{[]string{"-", "--format", "json"}, "json", []string{"-"}},
		{[]string{"a.pcap", "--", "--format", "json"}, "text", []string{"a.pcap", "--format", "json"}},
		{[]string{"--", "-x.pcap"}, "text", []string{"-x.pcap"}},
		{nil, "text", nil},
	} {
		fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
		format := fs.String("format", "text", "")
		rest, err := parseInterspersed(fs, tt.args)
		if err != nil || *format != tt.format || !slices.Equal(rest, tt.rest) {
			t.Errorf("%q: format %q, rest %q, err %v; want %q, %q", tt.args, *format, rest, err, tt.format, tt.rest)
		}
	}
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterspersed(fs, []string{"a.pcap", "--bogus"}); err == nil {
		t.Error("an unknown flag after a file was taken")
	}
}
