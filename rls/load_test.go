package rls

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "b.yml"), "domain: email\ndescriptors:\n  - key: to\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	write(t, filepath.Join(dir, "a.yaml"), "domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n")
	// Skipped: hidden files, other extensions, subdirectories.
	write(t, filepath.Join(dir, ".a.yaml.swp"), "not: yaml: at all")
	write(t, filepath.Join(dir, ".hidden.yaml"), "domain: hidden\n")
	write(t, filepath.Join(dir, "notes.txt"), "domain: notes\n")
	write(t, filepath.Join(dir, "sub", "c.yaml"), "domain: sub\n")
	if err := os.Mkdir(filepath.Join(dir, "d.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}

	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Domains(), []string{"email", "messaging"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %q, want %q", got, want)
	}
	if r, ok := c.Match("email", desc("to", "x@example.com")); !ok || r.RequestsPerUnit != 10 {
		t.Errorf("Match(email) = %+v, %v", r, ok)
	}
	if r, ok := c.Match("messaging", desc("to_number", "1")); !ok || r.RequestsPerUnit != 100 {
		t.Errorf("Match(messaging) = %+v, %v", r, ok)
	}
	// The version is that of the files in name order.
	want, err := Parse([]File{
		{Name: filepath.Join(dir, "a.yaml"), Data: []byte("domain: messaging\ndescriptors:\n  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}\n")},
		{Name: filepath.Join(dir, "b.yml"), Data: []byte("domain: email\ndescriptors:\n  - key: to\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version() != want.Version() {
		t.Errorf("Version() = %s, want %s", c.Version(), want.Version())
	}

	write(t, filepath.Join(dir, "c.yaml"), "\ndomain: email\n")
	_, err = Load(dir)
	wantErr := `rls: ` + filepath.Join(dir, "c.yaml") + `:2: duplicate domain "email" in config file (first in ` + filepath.Join(dir, "b.yml") + `)`
	if err == nil || err.Error() != wantErr {
		t.Errorf("Load with a duplicate domain = %v, want %s", err, wantErr)
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rls.yaml")
	write(t, path, "domain: d\n")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domains(); !slices.Equal(got, []string{"d"}) {
		t.Errorf("Domains() = %q", got)
	}
	if _, err := Load(path + ".missing"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Load(missing) = %v", err)
	}
	write(t, path, strings.Repeat("#", MaxFileBytes+1))
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(too large) = %v", err)
	}
}

func TestLoadEmptyDirectory(t *testing.T) {
	c, err := Load(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domains(); len(got) != 0 {
		t.Errorf("Domains() = %q, want none", got)
	}
	if _, ok := c.Match("any", desc("a", "b")); ok {
		t.Error("an empty configuration matched")
	}
}
