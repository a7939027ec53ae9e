package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The image tag scheme: releases are tagged vX.Y.Z in git and the image
// built from a release tag is imageRepository:X.Y.Z. The chart, the
// Kubernetes manifests and compose default to the current release.
const (
	currentRelease  = "v0.1.0"
	imageRepository = "ghcr.io/ringlimit/ringlimit-node"
	releaseImage    = imageRepository + ":0.1.0"
)

// imageRefs matches the image references a text names.
var imageRefs = regexp.MustCompile(`[a-z0-9][a-z0-9./-]*ringlimit-node:[A-Za-z0-9._<>-]+`)

// scriptRef runs scripts/image.sh --ref in a fresh git repository that holds
// the script alone, after commits and tags made by setup, and returns what
// it prints: the reference it would build.
func scriptRef(t *testing.T, setup func(git func(args ...string) string)) string {
	t.Helper()
	gitTool, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	script, err := os.ReadFile("../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "image.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=ringlimit", "GIT_AUTHOR_EMAIL=ringlimit@example.com",
		"GIT_COMMITTER_NAME=ringlimit", "GIT_COMMITTER_EMAIL=ringlimit@example.com")
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "IMAGE_REPOSITORY=") })
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", filepath.Base(name), args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git := func(args ...string) string { t.Helper(); return run(gitTool, args...) }
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	setup(git)
	return run(filepath.Join(dir, "scripts", "image.sh"), "--ref")
}

// TestImageTagScheme: scripts/image.sh names the image of the commit tagged
// v0.1.0 releaseImage, and git describe's form for other commits.
func TestImageTagScheme(t *testing.T) {
	check(t, "image.sh on the release tag", scriptRef(t, func(git func(...string) string) {
		git("tag", currentRelease)
	}), releaseImage)

	var head string
	got := scriptRef(t, func(git func(...string) string) {
		git("tag", currentRelease)
		git("commit", "-q", "--allow-empty", "-m", "second")
		git("commit", "-q", "--allow-empty", "-m", "third")
		head = git("rev-parse", "--short=7", "HEAD")
	})
	check(t, "image.sh two commits after the tag", got, imageRepository+":0.1.0-2-g"+head)

	got = scriptRef(t, func(git func(...string) string) {
		head = git("rev-parse", "--short=7", "HEAD")
	})
	check(t, "image.sh before any release tag", got, imageRepository+":0.0.0-g"+head)
}

// TestImageTagEverywhere: the chart, the manifests, compose and the README
// name the image scripts/image.sh builds from the current release's tag,
// and name no other image but the scheme's placeholders.
func TestImageTagEverywhere(t *testing.T) {
	ch := loadChart(t)
	check(t, "Chart.yaml appVersion", "v"+ch.Metadata.AppVersion, currentRelease)
	check(t, "chart image", container(t, render(t, "", nil).statefulSet(t)).Image, releaseImage)
	check(t, "manifests image", container(t, loadManifests(t).statefulSet(t)).Image, releaseImage)
	for name, s := range loadCompose(t).Services {
		check(t, "compose "+name+" image", s.Image, "${RINGLIMIT_IMAGE:-"+releaseImage+"}")
	}

	// Every image reference in these files is the release's, or the
	// scheme's placeholder.
	allowed := []string{releaseImage, imageRepository + ":X.Y.Z"}
	for _, file := range []string{"../README.md", "../Containerfile", "../scripts/image.sh", "compose/compose.yaml",
		"kubernetes/statefulset.yaml", "helm/ringlimit/values.yaml", "helm/ringlimit/Chart.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range imageRefs.FindAllString(string(data), -1) {
			if !slices.Contains(allowed, ref) {
				t.Errorf("%s names the image %s, want %s", file, ref, strings.Join(allowed, " or "))
			}
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"tagged `vX.Y.Z`", "`" + imageRepository + ":X.Y.Z`", "`" + releaseImage + "`", "$(scripts/image.sh)"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("README.md does not say %s", s)
		}
	}
}

// TestComposePortsClearOfLocalCluster: compose publishes no host port that
// scripts/local-cluster.sh uses for up to 9 nodes with its default bases.
func TestComposePortsClearOfLocalCluster(t *testing.T) {
	script, err := os.ReadFile("../scripts/local-cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	base := func(pattern string) int {
		t.Helper()
		m := regexp.MustCompile(pattern).FindSubmatch(script)
		if m == nil {
			t.Fatalf("scripts/local-cluster.sh: no %s", pattern)
		}
		n, err := strconv.Atoi(string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	grpc := base(`grpc_base=\$\{RINGLIMIT_GRPC_BASE:-(\d+)\}`)
	bases := []int{
		base(`http_base=\$\{RINGLIMIT_HTTP_BASE:-(\d+)\}`), grpc,
		grpc + base(`peer_base=\$\{RINGLIMIT_PEER_BASE:-\$\(\(grpc_base \+ (\d+)\)\)\}`),
		base(`gossip_base=\$\{RINGLIMIT_GOSSIP_BASE:-(\d+)\}`),
	}
	check(t, "local cluster bases", bases, []int{8080, 9090, 9190, 7946})
	used := map[int]bool{}
	for _, b := range bases {
		for i := 1; i <= 9; i++ {
			used[b+i] = true
		}
	}
	var published int
	for name, s := range loadCompose(t).Services {
		for _, p := range s.Ports {
			host, _, ok := strings.Cut(p, ":")
			n, err := strconv.Atoi(host)
			if !ok || err != nil {
				t.Errorf("%s: port %q: want HOST:CONTAINER", name, p)
				continue
			}
			published++
			if used[n] {
				t.Errorf("%s publishes host port %d, which scripts/local-cluster.sh uses", name, n)
			}
			if n >= 32768 {
				t.Errorf("%s publishes host port %d, in the ephemeral range", name, n)
			}
		}
	}
	check(t, "published ports", published, 6)
}

// TestBinariesReportTag: ringlimit-node and ringlimit built with a plain go
// build from a clone of this repository tagged v0.1.0 report v0.1.0 and the
// tagged commit: the toolchain stamps them, no -ldflags needed. (The clone
// is of the last commit; -trimpath and CGO_ENABLED=0, as scripts/image.sh
// builds, only let the build reuse the cache.)
func TestBinariesReportTag(t *testing.T) {
	gitTool, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool")
	}
	if out, err := exec.Command(gitTool, "-C", "..", "rev-parse", "--git-dir").CombinedOutput(); err != nil {
		t.Skipf("not a git checkout: %s", out)
	}
	dir := filepath.Join(t.TempDir(), "ringlimit")
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_COMMITTER_NAME=ringlimit", "GIT_COMMITTER_EMAIL=ringlimit@example.com",
		"GOFLAGS=-buildvcs=true", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	run := func(wd, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = wd, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", filepath.Base(name), args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("..", gitTool, "clone", "--quiet", "--shared", "--no-tags", ".", dir)
	run(dir, gitTool, "tag", currentRelease)
	head := run(dir, gitTool, "rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "bin") + string(filepath.Separator)
	run(dir, goTool, "build", "-trimpath", "-o", bin, "./cmd/node", "./cmd/ringlimit")

	check(t, "ringlimit-node version", strings.SplitN(run(dir, filepath.Join(bin, "node"), "version"), ", ", 2)[0],
		"ringlimit-node "+currentRelease+" (commit "+head)
	check(t, "ringlimit version", strings.SplitN(run(dir, filepath.Join(bin, "ringlimit"), "version"), ", ", 2)[0],
		"ringlimit "+currentRelease+" (commit "+head)
}
