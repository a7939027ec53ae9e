package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// syncBuffer is a bytes.Buffer safe for the watcher goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// A second valid policy: free gets 20/s.
const policyV2 = `version: v2
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 20, per: 1s, burst: 40 }
      enterprise: { limit: 1000, per: 1s, burst: 5000 }
    global: { limit: 2000, per: 1s, burst: 6000 }
`

const policyV3 = `version: v3
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 30, per: 1s }
`

type fixture struct {
	m     *Manager
	path  string
	reg   *prometheus.Registry
	audit *syncBuffer
	logs  *syncBuffer
	clock *testkit.Clock // nil when the Manager runs on the system clock
}

// newFixture writes the example file to a temporary directory and starts a
// Manager on it, on a fake clock at t0 that moves only when the test says.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	fc := testkit.NewClock(clock.FromTime(t0))
	f := newFixtureOn(t, fc)
	f.clock = fc
	return f
}

// newFixtureOn is newFixture with the Manager on c.
func newFixtureOn(t *testing.T, c clock.Clock) *fixture {
	t.Helper()
	f := &fixture{
		path:  filepath.Join(t.TempDir(), "policy.yaml"),
		reg:   prometheus.NewRegistry(),
		audit: &syncBuffer{},
		logs:  &syncBuffer{},
	}
	f.write(t, readExample(t))
	m, err := NewManager(ManagerConfig{
		Path:       f.path,
		AuditLog:   f.audit,
		Logger:     slog.New(slog.NewTextHandler(f.logs, nil)),
		Registerer: f.reg,
		Clock:      c,
	})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	f.m = m
	return f
}

// setClock moves the fake clock forward to when.
func (f *fixture) setClock(t *testing.T, when time.Time) {
	t.Helper()
	d := clock.FromTime(when).Sub(f.clock.Now())
	if d < 0 {
		t.Fatalf("setClock(%v): the clock is at %v already", when, f.clock.Now().Time())
	}
	f.clock.Advance(d)
}

