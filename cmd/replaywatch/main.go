// Command replaywatch watches MCP Streamable HTTP traffic and proves whether
// every session resume kept its contract.
//
//	replaywatch analyze [flags] FILE.pcap...   offline analysis of captures
//	replaywatch agent [flags]                  live capture on a node
//	replaywatch schema apply|status|print      the ClickHouse schema
//	replaywatch version
//	replaywatch completion bash|zsh|fish       a shell completion script
//	replaywatch help [COMMAND]
//
// Exit codes: 0 nothing found, 1 violations found, 2 error (bad file, bad
// flags, a capture most of which could not be analysed, stopped by a signal,
// rows lost), 3 rows left in the ClickHouse spool, so analyze can gate a CI
// job.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// Exit codes of every subcommand.
const (
	exitOK         = 0
	exitViolations = 1
	exitError      = 2
	// exitUndelivered: no violation and no error, but rows wait in the
	// ClickHouse spool for a later run (the server did not take them).
	exitUndelivered = 3
)

const usage = `replaywatch: find MCP session-resume corruption in HTTP/SSE traffic

Usage:
  replaywatch analyze [flags] FILE...   analyse pcap/pcapng captures ("-" reads standard input)
  replaywatch agent [flags]             capture live on this node (AF_PACKET) and report continuously
  replaywatch schema apply|status|print create, migrate or show the ClickHouse schema
  replaywatch version                   print the version
  replaywatch completion bash|zsh|fish  print a shell completion script
  replaywatch help [COMMAND]            show help

Exit codes: 0 no violations, 1 violations found, 2 error (for analyze, also a
capture most of which could not be analysed; see "replaywatch analyze --help"),
3 rows left in the ClickHouse spool for a later run. "schema status" exits 1
when the database's schema is not this build's version.
Run "replaywatch analyze --help" for the analyze flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is main without the process: tests call it directly.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	switch args[0] {
	case "analyze":
		return runAnalyze(args[1:], stdin, stdout, stderr)
	case "agent":
		return runAgent(args[1:], stdout, stderr)
	case "schema":
		return runSchema(args[1:], stdout, stderr)
	case "completion":
		return runCompletion(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "replaywatch", version())
		return exitOK
	case "help", "-h", "--help", "-help":
		if len(args) > 1 {
			switch args[1] {
			case "analyze":
				return runAnalyze([]string{"--help"}, stdin, stdout, stderr)
			case "agent":
				return runAgent([]string{"--help"}, stdout, stderr)
			case "schema":
				return runSchema([]string{"--help"}, stdout, stderr)
			case "completion":
				return runCompletion([]string{"--help"}, stdout, stderr)
			case "version", "help":
				fmt.Fprint(stdout, usage) // neither takes flags: the usage says all
				return exitOK
			default:
				fmt.Fprintf(stderr, "replaywatch help: unknown command %q\n\n%s", args[1], usage)
				return exitError
			}
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "replaywatch: unknown command %q\n\n%s", args[0], usage)
	return exitError
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
