package node

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// openFiles counts this process's file descriptors that point at path.
func openFiles(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}

// TestStartReleasesOnFailure makes each step of Start fail in turn
// and checks that whatever the earlier steps opened is released: the
// listeners' addresses can be bound again, the audit log is closed, and no
// goroutine is left behind.
func TestStartReleasesOnFailure(t *testing.T) {
	dir := t.TempDir()
	pol, err := filepath.Abs("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(dir, "audit.log")
	for _, step := range startSteps {
		t.Run(step, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			cfg := DefaultLocalConfig()
			cfg.Name, cfg.HTTPAddr, cfg.GRPCAddr, cfg.PeerAddr, cfg.GossipAddr = "n1", testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
			cfg.MaxKeys, cfg.PolicyPath, cfg.AuditPath, cfg.failAt = 1000, pol, audit, step
			n, err := Start(t.Context(), cfg)
			if err == nil {
				n.Close(t.Context())
				t.Fatalf("Start with a failure at %q succeeded", step)
			}
			if !strings.Contains(err.Error(), step) {
				t.Fatalf("error %q does not name the step %q", err, step)
			}
			for _, addr := range []string{cfg.HTTPAddr, cfg.GRPCAddr, cfg.PeerAddr} {
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatalf("%s still bound after a failure at %q: %v", addr, step, err)
				}
				ln.Close()
			}
			if n := openFiles(t, audit); n != 0 {
				t.Fatalf("audit log open %d times after a failure at %q", n, step)
			}
		})
	}
}
