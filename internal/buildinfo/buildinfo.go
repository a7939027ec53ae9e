// Package buildinfo says which build a ringlimit binary is: its version,
// the commit it was built from and the Go version.
//
// Releases are tagged vX.Y.Z in git. A binary built from a tagged commit
// reports that tag whichever way it was built: scripts/image.sh and
// scripts/local-cluster.sh pass `git describe` with -ldflags, and a plain
// `go build` or `go install` (Go 1.24 or later, with VCS stamping on) records
// the tag as the main module's version, which Read falls back to. A build
// from an untagged commit reports git describe's form (v0.1.0-3-gabc1234)
// or Go's pseudo-version (v0.1.1-0.20261203120000-abc123456789); a build
// with neither reports "devel".
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
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	v, rev = choose(version, commit, bi)
	return v, rev, runtime.Version()
}

// choose picks the version and commit from the build-time values and the
// binary's build information (nil when it has none).
func choose(version, commit string, bi *debug.BuildInfo) (v, rev string) {
	v, rev = version, commit
	if bi == nil {
		return cmp.Or(v, "devel"), cmp.Or(rev, "unknown")
	}
	if v == "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if rev == "" {
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
	}
	return cmp.Or(v, "devel"), cmp.Or(rev, "unknown")
}
