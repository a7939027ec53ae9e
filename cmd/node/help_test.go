package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -run %s -update rewrites it):\n%s", path, t.Name(), got)
	}
}

func noEnv(string) string { return "" }

// TestHelpGolden: --help prints the usage kept in testdata/help.golden,
// and is no error to main.
func TestHelpGolden(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseConfig([]string{"--help"}, noEnv, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	golden(t, "help.golden", out.Bytes())
}

// TestEveryFlagHasAGroup: every flag parseConfig registers is placed in
// one group of flagGroups, and in one only.
func TestEveryFlagHasAGroup(t *testing.T) {
	var out bytes.Buffer
	parseConfig([]string{"--help"}, noEnv, &out)
	if _, lost, ok := strings.Cut(out.String(), "\nNot in a group yet: "); ok {
		lost, _, _ = strings.Cut(lost, "\n")
		t.Errorf("flags in no group of flagGroups (help.go): %s", lost)
	}
	seen := map[string]string{}
	for _, g := range flagGroups {
		for _, name := range g.flags {
			if first, dup := seen[name]; dup {
				t.Errorf("--%s is in %q and in %q", name, first, g.title)
			}
			seen[name] = g.title
		}
	}
}

// TestFlagErrors: a flag or variable the node cannot use is one line that
// names it, says what is wrong and hints at what is right, and prints
// nothing else.
func TestFlagErrors(t *testing.T) {
	for _, st := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--check-timeout", "5"}, nil, `--check-timeout: "5" is not a duration (try 5s)`},
		{[]string{"--check-timeout", "2.5"}, nil, `--check-timeout: "2.5" is not a duration (try 2.5s)`},
		{[]string{"--drain-delay=soon"}, nil, `--drain-delay: "soon" is not a duration (try 5s, 500ms or 1m)`},
		{nil, map[string]string{"RINGLIMIT_CHECK_TIMEOUT": "5"}, `RINGLIMIT_CHECK_TIMEOUT: "5" is not a duration (try 5s)`},
		{[]string{"--chek-timeout", "5s"}, nil, "unknown flag --chek-timeout (did you mean --check-timeout?)"},
		{[]string{"-maxkeys=10"}, nil, "unknown flag --maxkeys (did you mean --max-keys?)"},
		{[]string{"--bogus"}, nil, "unknown flag --bogus (ringlimit-node --help lists the flags)"},
		{[]string{"--max-keys", "ten"}, nil, `--max-keys: "ten" is not a whole number (try one such as 1048576)`},
		{nil, map[string]string{"RINGLIMIT_MAX_KEYS": "ten"}, `RINGLIMIT_MAX_KEYS: "ten" is not a whole number (try one such as 1048576)`},
		{[]string{"--max-keys", "1e6"}, nil, `--max-keys: "1e6" is not a whole number (try 1000000)`},
		{[]string{"--max-keys", "99999999999999999999"}, nil, `--max-keys: "99999999999999999999" is out of range`},
		{[]string{"--max-memory", "10GB"}, nil, `--max-memory: "10GB" is not a byte size (try 10GiB)`},
		{[]string{"--max-memory", "512m"}, nil, `--max-memory: "512m" is not a byte size (try 512MiB)`},
		{[]string{"--max-memory", "1"}, nil, `--max-memory: "1" is not a byte size: want bytes from 4096 to 2^50, optionally with KiB, MiB or GiB`},
		{[]string{"--insecure=yes"}, nil, `--insecure: "yes" is not a boolean (try true or false)`},
		{nil, map[string]string{"RINGLIMIT_INLINE_LIMITS": "no"}, `RINGLIMIT_INLINE_LIMITS: "no" is not a boolean (try true or false)`},
		{[]string{"--check-timeout"}, nil, "--check-timeout needs a value (duration; default 2s)"},
		{[]string{"--http", "8080"}, nil, `--http: "8080" is not an address (try 127.0.0.1:8080, or :8080 for every interface)`},
		{[]string{"--gossip", "localhost:gossip"}, nil, `--gossip: "localhost:gossip" is not an address host:port with a port from 0 to 65535 (try 127.0.0.1:8080)`},
		{nil, map[string]string{"RINGLIMIT_PPROF": "6060"}, `RINGLIMIT_PPROF: "6060" is not an address (try 127.0.0.1:6060, or :6060 for every interface)`},
		{[]string{"--log-level", "loud"}, nil, `--log-level: "loud" is not a level (try debug, info, warn or error)`},
		{[]string{"versoin"}, nil, `unknown command "versoin" (did you mean ringlimit-node version?)`},
		{[]string{"--http", "127.0.0.1:0", "run", "now"}, nil, `unexpected arguments ["run" "now"]: ringlimit-node takes flags, or one of the commands help, probe, validate-flags, version`},
	} {
		var out bytes.Buffer
		_, err := parseConfig(st.args, func(k string) string { return st.env[k] }, &out)
		if err == nil || err.Error() != st.want {
			t.Errorf("parseConfig(%q, %v) = %v\nwant %s", st.args, st.env, err, st.want)
		}
		if out.Len() != 0 {
			t.Errorf("parseConfig(%q) printed %d bytes, want nothing (the error says it all)", st.args, out.Len())
		}
	}
}

