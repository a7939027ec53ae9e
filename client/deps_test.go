package client_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// benchOnlyModules are dependencies of cmd/bench (its own module) that a
// program importing only the client must never pull in.
var benchOnlyModules = []string{
	"github.com/redis/go-redis",
	"github.com/go-redis/redis_rate",
	"golang.org/x/image",
}

// TestDepsClientOnly builds, in a temporary module, a program that imports
// only the client, and checks that its module graph (`go list -m all`)
// holds none of cmd/bench's dependencies. It runs the go command with
// GOPROXY=off against the local module cache and a copy of the root go.sum,
// so it needs no network once the root module's dependencies are
// downloaded.
func TestDepsClientOnly(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	rootMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(rootMod, []byte("module github.com/ringlimit/ringlimit\n")) {
		t.Fatalf("%s/go.mod is not the ringlimit root module", root)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/clientonly\n\ngo 1.26.0\n\n" +
			"require github.com/ringlimit/ringlimit v0.0.0\n\n" +
			"replace github.com/ringlimit/ringlimit => " + filepath.ToSlash(root) + "\n",
		"go.sum": string(sum),
		"main.go": `package main

import "github.com/ringlimit/ringlimit/client"

func main() {
	c, err := client.New(client.Config{Targets: []string{"127.0.0.1:1"}})
	if err != nil {
		panic(err)
	}
	c.Close()
}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			"GOFLAGS=-mod=mod -buildvcs=false",
			"GOPROXY=off",
			"GOSUMDB=off",
			"GOWORK=off",
			"GOTOOLCHAIN=local",
		)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("go %s: %v", strings.Join(args, " "), err)
			}
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return string(out)
	}

	graph := goCmd("list", "-m", "all")
	var modules []string
	sc := bufio.NewScanner(strings.NewReader(graph))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			modules = append(modules, f[0])
		}
	}
	if !slices.Contains(modules, "github.com/ringlimit/ringlimit") {
		t.Fatalf("go list -m all does not list github.com/ringlimit/ringlimit:\n%s", graph)
	}
	for _, m := range modules {
		for _, bad := range benchOnlyModules {
			if m == bad || strings.HasPrefix(m, bad+"/") {
				t.Errorf("a program importing only the client depends on %s; it belongs in cmd/bench/go.mod, not the root go.mod", m)
			}
		}
	}

	goCmd("build", "-o", filepath.Join(dir, "clientonly"), ".")
}
