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

// allowed lists, for each package (by its top-level directory), the
// project packages its non-test code may import. Imports go one way: the
// lower packages (bucket, ring, cluster, proto) import no project package.
var allowed = map[string][]string{
	"bucket":  {},
	"ring":    {},
	"cluster": {},
	"proto":   {},
	"forward": {"bucket", "ring", "proto"},
	"policy":  {"bucket"},
	"api":     {"policy", "forward", "proto", "bucket"},
	"client":  {"proto"},
	"cmd":     nil, // wires everything
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
		top := strings.SplitN(filepath.ToSlash(path), "/", 2)[0]
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
			if !strings.HasPrefix(p, module) || rules == nil {
				continue
			}
			dep := strings.SplitN(strings.TrimPrefix(p, module), "/", 2)[0]
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
