package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/suggest"
	"github.com/ringlimit/ringlimit/internal/textwrap"
)

// command is one command of the tool, as its help shows it.
type command struct {
	name     string // "check", "override add"
	synopsis string // what follows "ringlimit " on the usage line
	summary  string
	// offline: reads files, not a node, so takes none of the node flags
	// (--addr, --token, --token-file, --ca, --timeout).
	offline bool
}

// commands are the tool's commands in the order the help lists them; a
// group (override, policy, rls) is the first word of several.
var commands = []command{
	{"check", checkSynopsis, "POST /v1/check: spend --cost tokens of a key, by an inline limit or by the node's policy; exit 0 when allowed, 1 when refused", false},
	{"peek", peekSynopsis, "POST /v1/check with peek: what check would answer now, spending nothing; exit 0 when it would be allowed, 1 when refused", false},
	{"reset", resetSynopsis, "POST /v1/reset: put a key (or every layer of a policy request) back to full on every node (admin token: --token, --token-file or $RINGLIMIT_TOKEN); audited", false},
	{"settle", "settle ID COST", "POST /v1/settle: make the spend of the reservation ID (from check --reserve) exactly COST tokens; exit 0 when settled, 4 when not found or already settled", false},
	{"acquire", acquireSynopsis, "POST /v1/acquire: take one slot of an in-flight (concurrency) limit, by an inline limit or by the node's policy, and print its lease; exit 0 when held, 1 when full", false},
	{"renew", renewSynopsis, "POST /v1/renew: extend a lease (from acquire) by --ttl from now; exit 0 when renewed, 4 when LEASE_NOT_FOUND (expired or released)", false},
	{"release", releaseSynopsis, "POST /v1/release: give a lease's slot back with the outcome and latency of its work; idempotent (released false the second time)", false},
	{"report", reportSynopsis, "POST /v1/report: tell a policy request's adaptive layers how one request ended and how long it took", false},
	{"owner", "owner KEY", "GET /v1/owner: the node that owns KEY", false},
	{"status", "status", "GET /v1/cluster and /v1/ring: members, ring shares, quorum and replication", false},
	{"override add", overrideAddSynopsis, "POST /v1/overrides: give a caller a tier or a limit until it expires (admin token)", false},
	{"override list", "override list", "GET /v1/overrides: the overrides in force", false},
	{"override revoke", "override revoke ID", "DELETE /v1/overrides/ID: end an override (admin token); ID is the one add printed", false},
	{"policy validate", "policy validate FILE", "check a policy file offline, as a node loads it; exit 0 when valid, 1 with FILE:LINE: error when not", true},
	{"rls validate", "rls validate PATH", "check an envoyproxy/ratelimit file, or a directory of them, offline, as a node loads --rls-config; exit 0 or 1", true},
	{"version", "version", "print the version of this tool", true},
	{"help", "help [COMMAND]", "print the help of the tool, or of COMMAND", true},
}

// lookup returns the command named name.
func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// group returns the commands whose first word is word: several for a
// group (override), none for an unknown word.
func group(word string) []command {
	var cs []command
	for _, c := range commands {
		if first, _, _ := strings.Cut(c.name, " "); first == word {
			cs = append(cs, c)
		}
	}
	return cs
}

// words are the first words of the commands, each once.
func words() []string {
	var ws []string
	for _, c := range commands {
		first, _, _ := strings.Cut(c.name, " ")
		if len(ws) == 0 || ws[len(ws)-1] != first {
			ws = append(ws, first)
		}
	}
	return ws
}

// nodeFlags are the help lines of the flags of the commands that call a
// node; jsonFlag the one every command takes. Their defaults are
// written out: the flag sets' defaults hold the environment's values.
const (
	nodeFlags = `  --addr URL          the node's HTTP address: host:port, or an http:// or
                      https:// URL
                      (default: $RINGLIMIT_ADDR, else http://127.0.0.1:8080)
  --token TOKEN       admin bearer token (default: $RINGLIMIT_TOKEN, else none)
  --token-file FILE   file of admin tokens, one "name:token" or bare token a line;
                      the first is used (default: none)
  --ca FILE           PEM CA certificates to verify an https node with
                      (default: the system's)
  --timeout DURATION  deadline of each request (default: 5s)
`
	jsonFlag = `  --json              machine output: the API's JSON answer, or the documented
                      struct of the command (default: false)
`
)

