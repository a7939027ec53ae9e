package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestReloadCounted: the files without a counter of their own count their
// loads in ringlimit_reload_total{what}: a bad admin token file is refused
// (counted and logged once) while the running tokens stay, and a good one
// is loaded.
func TestReloadCounted(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	path, audit := filepath.Join(dir, "node-1.yaml"), filepath.Join(dir, "node-1.audit.jsonl")
	writePolicy(t, path, overridePolicy)
	n, logs := h.startPolicyNode("node-1", path, audit)
	addr := httpAddr(n)
	count := func(result string) float64 {
		return h.metric(addr, "ringlimit_reload_total", `{result="`+result+`",what="admin_tokens"}`)
	}
	if ok, errs := count("ok"), count("error"); ok != 0 || errs != 0 {
		t.Fatalf("at startup: admin_tokens ok=%v error=%v, want 0 and 0", ok, errs)
	}
	const refused = "admin token file refused; the running tokens stay"
	writePolicy(t, tokenPath(path, "node-1"), "bob:short\n")
	poll(t, 5*time.Second, "the bad token file counted", func() (bool, string) {
		return count("error") == 1, fmt.Sprintf("error=%v", count("error"))
	})
	if got := len(logs.Records(refused)); got != 1 {
		t.Errorf("refusal logged %d times, want 1", got)
	}
	url := "http://" + addr + "/v1/overrides"
	// An empty body: 400 once authenticated, so that nothing is installed.
	if status, b, err := postJSON(h.client, url, `{}`); err != nil || status != http.StatusBadRequest {
		t.Errorf("POST with the running token after a bad file: %d %s %v, want 400", status, b, err)
	}
	writePolicy(t, tokenPath(path, "node-1"), "next:token-of-the-next-oncall\n")
	poll(t, 5*time.Second, "the good token file counted", func() (bool, string) {
		return count("ok") == 1, fmt.Sprintf("ok=%v", count("ok"))
	})
	if errs := count("error"); errs != 1 {
		t.Errorf("after the good file: error=%v, want still 1", errs)
	}
	if status, b, err := postJSON(h.client, url, `{}`); err != nil || status != http.StatusForbidden {
		t.Errorf("POST with the old token after the rotation: %d %s %v, want 403", status, b, err)
	}
}