// TestBinaryHelpAndErrors runs the built binary: --help, -h and help print
// the usage on stdout and exit 0; a bad flag or variable exits 2 with one
// line on stderr.
func TestBinaryHelpAndErrors(t *testing.T) {
	bin := buildNode(t)
	want, err := os.ReadFile(filepath.Join("testdata", "help.golden"))
	if err != nil {
		t.Fatal(err)
	}
	// Should a case start a node, it listens on ports of its own and is
	// stopped by the deadline.
	safe := []string{"RINGLIMIT_HTTP=127.0.0.1:0", "RINGLIMIT_GRPC=127.0.0.1:0", "RINGLIMIT_PEER=127.0.0.1:0", "RINGLIMIT_GOSSIP=127.0.0.1:0"}
	runBin := func(env []string, args ...string) (code int, stdout, stderr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(append(os.Environ(), safe...), env...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%q: %v", args, err)
		}
		return cmd.ProcessState.ExitCode(), o.String(), e.String()
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--max-keys", "10", "--help"}, {"probe", "--help"}, {"version", "-h"}, {"validate-flags", "--help"}} {
		if code, out, errOut := runBin(nil, args...); code != 0 || out != string(want) || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q, stdout equal to testdata/help.golden: %v; want exit 0 and the usage", args, code, errOut, out == string(want))
		}
	}
	for _, c := range []struct {
		env    []string
		args   []string
		stderr string
	}{
		{nil, []string{"--check-timeout", "5"}, `ringlimit-node: --check-timeout: "5" is not a duration (try 5s)`},
		{nil, []string{"--chek-timeout", "5s"}, "ringlimit-node: unknown flag --chek-timeout (did you mean --check-timeout?)"},
		{[]string{"RINGLIMIT_MAX_KEYS=ten"}, nil, `ringlimit-node: RINGLIMIT_MAX_KEYS: "ten" is not a whole number (try one such as 1048576)`},
		{[]string{"RINGLIMIT_MAX_KEYS=ten"}, []string{"validate-flags"}, `ringlimit-node: RINGLIMIT_MAX_KEYS: "ten" is not a whole number (try one such as 1048576)`},
		{nil, []string{"--max-keys", "0"}, "ringlimit-node: --max-keys: must be at least 1, got 0"},
	} {
		if code, out, errOut := runBin(c.env, c.args...); code != 2 || out != "" || errOut != c.stderr+"\n" {
			t.Errorf("%v %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.env, c.args, code, out, errOut, c.stderr)
		}
	}
}