func (f *fixture) write(t *testing.T, data []byte) {
	t.Helper()
	if err := os.WriteFile(f.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// renameOver replaces the file the way editors and config managers do.
func (f *fixture) renameOver(t *testing.T, data []byte) {
	t.Helper()
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".policy-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tmp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		t.Fatal(err)
	}
}

// auditLines decodes the audit log, one JSON object per line.
func (f *fixture) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSuffix(f.audit.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("audit line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// wantAudit fails unless line has exactly the fields of want.
func wantAudit(t *testing.T, name string, line, want map[string]any) {
	t.Helper()
	if len(line) != len(want) {
		t.Errorf("%s: audit line\n got  %v\n want %v", name, line, want)
		return
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s: audit %s:\n got  %v\n want %v", name, k, line[k], v)
		}
	}
}

// metricValue returns the value of the counter or gauge name with the
// label pair, or 0 if it has no sample.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := false
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if match {
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func wantMetric(t *testing.T, what string, reg *prometheus.Registry, name, label, value string, want float64) {
	t.Helper()
	if got := metricValue(t, reg, name, label, value); got != want {
		t.Errorf("%s: %s{%s=%q}: got %v, want %v", what, name, label, value, got, want)
	}
}

// eventually calls poke, then polls cond, poking again every 250ms, until
// cond holds or 5s pass.
func eventually(t *testing.T, name string, poke func(), cond func() bool) {
	t.Helper()
	var poked time.Time
	testkit.Eventually(t, 5*time.Second, name, func() bool {
		if time.Since(poked) >= 250*time.Millisecond {
			poke()
			poked = time.Now()
		}
		return cond()
	})
}

func TestNewManager(t *testing.T) {
	f := newFixture(t)
	set := f.m.Current()
	want := exampleSet(t)
	equal(t, "startup", "Version", set.Version, want.Version)
	equal(t, "startup", "Source", set.Source, f.path)
	equal(t, "startup", "Policies", set.Policies, want.Policies)

	lines := f.auditLines(t)
	if len(lines) != 1 {
		t.Fatalf("startup: %d audit lines, want 1: %v", len(lines), lines)
	}
	wantAudit(t, "startup", lines[0], map[string]any{"time": "2026-11-29T12:00:00Z", "actor": "startup",
		"action": "policy_reload", "what": f.path, "new": set.Version})
	wantMetric(t, "startup", f.reg, "ringlimit_policy_reloads_total", "result", "ok", 1)
	wantMetric(t, "startup", f.reg, "ringlimit_policy_reloads_total", "result", "error", 0)
	wantMetric(t, "startup", f.reg, "ringlimit_policy_info", "version", set.Version, 1)

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		path string
		want string
	}{
		{"no path", "", "Path is required"},
		{"missing file", filepath.Join(dir, "absent.yaml"), "absent.yaml"},
		{"bad file", bad, "bad.yaml: policies: at least one policy is required"},
	} {
		reg := prometheus.NewRegistry()
		m, err := NewManager(ManagerConfig{Path: c.path, Registerer: reg, Clock: clock.System(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if m != nil {
			t.Errorf("%s: got a manager, want nil", c.name)
		}
		wantErrContains(t, c.name, err, c.want)
		// A manager that failed to start registers nothing: a retry with the
		// same registry is possible.
		if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
			t.Errorf("%s: the failed manager left %d metric families registered (%v)", c.name, len(mfs), err)
		}
	}
}

func TestReload(t *testing.T) {
	f := newFixture(t)
	v1 := f.m.Current().Version

	// A changed file: a new version and an audit line.
	f.setClock(t, t0.Add(time.Minute))
	f.write(t, []byte(policyV2))
	if err := f.m.Reload("ops@example"); err != nil {
		t.Fatalf("reload v2: %v", err)
	}
	v2 := f.m.Current().Version
	if !strings.HasPrefix(v2, "v2-") || v2 == v1 {
		t.Fatalf("reload v2: version %q, want v2-<hash>", v2)
	}
	lines := f.auditLines(t)
	if len(lines) != 2 {
		t.Fatalf("reload v2: %d audit lines, want 2", len(lines))
	}
	wantAudit(t, "reload v2", lines[1], map[string]any{"time": "2026-11-29T12:01:00Z", "actor": "ops@example",
		"action": "policy_reload", "what": f.path, "old": v1, "new": v2})
	wantMetric(t, "reload v2", f.reg, "ringlimit_policy_reloads_total", "result", "ok", 2)
	wantMetric(t, "reload v2", f.reg, "ringlimit_policy_info", "version", v2, 1)
	wantMetric(t, "reload v2", f.reg, "ringlimit_policy_info", "version", v1, 0)
	if got, err := f.m.Resolve(Request{User: "42"}); err != nil || got[0].Limit.Count() != 20 {
		t.Errorf("reload v2: Resolve: got %+v, %v, want the free tier at 20/s", got, err)
	}

	// Bad files: an error, the version stays, the error counter counts.
	bad := []struct{ name, yaml, want string }{
		{"syntax", "policies: [\n", "yaml:"},
		{"unknown algorithm", "policies:\n  api:\n    tiers:\n      free: {algorithm: gcra, limit: 1, per: 1s}\n", "policies.api.tiers.free.algorithm"},
		{"negative rate", "policies:\n  api:\n    tiers:\n      free: {limit: -1, per: 1s}\n", "policies.api.tiers.free.limit"},
		{"duplicate tier", "policies:\n  api:\n    tiers:\n      free: {limit: 1, per: 1s}\n      free: {limit: 2, per: 1s}\n", `mapping key "free" already defined`},
		{"empty", "", "empty file"},
	}
	for i, c := range bad {
		f.write(t, []byte(c.yaml))
		err := f.m.Reload("ops@example")
		wantErrContains(t, "bad "+c.name, err, f.path, c.want)
		equal(t, "bad "+c.name, "version", f.m.Current().Version, v2)
		wantMetric(t, "bad "+c.name, f.reg, "ringlimit_policy_reloads_total", "result", "error", float64(i+1))
		wantMetric(t, "bad "+c.name, f.reg, "ringlimit_policy_reloads_total", "result", "ok", 2)
		wantMetric(t, "bad "+c.name, f.reg, "ringlimit_policy_info", "version", v2, 1)
	}
	if n := len(f.auditLines(t)); n != 2 {
		t.Errorf("bad files: %d audit lines, want still 2", n)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "policy reload refused; the running policy stays") || !strings.Contains(logs, "running="+v2) {
		t.Errorf("bad files: log %q, want a refusal line naming the running version", logs)
	}

	// A missing file is refused too.
	if err := os.Remove(f.path); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Reload("ops@example"); err == nil {
		t.Error("missing file: got no error")
	}
	equal(t, "missing file", "version", f.m.Current().Version, v2)

	// The same content again: no reload, no audit line.
	f.write(t, []byte(policyV2))
	if err := f.m.Reload("ops@example"); err != nil {
		t.Fatalf("reload unchanged: %v", err)
	}
	equal(t, "unchanged", "version", f.m.Current().Version, v2)
	if n := len(f.auditLines(t)); n != 2 {
		t.Errorf("unchanged: %d audit lines, want still 2", n)
	}
	wantMetric(t, "unchanged", f.reg, "ringlimit_policy_reloads_total", "result", "ok", 2)

	// A file over MaxFileBytes is refused.
	f.write(t, append([]byte(policyV3+"#"), bytes.Repeat([]byte("x"), MaxFileBytes)...))
	wantErrContains(t, "too large", f.m.Reload("ops"), "larger than 1048576 bytes")
	equal(t, "too large", "version", f.m.Current().Version, v2)
}

func TestWatch(t *testing.T) {
	// The file watcher and its debounce run in real time: this test polls
	// the filesystem's events, so its Manager is on the system clock, not a
	// fake one it would have to move while it waits.
	f := newFixtureOn(t, clock.System())
	v1 := f.m.Current().Version
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.m.Watch(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch returned %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after cancel")
		}
	}()

	// Written in place.
	eventually(t, "watch: write in place",
		func() { f.write(t, []byte(policyV2)) },
		func() bool { return f.m.Current().Version != v1 })
	v2 := f.m.Current().Version
	if !strings.HasPrefix(v2, "v2-") {
		t.Fatalf("watch: version %q, want v2-...", v2)
	}

	// A bad file: refused, the version stays.
	errs := metricValue(t, f.reg, "ringlimit_policy_reloads_total", "result", "error")
	eventually(t, "watch: bad file refused",
		func() { f.write(t, []byte("policies:\n  api:\n    tiers:\n      free: {limit: 0, per: 1s}\n")) },
		func() bool { return metricValue(t, f.reg, "ringlimit_policy_reloads_total", "result", "error") > errs })
	equal(t, "watch: bad file", "version", f.m.Current().Version, v2)

	// Replaced by a rename.
	eventually(t, "watch: rename over",
		func() { f.renameOver(t, []byte(policyV3)) },
		func() bool { return f.m.Current().Version != v2 })
	v3 := f.m.Current().Version
	if !strings.HasPrefix(v3, "v3-") {
		t.Fatalf("watch: version %q, want v3-...", v3)
	}
	// The audit line is written just after the new set is published, so
	// the test waits for it rather than reading the log at once.
	var last map[string]any
	testkit.Eventually(t, 5*time.Second, "watch: audit line of the rename", func() bool {
		for _, l := range f.auditLines(t) {
			last = l
		}
		return last["new"] == v3
	})
	if last["actor"] != "file-watch" || last["old"] != v2 || last["new"] != v3 {
		t.Errorf("watch: last audit line %v, want actor file-watch, old %s, new %s", last, v2, v3)
	}

	// Another file in the directory is ignored: once a change of the
	// policy file written after it has been loaded, it has caused no
	// failed reload.
	errs = metricValue(t, f.reg, "ringlimit_policy_reloads_total", "result", "error")
	other := filepath.Join(filepath.Dir(f.path), "other.yaml")
	if err := os.WriteFile(other, []byte("garbage: ["), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watch: the policy file written after the other one",
		func() { f.write(t, []byte(policyV2)) },
		func() bool { return f.m.Current().Version == v2 })
	if got := metricValue(t, f.reg, "ringlimit_policy_reloads_total", "result", "error"); got != errs {
		t.Errorf("watch: writing another file caused %v failed reloads", got-errs)
	}
}

func TestManagerResolve(t *testing.T) {
	f := newFixture(t)
	got, err := f.m.Resolve(Request{User: "42", Route: "/reports"})
	if err != nil {
		t.Fatal(err)
	}
	p := f.m.Current().Policies["api"]
	wantChecks(t, "default policy", got, []Check{
		checkOn(p.Tiers["free"], "p|api|tier:free|user:42", 10),
		checkOn(p.Global, "p|api|global|all", 10),
	})
	got, err = f.m.Resolve(Request{Policy: "api", APIKey: "k"})
	if err != nil || len(got) != 2 || got[0].Key != "p|api|tier:free|key:k" {
		t.Errorf("named policy: got %s, %v", fmtChecks(got), err)
	}
	_, err = f.m.Resolve(Request{Policy: "nope", User: "42"})
	wantRequestErr(t, "unknown policy", err, `policy: no policy named "nope"`)

	// Several policies and no "default": the request must name one.
	f.write(t, []byte("policies:\n  a:\n    tiers:\n"+okTier+"  b:\n    tiers:\n"+okTier))
	if err := f.m.Reload("ops"); err != nil {
		t.Fatal(err)
	}
	_, err = f.m.Resolve(Request{User: "42"})
	wantRequestErr(t, "no default policy", err, "several policies and no \"default\"")
}

func TestCountDryRun(t *testing.T) {
	f := newFixture(t)
	f.m.CountDryRun([]string{"route:/export/*", "tier:free", "route:/export/*"})
	f.m.CountDryRun(nil)
	wantMetric(t, "dry run", f.reg, "ringlimit_policy_dry_run_rejections_total", "scope", "route:/export/*", 2)
	wantMetric(t, "dry run", f.reg, "ringlimit_policy_dry_run_rejections_total", "scope", "tier:free", 1)
}

func TestOverrideLifecycle(t *testing.T) {
	f := newFixture(t)
	p := f.m.Current().Policies["api"]
	expires := t0.Add(10 * time.Minute)
	o, err := f.m.AddOverride(Override{Actor: "alice", Reason: "incident 7", User: "42", Tier: "enterprise", Expires: expires})
	if err != nil {
		t.Fatalf("AddOverride: %v", err)
	}
	wantID := fmt.Sprintf("ovr-%d-1", t0.UnixMilli())
	if o.ID != wantID || o.Policy != "api" || !o.Created.Equal(t0) || !o.Expires.Equal(expires) {
		t.Errorf("AddOverride: got %+v, want ID %s, policy api, created %v", o, wantID, t0)
	}
	lines := f.auditLines(t)
	if len(lines) != 2 {
		t.Fatalf("override: %d audit lines, want 2", len(lines))
	}
	wantAudit(t, "override", lines[1], map[string]any{"time": "2026-11-29T12:00:00Z", "actor": "alice", "action": "override",
		"what": "api|user:42", "reason": "incident 7", "new": "tier enterprise", "expires": "2026-11-29T12:10:00Z"})

	ov := *p.Tiers["enterprise"]
	ov.Scope = "override:tier:enterprise"
	overridden := []Check{
		checkOn(&ov, "p|api|override:tier:enterprise|user:42", 10),
		checkOn(p.Global, "p|api|global|all", 10),
	}
	normal := []Check{
		checkOn(p.Tiers["free"], "p|api|tier:free|user:42", 10),
		checkOn(p.Global, "p|api|global|all", 10),
	}
	resolve := func(name string, req Request, want []Check) {
		t.Helper()
		got, err := f.m.Resolve(req)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		wantChecks(t, name, got, want)
	}
	resolve("overridden user", Request{User: "42", Route: "/reports"}, overridden)
	f.setClock(t, expires.Add(-time.Nanosecond))
	resolve("just before expiry", Request{User: "42", Route: "/reports"}, overridden)
	resolve("another user", Request{User: "43", Route: "/reports"}, []Check{
		checkOn(p.Tiers["free"], "p|api|tier:free|user:43", 10),
		checkOn(p.Global, "p|api|global|all", 10),
	})
	// The override names the caller by user; a request identified by API
	// key is another caller.
	resolve("same user behind an API key", Request{APIKey: "k", User: "42"}, []Check{
		checkOn(p.Tiers["free"], "p|api|tier:free|key:k", 1),
		checkOn(p.Global, "p|api|global|all", 1),
	})
	if got := f.m.Overrides(); len(got) != 1 || got[0].ID != wantID {
		t.Errorf("Overrides before expiry: got %+v, want [%s]", got, wantID)
	}

	// Time is up: the override no longer applies, even before Expire runs.
	f.setClock(t, expires)
	resolve("at expiry", Request{User: "42", Route: "/reports"}, normal)
	if n := len(f.auditLines(t)); n != 2 {
		t.Errorf("at expiry, before Overrides(): %d audit lines, want 2", n)
	}
	f.setClock(t, expires.Add(time.Second))
	if got := f.m.Overrides(); len(got) != 0 {
		t.Errorf("Overrides after expiry: got %+v, want none", got)
	}
	lines = f.auditLines(t)
	if len(lines) != 3 {
		t.Fatalf("after expiry: %d audit lines, want 3", len(lines))
	}
	wantAudit(t, "expired", lines[2], map[string]any{"time": "2026-11-29T12:10:01Z", "actor": "system", "action": "override_expired",
		"what": "api|user:42", "old": "tier enterprise", "reason": "incident 7"})
	f.m.Expire()
	if n := len(f.auditLines(t)); n != 3 {
		t.Errorf("Expire again: %d audit lines, want still 3", n)
	}
	resolve("after expiry", Request{User: "42", Route: "/reports"}, normal)
}

func TestOverrideLimitAndReplace(t *testing.T) {
	f := newFixture(t)
	p := f.m.Current().Policies["api"]
	first, err := f.m.AddOverride(Override{Actor: "alice", Reason: "r1", APIKey: "k", Tier: "pro", Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// The same ID again (a broadcast seen twice): a no-op.
	again, err := f.m.AddOverride(first)
	if err != nil {
		t.Fatalf("same ID again: %v", err)
	}
	if again.ID != first.ID || again.Tier != "pro" {
		t.Errorf("same ID again: got %+v, want %+v", again, first)
	}
	if n := len(f.auditLines(t)); n != 2 {
		t.Errorf("same ID again: %d audit lines, want 2", n)
	}
	// Another override for the same caller replaces the first.
	f.setClock(t, t0.Add(time.Minute))
	second, err := f.m.AddOverride(Override{Actor: "bob", Reason: "r2", APIKey: "k",
		Limit: &LimitArg{Algorithm: "fixed_window", Limit: 50, Per: "1s"}, Expires: t0.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID {
		t.Errorf("second override: ID %s reused", second.ID)
	}
	lines := f.auditLines(t)
	if len(lines) != 3 {
		t.Fatalf("replace: %d audit lines, want 3", len(lines))
	}
	wantAudit(t, "replace", lines[2], map[string]any{"time": "2026-11-29T12:01:00Z", "actor": "bob", "action": "override",
		"what": "api|key:k", "reason": "r2", "old": "tier pro", "new": "limit 50 per 1s burst 0", "expires": "2026-11-29T14:00:00Z"})
	got, err := f.m.Resolve(Request{APIKey: "k", Cost: 50})
	if err != nil {
		t.Fatal(err)
	}
	ovl := &Layer{Scope: "override", Limit: lim(t, "fixed_window", 50, time.Second, 0), KeyBy: ByIdentity}
	wantChecks(t, "limit override", got, []Check{
		checkOn(ovl, "p|api|override|key:k", 50),
		checkOn(p.Global, "p|api|global|all", 50),
	})
	if list := f.m.Overrides(); len(list) != 1 || list[0].ID != second.ID {
		t.Errorf("Overrides: got %+v, want only %s", list, second.ID)
	}
}

func TestOverrideValidation(t *testing.T) {
	f := newFixture(t)
	in := t0.Add(10 * time.Minute)
	ok := Override{Actor: "alice", Reason: "incident", User: "42", Tier: "enterprise", Expires: in}
	with := func(mut func(o *Override)) Override {
		o := ok
		mut(&o)
		return o
	}
	cases := []struct {
		name string
		o    Override
		want string
		bug  string
	}{
		{"no actor", with(func(o *Override) { o.Actor = "" }), "actor and reason are required", ""},
		{"no reason", with(func(o *Override) { o.Reason = "" }), "actor and reason are required", ""},
		{"both api_key and user", with(func(o *Override) { o.APIKey = "k" }), "exactly one of api_key and user", ""},
		{"neither api_key nor user", with(func(o *Override) { o.User = "" }), "exactly one of api_key and user", ""},
		{"past expiry", with(func(o *Override) { o.Expires = t0.Add(-time.Second) }), "expires: must be in the future", ""},
		{"expiry now", with(func(o *Override) { o.Expires = t0 }), "expires: must be in the future", ""},
		{"no expiry", with(func(o *Override) { o.Expires = time.Time{} }), "expires: must be in the future", ""},
		{"unknown policy", with(func(o *Override) { o.Policy = "nope" }), `policy: no policy named "nope"`, ""},
		{"unknown tier", with(func(o *Override) { o.Tier = "gold" }), `tier: policy api has no tier "gold"`, ""},
		{"tier and limit", with(func(o *Override) { o.Limit = &LimitArg{Limit: 1, Per: "1s"} }), "give exactly one of tier and limit", ""},
		{"neither tier nor limit", with(func(o *Override) { o.Tier = "" }), "give exactly one of tier and limit", ""},
		{"limit 0", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Limit: 0, Per: "1s"} }), "limit:", ""},
		{"negative limit", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Limit: -3, Per: "1s"} }), "limit:", ""},
		{"bad per", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Limit: 5, Per: "abc"} }), `limit.per: "abc" is not a duration (such as 1s, 1m30s or 250ms)`, ""},
		{"per 0s", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Limit: 5, Per: "0s"} }), `limit.per:`, ""},
		{"per -1s", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Limit: 5, Per: "-1s"} }), `limit.per:`, ""},
		{"bad algorithm", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Algorithm: "gcra", Limit: 5, Per: "1s"} }), "limit.algorithm:", ""},
		{"negative burst", with(func(o *Override) { o.Tier, o.Limit = "", &LimitArg{Limit: 5, Per: "1s", Burst: -1} }), "limit.burst:", ""},
		{"beyond the expiry cap", with(func(o *Override) { o.Expires = t0.Add(MaxOverrideTTL + time.Second) }), "expires: at most 168h0m0s after it is created", ""},
		{"created long ago, beyond the cap", with(func(o *Override) { o.Created = t0.Add(-MaxOverrideTTL) }), "expires: at most 168h0m0s", ""},
		{"created in the future, beyond the cap from now", with(func(o *Override) {
			o.Created, o.Expires = t0.Add(2*time.Minute), t0.Add(MaxOverrideTTL+2*time.Minute)
		}), "expires: at most 168h0m0s", ""},
		{"negative burst on a window", with(func(o *Override) {
			o.Tier, o.Limit = "", &LimitArg{Algorithm: "fixed_window", Limit: 5, Per: "1s", Burst: -1}
		}), "limit.burst:", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.m.AddOverride(c.o)
			wantRequestErr(t, c.name, err, c.want)
		})
	}
	if n := len(f.auditLines(t)); n != 1 {
		t.Errorf("refused overrides: %d audit lines, want only the startup one", n)
	}
	if got := f.m.Overrides(); len(got) != 0 {
		t.Errorf("refused overrides: Overrides() = %+v, want none", got)
	}
}

