package main

import (
	"bytes"
	"errors"
	"flag"
	"os/exec"
	"strings"
	"testing"
)

// TestHelpAndFlagErrors: --help lists the flags and is no error to main;
// a bad flag is one line with a hint, and prints no usage.
func TestHelpAndFlagErrors(t *testing.T) {
	none := func(string) string { return "" }
	var out bytes.Buffer
	if _, err := parseConfig([]string{"--help"}, none, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"Usage: ringlimit-node [flags]", "RINGLIMIT_<FLAG>", "-max-memory", "-trusted-proxies"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help output lacks %q", want)
		}
	}
	for _, st := range []struct {
		args []string
		want string
	}{
		{[]string{"--check-timeout", "5"}, `invalid value "5" for flag -check-timeout: parse error (--check-timeout takes a duration such as 5s, 500ms or 1m)`},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus (ringlimit-node --help lists the flags)"},
		{[]string{"--max-keys", "x"}, `invalid value "x" for flag -max-keys: parse error (ringlimit-node --help lists the flags)`},
	} {
		out.Reset()
		_, err := parseConfig(st.args, none, &out)
		if err == nil || err.Error() != st.want {
			t.Errorf("parseConfig(%q) = %v, want %q", st.args, err, st.want)
		}
		if out.Len() != 0 {
			t.Errorf("parseConfig(%q) printed %d bytes, want nothing (the error says it all)", st.args, out.Len())
		}
	}
}

// TestBinaryHelpExitsZero runs the built binary: --help exits 0, a bad
// flag exits 1 with one line on stderr.
func TestBinaryHelpExitsZero(t *testing.T) {
	bin := buildNode(t)
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil || !bytes.HasPrefix(out, []byte("Usage: ringlimit-node")) {
		t.Fatalf("--help: %v, output starts %q; want exit 0 and the usage", err, out[:min(len(out), 60)])
	}
	out, err = exec.Command(bin, "--check-timeout", "5").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || bytes.Count(out, []byte("\n")) != 1 || !bytes.HasPrefix(out, []byte("ringlimit-node: ")) {
		t.Fatalf("--check-timeout 5: %v, output %q; want exit 1 and one line", err, out)
	}
}
