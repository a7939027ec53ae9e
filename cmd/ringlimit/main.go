// Command ringlimit operates a ringlimit cluster from the command line:
// checks, key owners, the cluster's status, incident overrides over a
// node's HTTP API, and offline validation of policy and Envoy RLS files.
//
//	ringlimit [global flags] check KEY --limit N --per DUR [--cost N] [--algorithm A] [--burst B]
//	ringlimit [global flags] check [--policy P] [--api-key K | --user U | --ip IP] [--route R] [--tier T] [--cost N]
//	ringlimit [global flags] peek KEY --limit N --per DUR [--cost N] (or the policy flags, as check)
//	ringlimit [global flags] reset KEY --limit N --per DUR (or the policy flags, as check)
//	ringlimit [global flags] acquire KEY --limit N [--ttl DUR] [--request-id ID] (or the policy flags, as check)
//	ringlimit [global flags] renew LEASE [--ttl DUR]
//	ringlimit [global flags] release LEASE [--outcome ok|error|dropped] [--latency DUR]
//	ringlimit [global flags] report (the policy flags, as check) [--outcome ok|error|dropped] [--latency DUR]
//	ringlimit [global flags] owner KEY
//	ringlimit [global flags] status
//	ringlimit [global flags] override add --reason TEXT (--user U | --api-key K) (--tier T | --limit N --per DUR) --expires-in DUR
//	ringlimit [global flags] override list
//	ringlimit [global flags] override revoke ID
//	ringlimit policy validate FILE
//	ringlimit rls validate PATH
//	ringlimit version
//	ringlimit help [COMMAND]
//
// Node flags, accepted before the command and after the commands that call
// a node (not after policy validate, rls validate or version): --addr (the
// node's HTTP address or URL; default $RINGLIMIT_ADDR, else
// http://127.0.0.1:8080), --token, --token-file (the admin bearer token;
// default $RINGLIMIT_TOKEN), --ca (PEM CA certificates for https),
// --timeout. Every command takes --json.
//
// ringlimit help COMMAND, or COMMAND --help, prints the usage and flags of
// COMMAND (help.go); an unknown command or flag is a usage error that names
// the closest known one.
//
// With --json a command prints the API's JSON answer as it came, or the
// documented struct of its own (status, validate, version); otherwise a
// table or a few lines of text.
//
// Exit status: 0 success (for check: allowed); 1 check refused (429), or
// the file does not validate; 2 usage error; 3 the node could not be
// reached or did not answer as the API does (connection, TLS, timeout, 5xx);
// 4 the node refused the request (4xx: invalid, no or wrong admin token,
// not found), its {code, message} printed as is (and, with --json, its
// JSON body on stdout).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Exit statuses.
const (
	exitOK       = 0
	exitRefused  = 1 // check refused; file invalid
	exitUsage    = 2
	exitNode     = 3 // no answer, or not the API's
	exitRejected = 4 // the node answered 4xx
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// usage is what ringlimit with no command prints on stderr.
const usage = `usage: ringlimit [flags] COMMAND [flags] [args]
run 'ringlimit help' for the commands and their flags
`

// globals are the flags every command accepts.
type globals struct {
	addr      string
	token     string
	tokenFile string
	ca        string
	timeout   time.Duration
	json      bool
}

// register adds the global flags to fs, their defaults g's current values,
// so that a flag given before the command stays unless given again: the
// node flags when node is true, --json always.
func (g *globals) register(fs *flag.FlagSet, node bool) {
	if node {
		fs.StringVar(&g.addr, "addr", g.addr, "node HTTP address or URL")
		fs.StringVar(&g.token, "token", g.token, "admin bearer token")
		fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "file holding the admin token")
		fs.StringVar(&g.ca, "ca", g.ca, "PEM CA certificates for https")
		fs.DurationVar(&g.timeout, "timeout", g.timeout, "deadline of each request")
	}
	fs.BoolVar(&g.json, "json", g.json, "machine output")
}

// usageError marks an error as a usage error (exit 2); cmd, when not
// empty, is the command whose help says how.
type usageError struct {
	err error
	cmd string
}

