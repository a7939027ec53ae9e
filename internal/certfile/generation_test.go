package certfile_test

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/certfile"
)

// Generation changes with every load that changed the set, and only then.
func TestGeneration(t *testing.T) {
	f := newFiles(t)
	ca := newCA(t, "gen CA")
	cert, key, err := ca.Issue("node-1", []string{"node-1"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	write(t, f.ca, ca.CertPEM())
	write(t, f.cert, cert)
	write(t, f.key, key)
	s, err := certfile.Load(f.all())
	if err != nil {
		t.Fatal(err)
	}
	step := func(i int, what string, wantChanged, wantErr bool, wantGen uint64) {
		t.Helper()
		changed, err := s.Reload()
		if changed != wantChanged || (err != nil) != wantErr || s.Generation() != wantGen {
			t.Errorf("step %d (%s): Reload() = %v, %v; Generation() = %d; want %v, error %v, %d", i, what, changed, err, s.Generation(), wantChanged, wantErr, wantGen)
		}
	}
	if s.Generation() != 1 {
		t.Fatalf("Generation() after Load = %d, want 1", s.Generation())
	}
	step(0, "nothing changed", false, false, 1)
	write(t, f.ca, append(ca.CertPEM(), newCA(t, "next CA").CertPEM()...))
	step(1, "a CA added", true, false, 2)
	write(t, f.key, []byte("not a key"))
	step(2, "a bad key", false, true, 2)
	write(t, f.key, key)
	step(3, "the key back", false, false, 2)
}
