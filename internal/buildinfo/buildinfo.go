// Package buildinfo says which build a ringlimit binary is: its version,
// the commit it was built from and the Go version.
package buildinfo

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// Read returns the version (version, else the module version, else
// "devel"), the commit (commit, else the VCS revision the Go toolchain
// recorded, with "-dirty" for a modified tree, else "unknown") and the Go
// version. version and commit are what the binary was given at build time
// (-ldflags "-X main.version=v1.2.3 -X main.commit=...").
func Read(version, commit string) (v, rev, goVersion string) {
	v, rev, goVersion = version, commit, runtime.Version()
	bi, ok := debug.ReadBuildInfo()
	if !ok || rev != "" {
		return cmp.Or(v, "devel"), cmp.Or(rev, "unknown"), goVersion
	}
	if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && rev != "" {
		rev += "-dirty"
	}
	return cmp.Or(v, "devel"), cmp.Or(rev, "unknown"), goVersion
}
