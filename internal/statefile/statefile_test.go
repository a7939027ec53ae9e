package statefile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var h = Header{Node: "node-1", Cluster: "prod", At: 1_764_806_400_000_000_000}

// A file written reads back as written, and a second write replaces it
// whole, leaving no temporary file behind.
func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	for _, payload := range [][]byte{[]byte("first state"), {}, bytes.Repeat([]byte{0xff}, 1<<16)} {
		n, err := Write(dir, h, payload)
		if err != nil {
			t.Fatal(err)
		}
		got, p, err := Read(dir, "node-1", "prod")
		if err != nil || got != h || !bytes.Equal(p, payload) {
			t.Fatalf("read back %+v, %d bytes, %v; want %+v and %d bytes", got, len(p), err, h, len(payload))
		}
		if fi, _ := os.Stat(filepath.Join(dir, Name)); fi.Size() != int64(n) {
			t.Fatalf("file is %d bytes, Write said %d", fi.Size(), n)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != Name {
		t.Fatalf("directory holds %v, want only %s", ents, Name)
	}
}

// A directory without a file answers fs.ErrNotExist: a node's first start.
func TestReadMissing(t *testing.T) {
	if _, _, err := Read(t.TempDir(), "node-1", ""); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%v, want fs.ErrNotExist", err)
	}
}

// A file cut short at any length, and one with any single byte changed,
// is refused as corrupt (or, a changed version, as of an unknown version),
// never read as another state.
func TestCorrupt(t *testing.T) {
	b := Encode(h, []byte("spent: 700 of 1000"))
	for n := range len(b) {
		if _, _, err := Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("cut to %d of %d bytes: %v, want ErrCorrupt", n, len(b), err)
		}
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x20
		_, _, err := Decode(c)
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			t.Fatalf("byte %d changed: %v, want refused", i, err)
		}
	}
	if _, _, err := Decode(append(bytes.Clone(b), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a byte appended: %v, want ErrCorrupt", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, Name), b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Read(dir, "node-1", "prod")
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("a truncated file: %v", err)
	}
}

// A file of another version, node or cluster is refused, saying whose.
func TestRefused(t *testing.T) {
	b := Encode(h, nil)
	v2 := bytes.Clone(b)
	v2[len(magic)+3] = 2
	if _, _, err := Decode(v2); !errors.Is(err, ErrVersion) || err.Error() != "statefile: unknown version 2 (this build reads version 1)" {
		t.Fatalf("version 2: %v", err)
	}
	dir := t.TempDir()
	if _, err := Write(dir, h, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ node, cluster string }{{"node-2", "prod"}, {"node-1", ""}, {"node-1", "staging"}} {
		_, _, err := Read(dir, c.node, c.cluster)
		if !errors.Is(err, ErrForeign) || !strings.Contains(err.Error(), `written by node "node-1" of cluster "prod"`) {
			t.Fatalf("read as %s of %q: %v", c.node, c.cluster, err)
		}
	}
	if _, _, err := Decode([]byte("{\"not\":\"a state file\"}")); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "not a ringlimit state file") {
		t.Fatalf("another file: %v", err)
	}
}

// A temporary file a crash left beside the state file changes nothing:
// the state file is read, and the next write replaces it.
func TestLeftoverTemporary(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir, h, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "."+Name+"-123"), []byte("half a fi"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, p, err := Read(dir, "node-1", "prod"); err != nil || string(p) != "kept" {
		t.Fatalf("%q, %v", p, err)
	}
}

// Write fails, and leaves the state file as it was, in a directory it
// cannot write.
func TestWriteFails(t *testing.T) {
	if _, err := Write(filepath.Join(t.TempDir(), "missing"), h, nil); err == nil {
		t.Fatal("Write into a missing directory succeeded")
	}
}