func (e *usageError) Error() string { return e.err.Error() }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// exitError carries an exit status other than the one an error implies.
type exitError struct {
	code int
	err  error // nil: the command printed what there is to say
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// env is what a command runs with.
type env struct {
	g      globals
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

// run runs the command in args and returns the process's exit status.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	e := &env{getenv: getenv, stdout: stdout, stderr: stderr}
	e.g.addr = getenv("RINGLIMIT_ADDR")
	e.g.timeout = 5 * time.Second
	fs := newFlagSet("ringlimit", stderr)
	e.g.register(fs, true)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout)
			return exitOK
		}
		return e.report(flagError("", fs, err))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		io.WriteString(stderr, usage)
		return exitUsage
	}
	err := e.dispatch(rest[0], rest[1:])
	return e.report(err)
}

// report prints err and returns its exit status.
func (e *env) report(err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	var xe *exitError
	var ae *apiError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "ringlimit: %v\n", err)
		if ue.cmd != "" {
			fmt.Fprintf(e.stderr, "run 'ringlimit help %s' for usage\n", ue.cmd)
		} else {
			fmt.Fprintln(e.stderr, "run 'ringlimit help' for usage")
		}
		return exitUsage
	case errors.As(err, &xe):
		if xe.err != nil {
			fmt.Fprintf(e.stderr, "ringlimit: %v\n", xe.err)
		}
		return xe.code
	case errors.As(err, &ae):
		if e.g.json && ae.body != nil {
			e.stdout.Write(ae.body)
		}
		fmt.Fprintf(e.stderr, "ringlimit: %v\n", err)
		if ae.status >= 400 && ae.status < 500 {
			return exitRejected
		}
		return exitNode
	}
	fmt.Fprintf(e.stderr, "ringlimit: %v\n", err)
	return exitNode
}

func (e *env) dispatch(cmd string, args []string) error {
	switch cmd {
	case "check":
		return e.check(args)
	case "peek":
		return e.peek(args)
	case "reset":
		return e.reset(args)
	case "owner":
		return e.owner(args)
	case "settle":
		return e.settle(args)
	case "acquire":
		return e.acquire(args)
	case "renew":
		return e.renew(args)
	case "release":
		return e.release(args)
	case "report":
		return e.reportOutcome(args)
	case "status":
		return e.status(args)
	case "override", "overrides":
		if len(args) == 0 {
			return usagef("override: want add, list or revoke")
		}
		if isHelp(args[0]) {
			printGroupHelp(e.stdout, "override", group("override"))
			return nil
		}
		switch args[0] {
		case "add":
			return e.overrideAdd(args[1:])
		case "list", "ls":
			return e.overrideList(args[1:])
		case "revoke", "rm", "delete":
			return e.overrideRevoke(args[1:])
		}
		return unknownSub("override", args[0])
	case "policy", "rls":
		what := map[string]string{"policy": "FILE", "rls": "PATH"}[cmd]
		switch {
		case len(args) == 0:
			return usagef("%s: want validate %s", cmd, what)
		case isHelp(args[0]):
			printGroupHelp(e.stdout, cmd, group(cmd))
			return nil
		case args[0] != "validate":
			return unknownSub(cmd, args[0])
		case cmd == "policy":
			return e.policyValidate(args[1:])
		}
		return e.rlsValidate(args[1:])
	case "version":
		return e.version(args)
	case "help", "-h", "--help":
		return e.help(args)
	}
	return unknownCommand("", cmd)
}

// newFlagSet is the flag set of the command name; the flag package
// prints nothing: parse reports what is wrong in one line, and the help.
func newFlagSet(name string, _ io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses a command's flags, which may come before, between or after
// its arguments (ringlimit check KEY --limit 10 --per 1s), and returns the
// arguments; "--" ends the flags. It checks that there are between min and
// max arguments (max < 0: no bound).
//
// On --help it prints the command's help (the command named fs.Name() in
// commands) on stdout and returns flag.ErrHelp.
func (e *env) parse(fs *flag.FlagSet, args []string, min, max int, synopsis string) ([]string, error) {
	c, _ := lookup(fs.Name())
	e.g.register(fs, !c.offline)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printCommandHelp(e.stdout, c, fs)
				return nil, err
			}
			return nil, flagError(fs.Name(), fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// flag.Parse stops at the first argument, or consumes "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		return nil, usagef("usage: ringlimit %s", synopsis)
	}
	return pos, nil
}

// flagSet reports whether the flag name was given to fs.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// trimLines drops trailing spaces from every line of s (tabwriter pads the
// last column of a row when an earlier row's is wider).
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}
