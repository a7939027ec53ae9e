package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -short -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -short -run %s -update rewrites it):\n%s", path, t.Name(), got)
	}
}

// helpGoldens are the help texts kept in testdata: the command line, and
// its file.
var helpGoldens = []struct {
	args []string
	file string
}{
	{[]string{"--help"}, "help.golden"},
	{[]string{"help", "check"}, "help-check.golden"},
	{[]string{"help", "peek"}, "help-peek.golden"},
	{[]string{"reset", "--help"}, "help-reset.golden"},
	{[]string{"help", "acquire"}, "help-acquire.golden"},
	{[]string{"release", "--help"}, "help-release.golden"},
	{[]string{"override", "--help"}, "help-override.golden"},
	{[]string{"policy", "validate", "--help"}, "help-policy-validate.golden"},
}

// TestHelpGolden: the help of the tool and of a few commands, on stdout
// with exit 0, as kept in testdata/*.golden.
func TestHelpGolden(t *testing.T) {
	for _, g := range helpGoldens {
		r := cli(t, nil, g.args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("%q: exit %d, stderr %q; want 0 and nothing", g.args, r.code, r.stderr)
		}
		golden(t, g.file, r.stdout)
	}
	// The environment does not change the help.
	r := cli(t, map[string]string{"RINGLIMIT_ADDR": "http://10.0.0.1:8080"}, "help", "check")
	golden(t, "help-check.golden", r.stdout)
}

// oneDash finds a flag spelt -flag rather than --flag.
var oneDash = regexp.MustCompile(`(^|[\s\[(|])-[a-z][a-z-]*`)

// TestEveryCommandHasHelp: every command and group answers help COMMAND,
// COMMAND --help and COMMAND -h alike, on stdout with exit 0; a command
// that reads no node lists none of the node flags, one that does lists
// them all.
func TestEveryCommandHasHelp(t *testing.T) {
	nodeOnly := []string{"--addr", "--token", "--token-file", "--ca", "--timeout"}
	for _, c := range commands {
		words := strings.Fields(c.name)
		want := cli(t, nil, append([]string{"help"}, words...)...)
		if want.code != 0 || want.stderr != "" {
			t.Fatalf("help %s: exit %d, stderr %q", c.name, want.code, want.stderr)
		}
		if c.name != "help" {
			if !strings.HasPrefix(want.stdout, "Usage: ringlimit "+c.synopsis+"\n") {
				t.Errorf("help %s starts %q, want its usage line", c.name, want.stdout[:min(60, len(want.stdout))])
			}
			for _, h := range []string{"--help", "-h"} {
				cli(t, nil, append(words, h)...).want(t, 0, want.stdout, "")
			}
		}
		for _, f := range nodeOnly {
			if c.name == "help" { // the tool's help: every flag
				break
			}
			if has := strings.Contains(want.stdout, "\n  "+f+" "); has == c.offline {
				t.Errorf("help %s lists %s: %v; want %v (offline: %v)", c.name, f, has, !c.offline, c.offline)
			}
		}
		if !strings.Contains(want.stdout, "\n  --json ") {
			t.Errorf("help %s does not list --json", c.name)
		}
		if oneDash.MatchString(want.stdout) {
			t.Errorf("help %s spells a flag with one dash: %q", c.name, oneDash.FindString(want.stdout))
		}
	}
	for _, group := range []string{"override", "policy", "rls"} {
		want := cli(t, nil, "help", group)
		if want.code != 0 || !strings.HasPrefix(want.stdout, "Usage: ringlimit "+group+" COMMAND") {
			t.Errorf("help %s: exit %d %q", group, want.code, want.stdout)
		}
		for _, h := range []string{"--help", "-h", "help"} {
			cli(t, nil, group, h).want(t, 0, want.stdout, "")
		}
	}
}

// TestUsageErrors: an unknown command or flag is one line naming it and
// the closest known one, then where the usage is; exit 2.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"chek"}, "ringlimit: unknown command \"chek\" (did you mean check?)\nrun 'ringlimit help' for usage\n"},
		{[]string{"help", "nosuch"}, "ringlimit: help: unknown command \"nosuch\" (commands: check, peek, reset, settle, acquire, renew, release, report, owner, status, override, policy, rls, version, help)\nrun 'ringlimit help' for usage\n"},
		{[]string{"help", "stauts"}, "ringlimit: help: unknown command \"stauts\" (did you mean status?)\nrun 'ringlimit help' for usage\n"},
		{[]string{"help", "override", "ad"}, "ringlimit: help: unknown command \"override ad\" (did you mean override add?)\nrun 'ringlimit help' for usage\n"},
		{[]string{"override", "revok", "ovr-1"}, "ringlimit: override: unknown command \"revok\" (did you mean override revoke?)\nrun 'ringlimit help' for usage\n"},
		{[]string{"policy", "valdate", "p.yaml"}, "ringlimit: policy: unknown command \"valdate\" (did you mean policy validate?)\nrun 'ringlimit help' for usage\n"},
		{[]string{"check", "k", "--limt", "3", "--per", "1s"}, "ringlimit: check: unknown flag --limt (did you mean --limit?)\nrun 'ringlimit help check' for usage\n"},
		{[]string{"check", "k", "--limit", "x", "--per", "1s"}, "ringlimit: check: --limit: \"x\" is not a whole number\nrun 'ringlimit help check' for usage\n"},
		{[]string{"owner", "--addr"}, "ringlimit: owner: --addr needs a value\nrun 'ringlimit help owner' for usage\n"},
		{[]string{"--tiemout", "1s", "status"}, "ringlimit: unknown flag --tiemout (did you mean --timeout?)\nrun 'ringlimit help' for usage\n"},
		{[]string{"--timeout", "5", "status"}, "ringlimit: --timeout: \"5\" is not a duration (try 5s)\nrun 'ringlimit help' for usage\n"},
		{[]string{"policy", "validate", "--addr", "127.0.0.1:8080", "p.yaml"}, "ringlimit: policy validate: --addr is for the commands that call a node; policy validate reads no node\nrun 'ringlimit help policy validate' for usage\n"},
	} {
		cli(t, nil, c.args...).want(t, 2, "", c.stderr)
	}
}

// TestBinaryHelp: the built binary prints the help kept in
// testdata/help.golden, exit 0, and refuses an unknown command, exit 2.
func TestBinaryHelp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := testkit.Build(t, ".")
	for _, g := range helpGoldens {
		want, err := os.ReadFile(filepath.Join("testdata", g.file))
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd := exec.Command(bin, g.args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || string(out) != string(want) || stderr.Len() != 0 {
			t.Errorf("%q: %v, stderr %q, stdout equal to %s: %v", g.args, err, stderr.String(), g.file, string(out) == string(want))
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "chek")
	cmd.Stderr = &stderr
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 || stderr.String() != "ringlimit: unknown command \"chek\" (did you mean check?)\nrun 'ringlimit help' for usage\n" {
		t.Errorf("chek: %v, stderr %q; want exit 2 and the did-you-mean", err, stderr.String())
	}
}
