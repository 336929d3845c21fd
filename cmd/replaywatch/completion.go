package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

const completionUsage = `Usage: replaywatch completion bash|zsh|fish

Prints a shell completion script for replaywatch: its commands, the flags of
each, the schema verbs, and file names for analyze. Load it with, e.g.:

  bash:  source <(replaywatch completion bash)      (or save it under
         /etc/bash_completion.d/replaywatch)
  zsh:   source <(replaywatch completion zsh)
  fish:  replaywatch completion fish > ~/.config/fish/completions/replaywatch.fish
`

// commands are replaywatch's commands, in the order help lists them.
var commands = []string{"analyze", "agent", "schema", "version", "help", "completion"}

var schemaVerbs = []string{"apply", "status", "print"}

// commandFlags returns each command's flag set, as the command registers it,
// so completion never drifts from the flags.
func commandFlags() map[string]*flag.FlagSet {
	sets := map[string]*flag.FlagSet{}
	var a analyzeConfig
	sets["analyze"] = newFlagSet()
	a.register(sets["analyze"])
	var g agentConfig
	sets["agent"] = flag.NewFlagSet("agent", flag.ContinueOnError)
	g.register(sets["agent"])
	var c clickhouseFlags
	sets["schema"] = flag.NewFlagSet("schema", flag.ContinueOnError)
	registerSchemaFlags(sets["schema"], &c, new(string), new(int))
	return sets
}

func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	slices.Sort(names)
	return names
}

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if helpWanted(args) {
		fmt.Fprint(stdout, completionUsage)
		return exitOK
	}
	if len(args) != 1 {
		fmt.Fprint(stderr, completionUsage)
		return exitError
	}
	sets := commandFlags()
	switch args[0] {
	case "bash":
		writeBash(stdout, sets)
	case "zsh":
		// zsh runs bash completion functions through bashcompinit.
		fmt.Fprintln(stdout, "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit")
		writeBash(stdout, sets)
	case "fish":
		writeFish(stdout, sets)
	default:
		fmt.Fprintf(stderr, "replaywatch completion: unknown shell %q\n\n%s", args[0], completionUsage)
		return exitError
	}
	return exitOK
}

func writeBash(w io.Writer, sets map[string]*flag.FlagSet) {
	fmt.Fprintf(w, `# replaywatch completion for bash (replaywatch completion bash)
_replaywatch() {
	local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} flags=
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	case $cmd in
`, strings.Join(commands, " "))
	for _, cmd := range []string{"analyze", "agent", "schema"} {
		fmt.Fprintf(w, "\t%s) flags=%q ;;\n", cmd, strings.Join(flagNames(sets[cmd]), " "))
	}
	fmt.Fprintf(w, `	help) COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
	completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); return ;;
	*) return ;;
	esac
	if [ "$cmd" = schema ] && [ "$COMP_CWORD" -eq 2 ]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
	elif [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	else
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -o default -F _replaywatch replaywatch
`, strings.Join(commands, " "), strings.Join(schemaVerbs, " "))
}

func writeFish(w io.Writer, sets map[string]*flag.FlagSet) {
	fmt.Fprintln(w, "# replaywatch completion for fish (replaywatch completion fish)")
	fmt.Fprintf(w, "complete -c replaywatch -f -n __fish_use_subcommand -a %q\n", strings.Join(commands, " "))
	fmt.Fprintf(w, "complete -c replaywatch -f -n '__fish_seen_subcommand_from schema' -a %q\n", strings.Join(schemaVerbs, " "))
	fmt.Fprintln(w, "complete -c replaywatch -f -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'")
	for _, cmd := range []string{"analyze", "agent", "schema"} {
		sets[cmd].VisitAll(func(f *flag.Flag) {
			usage, _ := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "complete -c replaywatch -n '__fish_seen_subcommand_from %s' -l %s -d %s\n", cmd, f.Name, fishQuote(firstSentence(usage)))
		})
	}
	fmt.Fprintln(w, "complete -c replaywatch -n '__fish_seen_subcommand_from analyze' -F")
}

func firstSentence(s string) string {
	if i := strings.IndexAny(s, ";("); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// parseInterspersed parses fs's flags wherever they are among args, as
// "analyze capture.pcap --format json" is typed, and returns the other
// arguments in order. Everything after "--" is an argument.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if ended := len(args) - len(left); ended > 0 && args[ended-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

// helpWanted reports whether args ask for help: it then goes to standard
// output with exit 0, as other command-line tools do, and an error's usage
// to standard error.
func helpWanted(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}
