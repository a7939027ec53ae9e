package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	v, rev, gv := Read("v1.2.3", "abc123")
	if v != "v1.2.3" || rev != "abc123" || gv != runtime.Version() {
		t.Errorf("Read(v1.2.3, abc123) = %q, %q, %q", v, rev, gv)
	}
	// A test binary has no main module version and, built by go test, no
	// VCS settings: the defaults.
	v, rev, _ = Read("", "")
	if v != "devel" || (rev != "unknown" && len(rev) < 7) {
		t.Errorf("Read(\"\", \"\") = %q, %q; want devel and a revision or unknown", v, rev)
	}
}

func TestChoose(t *testing.T) {
	stamped := func(version, revision, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/ringlimit/ringlimit", Version: version}}
		if revision != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: revision})
		}
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	for i, c := range []struct {
		version, commit string
		bi              *debug.BuildInfo
		v, rev          string
	}{
		// -ldflags win over what the toolchain recorded.
		{"v0.1.0", "abc", stamped("v0.0.9", "def", "true"), "v0.1.0", "abc"},
		// A tagged commit built by go build or go install.
		{"", "", stamped("v0.1.0", "0123456789abcdef", "false"), "v0.1.0", "0123456789abcdef"},
		// A modified tree: Go says +dirty in the version, the commit says -dirty.
		{"", "", stamped("v0.1.0+dirty", "0123456789abcdef", "true"), "v0.1.0+dirty", "0123456789abcdef-dirty"},
		// An untagged commit: Go's pseudo-version.
		{"", "", stamped("v0.1.1-0.20261203120000-0123456789ab", "0123456789abcdef", "false"), "v0.1.1-0.20261203120000-0123456789ab", "0123456789abcdef"},
		// Only the commit given by -ldflags: the version still comes from the toolchain.
		{"", "abc", stamped("v0.1.0", "def", "false"), "v0.1.0", "abc"},
		// Built without VCS stamping (-buildvcs=false, or outside a repository).
		{"", "", stamped("(devel)", "", ""), "devel", "unknown"},
		{"", "", stamped("", "", ""), "devel", "unknown"},
		// No build information at all.
		{"", "", nil, "devel", "unknown"},
		{"v0.2.0", "", nil, "v0.2.0", "unknown"},
	} {
		if v, rev := choose(c.version, c.commit, c.bi); v != c.v || rev != c.rev {
			t.Errorf("step %d: choose(%q, %q, ...) = %q, %q; want %q, %q", i, c.version, c.commit, v, rev, c.v, c.rev)
		}
	}
}

// TestVersionFromTag builds a small program that prints Read("", "") in a
// fresh git repository, as go build does in a clone of ringlimit: the
// package's own source, copied in, with the toolchain's VCS stamping on.
// An untagged commit gives a pseudo-version, the commit tagged v0.1.0 gives
// v0.1.0, a modified tree marks both, a later commit gives the next
// pseudo-version, and -ldflags override it all.
func TestVersionFromTag(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	gitTool, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	src, err := os.ReadFile("buildinfo.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"go.mod":                 "module example.com/tagged\n\ngo 1.24\n",
		"buildinfo/buildinfo.go": string(src),
		"main.go": `package main

import (
	"fmt"

	"example.com/tagged/buildinfo"
)

var version, commit string

func main() {
	v, rev, _ := buildinfo.Read(version, commit)
	fmt.Println(v, rev)
}
`,
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOFLAGS=-buildvcs=true", "GOWORK=off", "GOTOOLCHAIN=local",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=ringlimit", "GIT_AUTHOR_EMAIL=ringlimit@example.com",
		"GIT_COMMITTER_NAME=ringlimit", "GIT_COMMITTER_EMAIL=ringlimit@example.com")
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", filepath.Base(name), args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git := func(args ...string) string { t.Helper(); return run(gitTool, args...) }
	built := func(ldflags string) string {
		t.Helper()
		bin := filepath.Join(dir, "bin", "tagged")
		run(goTool, "build", "-ldflags", ldflags, "-o", bin, ".")
		return run(bin)
	}
	expect := func(what, got, pattern string) {
		t.Helper()
		if !regexp.MustCompile(`^` + pattern + `$`).MatchString(got) {
			t.Errorf("%s: printed %q, want %s", what, got, pattern)
		}
	}

	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("/bin/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	first := git("rev-parse", "HEAD")
	expect("untagged", built(""), `v0\.0\.0-\d{14}-`+first[:12]+` `+first)

	git("tag", "v0.1.0")
	expect("tagged v0.1.0", built(""), `v0\.1\.0 `+first)

	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(files["main.go"]+"\n// changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("tagged, modified", built(""), `v0\.1\.0\+dirty `+first+`-dirty`)

	git("commit", "-q", "-am", "second")
	second := git("rev-parse", "HEAD")
	expect("after the tag", built(""), `v0\.1\.1-0\.\d{14}-`+second[:12]+` `+second)

	expect("-ldflags", built("-X main.version=v0.1.0-1-g"+second[:7]+" -X main.commit="+second), `v0\.1\.0-1-g`+second[:7]+` `+second)
}
