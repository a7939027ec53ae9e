package rls

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ringlimit/ringlimit/clock"
)

// A Manager has no clock of its own: NewManager refuses a config without
// one, by the field's name; with one and no Logger it starts.
func TestNewManagerRequiresClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	if err := os.WriteFile(path, []byte(goodV1), 0o644); err != nil {
		t.Fatal(err)
	}
	const want = "rls: ManagerConfig.Clock is required"
	if m, err := NewManager(ManagerConfig{Path: path}); m != nil || err == nil || err.Error() != want {
		t.Errorf("NewManager without a Clock = %v, %v; want nil, %q", m, err, want)
	}
	if _, err := NewManager(ManagerConfig{Path: path, Clock: clock.System()}); err != nil {
		t.Fatalf("NewManager with a Clock and no Logger: %v", err)
	}
}
