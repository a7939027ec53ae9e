package rls

import (
	"testing"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// TestMain fails the run if a test leaves a goroutine behind (a watcher
// that outlives its context).
func TestMain(m *testing.M) { testkit.Main(m) }
