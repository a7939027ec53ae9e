package testkit

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A dead address refuses a dial, and its port stays taken while the test
// runs: nothing can listen there, whether it asks for the port or for
// port 0.
func TestDeadAddr(t *testing.T) {
	addr := DeadAddr(t)
	_, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		ln.Close()
		t.Fatalf("listening on the dead address %s succeeded: its port is free for anyone", addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on %s: %v, want address in use", addr, err)
	}
}