// TestOverrideCaps: exactly MaxOverrideTTL is accepted, and MaxOverrides
// overrides are; the next one, for a new caller, is refused with
// ErrTooManyOverrides and changes nothing, while one replacing a caller's
// override still goes in; once one expires there is room again.
func TestOverrideCaps(t *testing.T) {
	f := newFixture(t)
	longest := Override{Actor: "alice", Reason: "r", User: "u0", Tier: "enterprise", Expires: t0.Add(MaxOverrideTTL)}
	if _, err := f.m.AddOverride(longest); err != nil {
		t.Fatalf("an override of exactly %v: %v", MaxOverrideTTL, err)
	}
	short := Override{Actor: "alice", Reason: "r", User: "u1", Tier: "enterprise", Expires: t0.Add(time.Minute)}
	if _, err := f.m.AddOverride(short); err != nil {
		t.Fatal(err)
	}
	for i := 2; i < MaxOverrides; i++ {
		if _, err := f.m.AddOverride(Override{Actor: "alice", Reason: "r", User: fmt.Sprint("u", i), Tier: "enterprise", Expires: t0.Add(time.Hour)}); err != nil {
			t.Fatalf("override %d: %v", i+1, err)
		}
	}
	extra := Override{Actor: "alice", Reason: "r", User: "one-too-many", Tier: "enterprise", Expires: t0.Add(time.Hour)}
	_, err := f.m.AddOverride(extra)
	if !errors.Is(err, ErrTooManyOverrides) || !errors.Is(err, ErrRequest) {
		t.Fatalf("override %d: err %v, want ErrTooManyOverrides and ErrRequest", MaxOverrides+1, err)
	}
	if n := len(f.m.Overrides()); n != MaxOverrides {
		t.Fatalf("%d overrides after the refusal, want %d", n, MaxOverrides)
	}
	replace := short
	replace.Tier = "free"
	if _, err := f.m.AddOverride(replace); err != nil {
		t.Fatalf("replacing a caller's override at the cap: %v", err)
	}
	f.setClock(t, t0.Add(2*time.Hour)) // all but the longest expire
	extra.Expires = t0.Add(3 * time.Hour)
	if _, err := f.m.AddOverride(extra); err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
}

