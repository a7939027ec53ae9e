package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builds holds the binaries Build made in this test binary's run: each
// package is built once, however many tests run it.
var builds struct {
	mu   sync.Mutex
	dir  string // made on the first Build, removed by Main
	done map[string]*build
}

type build struct {
	once sync.Once
	bin  string
	err  error
}

// Build builds the main package pkg (a path as go build takes it, relative
// to the test's directory: ".", "../node") once per test binary run and
// returns the binary's path; later calls for the same package return the
// same binary. The binary must not be modified. It is removed when the run
// ends if the package's TestMain calls Main; otherwise it stays in the
// system's temporary directory.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := BuildBinary(pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildBinary is Build for a TestMain, which has no testing.TB: it returns
// the error instead of failing a test.
func BuildBinary(pkg string) (string, error) {
	abs, err := filepath.Abs(pkg)
	if err != nil {
		return "", err
	}
	builds.mu.Lock()
	if builds.done == nil {
		builds.done = map[string]*build{}
	}
	if builds.dir == "" {
		if builds.dir, err = os.MkdirTemp("", "ringlimit-build-"); err != nil {
			builds.mu.Unlock()
			return "", err
		}
	}
	b := builds.done[abs]
	if b == nil {
		b = &build{bin: filepath.Join(builds.dir, fmt.Sprintf("%d-%s", len(builds.done), filepath.Base(abs)))}
		builds.done[abs] = b
	}
	builds.mu.Unlock()
	b.once.Do(func() {
		if out, err := exec.Command("go", "build", "-o", b.bin, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	return b.bin, b.err
}

// RemoveBuilds removes what Build and BuildBinary made; Main calls it when
// the run ends. A later Build builds again.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir, builds.done = "", nil
	}
}
