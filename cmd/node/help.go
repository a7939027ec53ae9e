package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/suggest"
	"github.com/ringlimit/ringlimit/internal/textwrap"
)

// flagGroups places every flag in one topic of --help, in the order shown;
// a name no flag has is skipped. A flag registered in parseConfig and
// missing here fails TestEveryFlagHasAGroup.
var flagGroups = []struct {
	title string
	flags []string
}{
	{"Listeners", []string{"http", "grpc", "peer", "gossip", "advertise-host", "advertise-http", "advertise-grpc", "advertise-peer", "advertise-gossip"}},
	{"Cluster and gossip", []string{"name", "join", "resolver", "cluster-name", "gossip-key-file", "new-gossip-key"}},
	{"Security and TLS", []string{"tls-ca", "tls-cert", "tls-key", "api-tls-cert", "api-tls-key", "api-tls-client-ca", "insecure", "admin-token-file", "private-reads", "trusted-proxies", "cors-origins"}},
	{"Limits and store", []string{"max-keys", "max-memory", "max-key-bytes", "inline-limits", "gc-headroom"}},
	{"Policy and RLS", []string{"policy", "rls-config", "rls-headers", "rls-shadow-mode", "rls-stats-keys", "rls-near-limit-ratio", "audit-log"}},
	{"Replication and failure", []string{"replication-factor", "replication-max-loss", "cluster-size", "data-dir", "snapshot-interval"}},
	{"Connections and timeouts", []string{"check-timeout", "http-read-timeout", "http-write-timeout", "http-idle-timeout", "grpc-idle-timeout", "max-conns"}},
	{"Operations and observability", []string{"log-level", "pprof"}},
	{"Shutdown", []string{"drain-delay", "shutdown-timeout"}},
}

// flagHints name what a string flag takes; other flags are named by their
// type (int, duration, bytes; a switch takes nothing).
var flagHints = map[string]string{
	"http": "host:port", "grpc": "host:port", "peer": "host:port", "gossip": "host:port", "pprof": "host:port",
	"advertise-http": "host:port", "advertise-grpc": "host:port", "advertise-peer": "host:port",
	"advertise-gossip": "ip:port", "resolver": "host:port", "advertise-host": "host",
	"join": "seeds", "trusted-proxies": "prefixes", "cors-origins": "origins", "log-level": "level",
	"policy": "file", "audit-log": "file", "data-dir": "dir", "rls-config": "path", "admin-token-file": "file", "gossip-key-file": "file",
	"tls-ca": "file", "tls-cert": "file", "tls-key": "file", "api-tls-cert": "file", "api-tls-key": "file", "api-tls-client-ca": "file",
}

// shownDefaults are the defaults --help shows for the flags whose empty
// value stands for one derived from the machine or from other flags.
var shownDefaults = map[string]string{
	"name":           "this machine's host name",
	"advertise-host": "$POD_IP, else a private IP",
	"advertise-http": "--http", "advertise-grpc": "--grpc", "advertise-peer": "--peer", "advertise-gossip": "--gossip",
	"resolver": "the system's resolver",
}

// addrFlags are the listeners' addresses, checked as host:port.
var addrFlags = []string{"http", "grpc", "peer", "gossip", "pprof"}

// subcommands are the words run takes in place of flags (commands.go).
var subcommands = []string{"help", "probe", "validate-flags", "version"}

// envName is the environment variable of the flag name: RINGLIMIT_ and
// the name in upper case, dashes as underscores.
func envName(name string) string {
	return "RINGLIMIT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

const helpHead = `ringlimit-node runs one node of a ringlimit cluster: a distributed rate
limiter whose nodes find each other by gossip, share the keys on a consistent
hash ring and forward each check to the key's owner.

Usage:
  ringlimit-node [flags]                run a node until SIGTERM or SIGINT
  ringlimit-node version                print the version, commit and Go version
  ringlimit-node probe [URL]            GET URL (default: /readyz on $RINGLIMIT_HTTP's
                                        address); exit 0 on 200
  ringlimit-node validate-flags FLAGS   check FLAGS and the RINGLIMIT_* environment as
                                        the node would; exit 0, or 2 with the error
  ringlimit-node help                   print this help (also -h, --help)

Every flag may also be set in the environment as RINGLIMIT_<FLAG>, shown with
each flag (--max-keys: RINGLIMIT_MAX_KEYS); a flag on the command line wins.
A switch takes no value: --insecure, or --inline-limits=false to turn off one
that is on. Tracing is set up by the standard OTEL_* environment (off unless
OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT is set).
`

const helpTail = `
Exit status: 0 after a clean shutdown (SIGTERM, SIGINT) or --help; 1 when the
node fails; 2 when a flag or the environment is wrong.
`

// printUsage writes the help of ringlimit-node, its flags fs grouped by
// topic, to w.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	io.WriteString(w, helpHead)
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		for _, name := range g.flags {
			f := fs.Lookup(name)
			if f == nil {
				continue
			}
			left := "--" + name
			if h := typeHint(f); h != "" {
				left += " " + h
			}
			def, ok := shownDefaults[name]
			switch {
			case ok:
			case f.DefValue == "":
				def = "none"
			default:
				def = f.DefValue
			}
			fmt.Fprintf(w, "  %-30s %s (default: %s)\n", left, envName(name), def)
			textwrap.Write(w, "", f.Usage, "        ", 80)
		}
	}
	var lost []string
	fs.VisitAll(func(f *flag.Flag) {
		if groupOf(f.Name) == "" {
			lost = append(lost, "--"+f.Name)
		}
	})
	if len(lost) > 0 { // a flag flagGroups misses is still listed
		fmt.Fprintf(w, "\nNot in a group yet: %s\n", strings.Join(lost, ", "))
	}
	io.WriteString(w, helpTail)
}