const helpHead = `ringlimit operates a ringlimit cluster from the command line: checks, key
owners, the cluster's status and incident overrides over a node's HTTP API,
and offline validation of policy and Envoy RLS files.

Usage: ringlimit [flags] COMMAND [flags] [args]
`

const helpTail = `
Exit status: 0 ok (check: allowed); 1 check refused, or the file does not
validate; 2 usage error; 3 the node could not be reached or answered 5xx;
4 the node refused the request (4xx), its code and message printed as is.
`

// printHelp writes the tool's help to w.
func printHelp(w io.Writer) {
	io.WriteString(w, helpHead)
	io.WriteString(w, "\nCommands:\n")
	for _, c := range commands {
		textwrap.Write(w, fmt.Sprintf("  %-16s ", c.name), firstClause(c.summary), strings.Repeat(" ", 19), 80)
	}
	io.WriteString(w, "\nFlags of the commands that call a node, before or after COMMAND:\n")
	io.WriteString(w, nodeFlags)
	io.WriteString(w, "\nFlags of every command:\n")
	io.WriteString(w, jsonFlag)
	io.WriteString(w, "\nRun 'ringlimit help COMMAND' (or ringlimit COMMAND --help) for its usage and flags.\n")
	io.WriteString(w, helpTail)
}

// firstClause is s up to its first "; ": a command's summary in the list
// of commands.
func firstClause(s string) string {
	if i := strings.Index(s, "; "); i >= 0 {
		s = s[:i]
	}
	return s
}

// printGroupHelp writes the help of a group of commands (override) to w.
func printGroupHelp(w io.Writer, word string, cs []command) {
	fmt.Fprintf(w, "Usage: ringlimit %s COMMAND [flags] [args]\n\nCommands:\n", word)
	for _, c := range cs {
		textwrap.Write(w, fmt.Sprintf("  %-16s ", c.name), firstClause(c.summary), strings.Repeat(" ", 19), 80)
	}
	fmt.Fprintf(w, "\nRun 'ringlimit help %s' for its usage and flags.\n", cs[0].name)
}

// printCommandHelp writes the help of command c to w: its usage, what it
// does, and the flags it reads, fs's own first.
func printCommandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: ringlimit %s\n\n", c.synopsis)
	textwrap.Write(w, "", strings.ToUpper(c.summary[:1])+c.summary[1:]+".", "", 78)
	own := false
	fs.VisitAll(func(f *flag.Flag) {
		if isGlobal(f.Name) {
			return
		}
		if !own {
			io.WriteString(w, "\nFlags:\n")
			own = true
		}
		left := "--" + f.Name
		if hint, ok := flagHints[f.Name]; ok {
			left += " " + hint
		} else if hint, _ := flag.UnquoteUsage(f); hint != "" {
			left += " " + strings.ToUpper(hint)
		}
		text := f.Usage
		if !strings.Contains(text, "default") && !strings.Contains(text, "required") { // else the text says
			def := f.DefValue
			if def == "" {
				def = "none"
			}
			text += fmt.Sprintf(" (default: %s)", def)
		}
		first := fmt.Sprintf("  %-19s ", left)
		if len(first) > 22 {
			fmt.Fprintln(w, strings.TrimRight(first, " "))
			first = ""
		}
		textwrap.Write(w, first, text, strings.Repeat(" ", 22), 80)
	})
	if !c.offline {
		io.WriteString(w, "\nNode flags (also before the command):\n")
		io.WriteString(w, nodeFlags)
	}
	io.WriteString(w, "\nOutput:\n")
	io.WriteString(w, jsonFlag)
}

