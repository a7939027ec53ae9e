package buildinfo

import (
	"runtime"
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
