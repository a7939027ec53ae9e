package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeNode answers the lease routes with canned bodies and records the
// request bodies it was sent, by path.
type fakeNode struct {
	mu     sync.Mutex
	bodies map[string]string
}

func startFakeNode(t *testing.T) (*fakeNode, string) {
	t.Helper()
	f := &fakeNode{bodies: map[string]string{}}
	answers := map[string]struct {
		status int
		body   string
	}{
		"/v1/acquire": {200, `{"allowed":true,"limit":5,"remaining":2,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"scope":"inline","owner":"node-2","lease":"c1.abc","in_flight":3,"expires_in_ms":30000}`},
		"/v1/renew":   {404, `{"code":"LEASE_NOT_FOUND","message":"lease: not found"}`},
		"/v1/release": {200, `{"released":true,"in_flight":2,"limit":5,"owner":"node-2"}`},
		"/v1/report":  {200, `{"reported":1,"limit":40,"owner":"node-3"}`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies[r.URL.Path] = string(b)
		f.mu.Unlock()
		a, ok := answers[r.URL.Path]
		if !ok || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body+"\n")
	}))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *fakeNode) body(path string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[path]
}

// TestLeaseCommands: acquire, renew, release and report send the bodies
// the API takes and print the answers; a lease not found exits 4; bad
// flags are usage errors (exit 2) that send nothing.
func TestLeaseCommands(t *testing.T) {
	f, addr := startFakeNode(t)
	env := map[string]string{"RINGLIMIT_ADDR": addr}

	cli(t, env, "acquire", "jobs", "--limit", "5", "--ttl", "10s", "--request-id", "job-7").want(t, 0,
		"allowed     true\nlease       c1.abc\nin flight   3\nlimit       5\nexpires in  30s\nscope       inline\nowner       node-2\n", "")
	if got, want := f.body("/v1/acquire"), `{"key":"jobs","limit":{"algorithm":"concurrency","limit":5},"ttl":"10s","request_id":"job-7"}`; got != want {
		t.Errorf("acquire sent %s, want %s", got, want)
	}
	cli(t, env, "acquire", "--policy", "api", "--user", "u1", "--route", "/export").want(t, 0,
		"allowed     true\nlease       c1.abc\nin flight   3\nlimit       5\nexpires in  30s\nscope       inline\nowner       node-2\n", "")
	if got, want := f.body("/v1/acquire"), `{"policy":"api","user":"u1","route":"/export"}`; got != want {
		t.Errorf("policy acquire sent %s, want %s", got, want)
	}

	r := cli(t, env, "renew", "c1.abc", "--ttl", "1m")
	if r.code != 4 || !strings.HasSuffix(r.stderr, "/v1/renew: 404 LEASE_NOT_FOUND: lease: not found\n") {
		t.Errorf("renew: exit %d, stderr %q", r.code, r.stderr)
	}
	if got, want := f.body("/v1/renew"), `{"lease":"c1.abc","ttl":"1m"}`; got != want {
		t.Errorf("renew sent %s, want %s", got, want)
	}

	cli(t, env, "release", "c1.abc", "--outcome", "error", "--latency", "120ms").want(t, 0,
		"released   true\nin flight  2\nlimit      5\nowner      node-2\n", "")
	if got, want := f.body("/v1/release"), `{"lease":"c1.abc","outcome":"error","latency_ms":120}`; got != want {
		t.Errorf("release sent %s, want %s", got, want)
	}

	cli(t, env, "report", "--policy", "api", "--route", "/search", "--outcome", "dropped", "--latency", "2s").want(t, 0,
		"reported  1\nlimit     40\nowner     node-3\n", "")
	if got, want := f.body("/v1/report"), `{"policy":"api","route":"/search","outcome":"dropped","latency_ms":2000}`; got != want {
		t.Errorf("report sent %s, want %s", got, want)
	}

	for _, args := range [][]string{
		{"acquire", "jobs"}, // no --limit
		{"acquire", "jobs", "--limit", "5", "--user", "u"}, // both forms
		{"release", "c1.abc", "--outcome", "maybe"},
		{"release", "c1.abc", "--latency", "-1s"},
		{"report", "--outcome", "ok"}, // no request
		{"renew"},
	} {
		if r := cli(t, env, args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr %q", args, r.code, r.stderr)
		}
	}
}

// TestLeaseCluster: acquire KEY --limit 1 through node 1 prints a lease
// (exit 0); a second acquire through node 2 exits 1; release of the lease
// through node 3 prints released true, and again false; renew of it then
// exits 4 with LEASE_NOT_FOUND.
func TestLeaseCluster(t *testing.T) {
	needCluster(t)
	key := fmt.Sprintf("cli:lease:%d", time.Now().UnixNano())
	r := at(t, 0, "acquire", key, "--limit", "1", "--ttl", "1m")
	m := regexp.MustCompile(`(?m)^lease\s+(l1\.\S+)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil || !regexp.MustCompile(`(?m)^in flight\s+1$`).MatchString(r.stdout) {
		t.Fatalf("acquire: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r = at(t, 1, "acquire", key, "--limit", "1"); r.code != 1 || !regexp.MustCompile(`(?m)^allowed\s+false$`).MatchString(r.stdout) {
		t.Fatalf("second acquire: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"true", "false"} {
		r = at(t, 2, "release", m[1], "--outcome", "ok", "--latency", "20ms")
		if r.code != 0 || !regexp.MustCompile(`(?m)^released\s+`+want+`$`).MatchString(r.stdout) {
			t.Fatalf("release (want %s): exit %d, stdout:\n%s\nstderr: %s", want, r.code, r.stdout, r.stderr)
		}
	}
	if r = at(t, 0, "renew", m[1]); r.code != 4 || !strings.Contains(r.stderr, "LEASE_NOT_FOUND") {
		t.Fatalf("renew of a released lease: exit %d, stderr: %s", r.code, r.stderr)
	}
}