// flagHints name what the commands' flags take, as their synopses do.
var flagHints = map[string]string{
	"limit": "N", "per": "DUR", "calendar": "UNIT", "timezone": "ZONE", "week-start": "DAY", "burst": "N", "cost": "N", "algorithm": "ALG", "failure-mode": "MODE",
	"policy": "NAME", "api-key": "KEY", "user": "USER", "ip": "IP", "route": "PATH", "tier": "TIER",
	"reason": "TEXT", "expires-in": "DUR", "reserve-ttl": "DUR",
	"ttl": "DUR", "request-id": "ID", "outcome": "OUTCOME", "latency": "DUR",
}

// isGlobal reports whether name is one of globals' flags.
func isGlobal(name string) bool {
	switch name {
	case "addr", "token", "token-file", "ca", "timeout", "json":
		return true
	}
	return false
}

// help runs ringlimit help [COMMAND...].
func (e *env) help(args []string) error {
	if len(args) == 0 {
		printHelp(e.stdout)
		return nil
	}
	name := strings.Join(args, " ")
	if c, ok := lookup(name); ok {
		if c.name == "help" {
			printHelp(e.stdout)
			return nil
		}
		// A command prints its help on --help before it reads anything.
		return e.dispatch(args[0], append(args[1:len(args):len(args)], "--help"))
	}
	if cs := group(args[0]); len(cs) > 0 && len(args) == 1 {
		printGroupHelp(e.stdout, args[0], cs)
		return nil
	}
	return unknownCommand("help: ", name)
}

// unknownCommand is the usage error for name, a command there is not.
func unknownCommand(prefix, name string) error {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	if s, ok := suggest.Closest(name, append(words(), names...)); ok {
		return usagef("%sunknown command %q (did you mean %s?)", prefix, name, s)
	}
	return usagef("%sunknown command %q (commands: %s)", prefix, name, strings.Join(words(), ", "))
}

// unknownSub is the usage error for sub, given to the group word.
func unknownSub(word, sub string) error {
	var subs []string
	for _, c := range group(word) {
		_, s, _ := strings.Cut(c.name, " ")
		subs = append(subs, s)
	}
	if s, ok := suggest.Closest(sub, subs); ok {
		return usagef("%s: unknown command %q (did you mean %s %s?)", word, sub, word, s)
	}
	return usagef("%s: unknown command %q: want %s", word, sub, strings.Join(subs, ", "))
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

// flagFailure matches the flag package's error for a value that does not
// parse.
var flagFailure = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// flagError is err, what the flag package found wrong with the flags of
// command cmd (fs), as a usage error in one line: an unknown flag names
// the closest known one, a value that does not parse what the flag takes.
func flagError(cmd string, fs *flag.FlagSet, err error) error {
	msg := err.Error()
	prefix := ""
	if cmd != "" {
		prefix = cmd + ": "
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if c, _ := lookup(cmd); c.offline && isGlobal(name) {
			return &usageError{fmt.Errorf("%s--%s is for the commands that call a node; %s reads no node", prefix, name, cmd), cmd}
		}
		var known []string
		fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
		if s, ok := suggest.Closest(name, known); ok {
			return &usageError{fmt.Errorf("%sunknown flag --%s (did you mean --%s?)", prefix, name, s), cmd}
		}
		return &usageError{fmt.Errorf("%sunknown flag --%s", prefix, name), cmd}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return &usageError{fmt.Errorf("%s--%s needs a value", prefix, name), cmd}
	}
	if m := flagFailure.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			v, _ := strconv.Unquote(m[1])
			what := "not valid: " + m[3]
			if g, ok := f.Value.(flag.Getter); ok {
				switch g.Get().(type) {
				case time.Duration:
					what = "not a duration (try 5s, 500ms or 1m)"
					if _, err := strconv.ParseFloat(v, 64); err == nil {
						what = fmt.Sprintf("not a duration (try %ss)", v)
					}
				case int, int64:
					what = "not a whole number"
				case bool:
					what = "not a boolean (try true or false)"
				}
			}
			return &usageError{fmt.Errorf("%s--%s: %q is %s", prefix, f.Name, v, what), cmd}
		}
	}
	return &usageError{fmt.Errorf("%s%s", prefix, msg), cmd}
}