// groupOf is the title of the group of flag name, "" when none.
func groupOf(name string) string {
	for _, g := range flagGroups {
		if slices.Contains(g.flags, name) {
			return g.title
		}
	}
	return ""
}

// typeHint names what flag f takes: "" for a switch.
func typeHint(f *flag.Flag) string {
	if h, ok := flagHints[f.Name]; ok {
		return h
	}
	if _, ok := f.Value.(*byteSize); ok {
		return "bytes"
	}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			return ""
		case time.Duration:
			return "duration"
		case int, int64:
			return "int"
		case float64:
			return "number"
		}
	}
	return "string"
}

// flagFailure matches the flag package's error for a value that does not
// parse.
var flagFailure = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)

// flagError is err, what the flag package found wrong with the command
// line, in one line with a hint: a value that does not parse names the flag
// and what it takes, an unknown flag the closest known one.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := flagFailure.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			v, uerr := strconv.Unquote(m[1])
			if uerr == nil {
				return fmt.Errorf("--%s: %s", f.Name, badValue(f, v, m[3]))
			}
		}
	}
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var known []string
		fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
		if s, ok := suggest.Closest(name, known); ok {
			return fmt.Errorf("unknown flag --%s (did you mean --%s?)", name, s)
		}
		return fmt.Errorf("unknown flag --%s (ringlimit-node --help lists the flags)", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		if f := fs.Lookup(name); f != nil {
			return fmt.Errorf("--%s needs a value (%s)", name, takes(f))
		}
	}
	return fmt.Errorf("%s (ringlimit-node --help lists the flags)", msg)
}

// takes says what flag f takes, with its default.
func takes(f *flag.Flag) string {
	h := typeHint(f)
	if h == "" {
		h = "true or false"
	}
	if f.DefValue == "" {
		return h
	}
	return fmt.Sprintf("%s; default %s", h, f.DefValue)
}

// badValue says why v, given to flag f, failed to parse (reason, the
// flag package's words), with a hint of what would: "5" is not a duration
// (try 5s).
func badValue(f *flag.Flag, v, reason string) string {
	if _, ok := f.Value.(*byteSize); ok {
		num := strings.TrimRight(v, "KMGkmgIiBb ")
		unit := strings.ToUpper(strings.TrimSpace(v[len(num):]))
		if _, err := strconv.ParseInt(num, 10, 64); err == nil && unit != "" && !strings.HasSuffix(unit, "IB") {
			return fmt.Sprintf("%q is not a byte size (try %s%siB)", v, num, unit[:1])
		}
		return fmt.Sprintf("%q is not a byte size: %s", v, strings.TrimSuffix(reason, fmt.Sprintf(", got %q", v)))
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return reason
	}
	switch g.Get().(type) {
	case time.Duration:
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			return fmt.Sprintf("%q is not a duration (try %ss)", v, strconv.FormatFloat(n, 'f', -1, 64))
		}
		return fmt.Sprintf("%q is not a duration (try 5s, 500ms or 1m)", v)
	case int, int64:
		if reason == "value out of range" {
			return fmt.Sprintf("%q is out of range", v)
		}
		if n, err := strconv.ParseFloat(v, 64); err == nil && n == float64(int64(n)) {
			return fmt.Sprintf("%q is not a whole number (try %d)", v, int64(n))
		}
		return fmt.Sprintf("%q is not a whole number (try one such as %s)", v, f.DefValue)
	case float64:
		return fmt.Sprintf("%q is not a number (try one such as %s)", v, f.DefValue)
	case bool:
		return fmt.Sprintf("%q is not a boolean (try true or false)", v)
	}
	return reason
}

// checkAddr checks v, the value of an address flag, as host:port; from
// names where it came from (--http, RINGLIMIT_HTTP).
func checkAddr(from, v string) error {
	if _, port, err := net.SplitHostPort(v); err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr == nil || port == "" {
			return nil
		}
	}
	if n, perr := strconv.ParseUint(v, 10, 16); perr == nil {
		return fmt.Errorf("%s: %q is not an address (try 127.0.0.1:%d, or :%d for every interface)", from, v, n, n)
	}
	return fmt.Errorf("%s: %q is not an address host:port with a port from 0 to 65535 (try 127.0.0.1:8080)", from, v)
}

// unexpected is the error for arguments that are neither flags nor a
// subcommand.
func unexpected(args []string) error {
	if s, ok := suggest.Closest(args[0], subcommands); ok {
		return fmt.Errorf("unknown command %q (did you mean ringlimit-node %s?)", args[0], s)
	}
	return fmt.Errorf("unexpected arguments %q: ringlimit-node takes flags, or one of the commands %s", args, strings.Join(subcommands, ", "))
}
