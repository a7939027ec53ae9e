package ringlimit_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ringlimit/ringlimit/"

// allowed lists, for each package (by its top-level directory, or its
// first two for internal/...), the project packages its non-test code may
// import. Imports go one way: the leaves (clock, ring, proto, the internal
// helpers) import no project package; bucket and adaptive only the clock.
var allowed = map[string][]string{
	"clock":                {},
	"bucket":               {"clock"},
	"adaptive":             {"clock"},
	"ring":                 {},
	"status":               {},
	"cluster":              {"clock", "internal/discard"},
	"proto":                {},
	"internal/batcher":     {"internal/deadline"},
	"internal/deadline":    {},
	"internal/workers":     {},
	"internal/devca":       {},
	"internal/certfile":    {"internal/reload"},
	"internal/clientip":    {},
	"internal/grpcmetrics": {},
	"internal/buildinfo":   {},
	"internal/route":       {},
	"internal/suggest":     {},
	"internal/textwrap":    {},
	"internal/connlimit":   {"clock"},
	"internal/reload":      {"clock"},
	"internal/discard":     {},
	"internal/peerdefault": {},
	"internal/statefile":   {},
	"internal/peermsg":     {"bucket", "adaptive", "clock"},
	"peer":                 {"bucket", "adaptive", "clock", "proto", "status", "internal/peermsg", "internal/batcher", "internal/discard", "internal/peerdefault"},
	"forward":              {"bucket", "adaptive", "clock", "status", "internal/peermsg", "internal/discard", "internal/peerdefault"},
	"policy":               {"bucket", "adaptive", "clock", "internal/reload", "internal/route", "internal/suggest", "internal/discard"},
	"rls":                  {"bucket", "clock", "internal/reload", "internal/route", "internal/suggest", "internal/discard"},
	"internal/gctune":      {},
	"internal/oteltrace":   {},
	"ratelimitheader":      {"clock"},
	"decide":               {"policy", "rls", "forward", "bucket", "adaptive", "internal/deadline", "internal/discard"},
	"api":                  {"decide", "policy", "rls", "forward", "proto", "status", "bucket", "clock", "ratelimitheader", "internal/clientip", "internal/deadline", "internal/route", "internal/discard", "internal/workers"},
	"ui":                   {"api", "policy", "clock", "status"},
	"client":               {"proto", "bucket", "clock", "ring", "internal/batcher", "ratelimitheader", "internal/clientip", "internal/deadline", "internal/workers"},
	"node":                 nodeImports,
	"cmd":                  nil, // wires everything
	// Test infrastructure, under internal/testonly: imported by tests only.
	"internal/testonly/testkit":  nil,
	"internal/testonly/faultnet": {},
	// harness starts whole nodes through node; forward's types are those
	// of node.Router, ring works out owners by hand. Not peer.
	"internal/testonly/harness":     {"node", "bucket", "clock", "forward", "ring", "internal/testonly/faultnet", "internal/testonly/testkit"},
	"internal/testonly/openapitest": {},
}

// nodeImports are what the node as a library may import: every library
// package. Only cmd (and tests) import node.
var nodeImports = []string{"clock", "bucket", "adaptive", "ring", "status", "cluster", "proto", "peer", "forward", "policy", "rls", "ratelimitheader", "decide", "api", "ui", "internal/batcher", "internal/deadline", "internal/certfile", "internal/clientip", "internal/grpcmetrics", "internal/buildinfo", "internal/route", "internal/suggest", "internal/connlimit", "internal/reload", "internal/discard", "internal/peerdefault", "internal/gctune", "internal/oteltrace", "internal/statefile", "internal/workers"}

// testOnlyDir holds the test infrastructure: no non-test file outside it
// may import a package under it.
const testOnlyDir = "internal/testonly/"

// isTestOnly reports whether the unit u is test infrastructure.
func isTestOnly(u string) bool { return strings.HasPrefix(u, testOnlyDir) }

// unit is the key of allowed for a path relative to the module root: the
// top-level directory, internal/<name>, or internal/testonly/<name>.
func unit(rel string) string {
	parts := strings.SplitN(rel, "/", 4)
	n := 1
	switch {
	case parts[0] == "internal" && len(parts) > 2 && parts[1] == "testonly":
		n = 3
	case parts[0] == "internal" && len(parts) > 1:
		n = 2
	}
	return strings.Join(parts[:n], "/")
}

func TestImportsGoOneWay(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || !strings.Contains(path, "/") {
			return nil
		}
		top := unit(filepath.ToSlash(filepath.Dir(path)))
		rules, known := allowed[top]
		if !known {
			t.Errorf("%s: package directory %q has no import rule; add one to allowed", path, top)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		seen++
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(p, module) {
				continue
			}
			if rules == nil {
				if d := unit(strings.TrimPrefix(p, module)); isTestOnly(d) && !isTestOnly(top) {
					t.Errorf("%s imports %s, which is for tests only", path, p)
				}
				continue
			}
			dep := unit(strings.TrimPrefix(p, module))
			if isTestOnly(dep) && !isTestOnly(top) {
				t.Errorf("%s imports %s, which is for tests only", path, p)
			}
			if dep != top && !slices.Contains(rules, dep) {
				t.Errorf("%s imports %s: %s may import only %v", path, p, top, rules)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 5 {
		t.Fatalf("checked only %d files; is the test running from the module root?", seen)
	}
}

// systemClockAllowed are the directories (by their first element) whose
// non-test code may call clock.System(): the clock itself, and the
// programs and the node that build a process's one clock and pass it to
// every package. client, a library for other programs, is the one
// exception: a nil client.Config.Clock means the system clock.
var systemClockAllowed = []string{"clock", "node", "cmd", "client"}

// TestOneClock: no library package builds a clock of its own. Each takes
// it from its Config, so that a node runs on one clock (and a test on one
// fake clock) in every package.
func TestOneClock(t *testing.T) {
	seen := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		seen++
		rel := filepath.ToSlash(path)
		if slices.Contains(systemClockAllowed, strings.SplitN(rel, "/", 2)[0]) && strings.Contains(rel, "/") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			if code, _, _ := strings.Cut(line, "//"); strings.Contains(code, "clock.System()") {
				t.Errorf("%s:%d calls clock.System(): take the clock from the package's Config (only %v may build one)", rel, i+1, systemClockAllowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 5 {
		t.Fatalf("checked only %d files; is the test running from the module root?", seen)
	}
}