// TestRevokeOverride: revoking by ID removes the override at once, audits
// who revoked it, and a second revocation, or an unknown ID, is
// ErrNoOverride.
func TestRevokeOverride(t *testing.T) {
	f := newFixture(t)
	o, err := f.m.AddOverride(Override{Actor: "alice", Reason: "incident", User: "42", Tier: "enterprise", Expires: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.m.RevokeOverride(o.ID, "bob")
	if err != nil || got.ID != o.ID {
		t.Fatalf("RevokeOverride(%s) = %+v, %v", o.ID, got, err)
	}
	if n := len(f.m.Overrides()); n != 0 {
		t.Fatalf("%d overrides after the revocation, want 0", n)
	}
	lines := f.auditLines(t)
	wantAudit(t, "revocation", lines[len(lines)-1], map[string]any{"time": "2026-11-29T12:00:00Z", "actor": "bob", "action": "override_revoked", "what": "api|user:42", "old": "tier enterprise", "reason": "incident"})
	for _, id := range []string{o.ID, "nope"} {
		if _, err := f.m.RevokeOverride(id, "bob"); !errors.Is(err, ErrNoOverride) {
			t.Errorf("RevokeOverride(%s) again: %v, want ErrNoOverride", id, err)
		}
	}
}

// TestManagerConcurrent runs resolutions, overrides and reloads at once;
// run with -race.
func TestManagerConcurrent(t *testing.T) {
	f := newFixture(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				user := fmt.Sprint(i % 7)
				switch g {
				case 0:
					if _, err := f.m.Resolve(Request{User: user, Route: "/reports"}); err != nil {
						t.Errorf("Resolve: %v", err)
						return
					}
				case 1:
					if _, err := f.m.AddOverride(Override{Actor: "a", Reason: "r", User: user, Tier: "enterprise",
						Expires: t0.Add(time.Hour)}); err != nil {
						t.Errorf("AddOverride: %v", err)
						return
					}
				case 2:
					_ = f.m.Overrides()
				case 3:
					if i%50 == 0 {
						if err := f.m.Reload("ops"); err != nil {
							t.Errorf("Reload: %v", err)
							return
						}
					}
					_ = f.m.Current().Version
				}
			}
		})
	}
	wg.Wait()
	if got := len(f.m.Overrides()); got != 7 {
		t.Errorf("overrides: got %d, want 7 (one per caller)", got)
	}
}
