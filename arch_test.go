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
// helpers) import no project package; bucket only the clock.
var allowed = map[string][]string{
	"clock":                {},
	"bucket":               {"clock"},
	"ring":                 {},
	"cluster":              {"clock"},
	"proto":                {},
	"internal/batcher":     {"internal/deadline"},
	"internal/deadline":    {},
	"internal/devca":       {},
	"internal/certfile":    {},
	"internal/clientip":    {},
	"internal/grpcmetrics": {},
	"internal/buildinfo":   {},
	"internal/route":       {},
	"internal/suggest":     {},
	"internal/textwrap":    {},
	"internal/connlimit":   {"clock"},
	"internal/gctune":      {},
	"internal/oteltrace":   {},
	"peer":                 {"bucket", "clock", "proto", "internal/batcher"},
	"forward":              {"bucket", "clock", "peer"},
	"policy":               {"bucket", "clock", "internal/route", "internal/suggest"},
	"rls":                  {"bucket", "clock", "internal/route", "internal/suggest"},
	"ratelimitheader":      {"clock"},
	"api":                  {"policy", "rls", "forward", "proto", "bucket", "clock", "ratelimitheader", "internal/clientip", "internal/deadline", "internal/route"},
	"ui":                   {"api", "policy"},
	"client":               {"proto", "bucket", "clock", "internal/batcher", "ratelimitheader", "internal/clientip", "internal/deadline"},
	"node":                 nodeImports,
	"cmd":                  nil, // wires everything
	// Test infrastructure: imported by tests only (see testOnly).
	"internal/testkit":     nil,
	"internal/faultnet":    {},
	"internal/harness":     nil,
	"internal/openapitest": {},
}

// nodeImports are what the node as a library may import: every library
// package. Only cmd (and tests) import node.
var nodeImports = []string{"clock", "bucket", "ring", "cluster", "proto", "peer", "forward", "policy", "rls", "ratelimitheader", "api", "ui", "internal/batcher", "internal/deadline", "internal/certfile", "internal/clientip", "internal/grpcmetrics", "internal/buildinfo", "internal/route", "internal/suggest", "internal/connlimit"}

// testOnly are packages no non-test file outside them may import.
var testOnly = []string{"internal/testkit", "internal/faultnet", "internal/harness", "internal/openapitest"}

// unit is the key of allowed for a path relative to the module root.
func unit(rel string) string {
	parts := strings.SplitN(rel, "/", 3)
	if parts[0] == "internal" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
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
				if d := unit(strings.TrimPrefix(p, module)); slices.Contains(testOnly, d) && !slices.Contains(testOnly, top) {
					t.Errorf("%s imports %s, which is for tests only", path, p)
				}
				continue
			}
			dep := unit(strings.TrimPrefix(p, module))
			if slices.Contains(testOnly, dep) && !slices.Contains(testOnly, top) {
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
