package main

// The node's HTTP traffic in multi-node tests, checked against
// docs/openapi.yaml: the cluster endpoints (/v1/cluster, /v1/ring,
// /v1/owner) and /readyz exist only with a real cluster.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/openapitest"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// validateOpenAPI makes h.client check every exchange against
// docs/openapi.yaml (see package openapitest), failing the test on a
// mismatch, and logs at the test's end how many it checked. Call it before
// h.client talks to anything but the nodes' HTTP API.
func (h *harness) validateOpenAPI() {
	h.t.Helper()
	spec, err := openapitest.Load("../../docs/openapi.yaml")
	if err != nil {
		h.t.Fatal(err)
	}
	h.client.Transport = spec.Transport(h.t, h.client.Transport)
	h.t.Cleanup(func() { h.t.Logf("openapi: %v", spec.Counts()) })
}

// TestOpenAPICluster: three nodes, one with --private-reads, answer every
// operating and cluster endpoint as docs/openapi.yaml says, from before
// the first one is ready until they agree on a ring.
func TestOpenAPICluster(t *testing.T) {
	h := newHarness(t)
	h.validateOpenAPI()
	dir := t.TempDir()
	writePolicy(t, dir+"/policy.yaml", overridePolicy)
	n1, _ := h.startPolicyNode("node-1", dir+"/policy.yaml", dir+"/node-1.audit.jsonl")
	get := func(url, auth string) (int, string) {
		t.Helper()
		status, b, err := send(h.client, http.MethodGet, url, "", auth)
		if err != nil {
			t.Fatal(err)
		}
		return status, string(b)
	}
	// Ready once it has been alone on its ring for a second.
	seen := map[int]bool{}
	testkit.WaitFor(t, 10*time.Second, "node-1 ready", func() error {
		status, body := get("http://"+httpAddr(n1)+"/readyz", "")
		seen[status] = true
		if status != http.StatusOK {
			return &notYet{body}
		}
		return nil
	})
	n2, _ := h.startWith("node-2", []string{"--join", n1.Cluster().LocalAddr()}, nil)
	n3, _ := h.startWith("node-3", []string{"--join", n1.Cluster().LocalAddr(), "--private-reads", "--admin-token-file", tokenPath(dir+"/policy.yaml", "node-1")}, nil)
	nodes := []*node.Node{n1, n2, n3}
	h.waitRing(nodes, []string{"node-1", "node-2", "node-3"}, 10*time.Second)
	for _, n := range nodes {
		testkit.WaitFor(t, 10*time.Second, n.Router().Self()+" ready", func() error {
			status, body := get("http://"+httpAddr(n)+"/readyz", "")
			seen[status] = true
			if status != http.StatusOK {
				return &notYet{body}
			}
			return nil
		})
	}
	t.Logf("/readyz statuses seen: %v", seen)

	token := "Bearer " + testAdminToken
	for _, n := range nodes {
		base := "http://" + httpAddr(n)
		for _, path := range []string{"/", "/ui/", "/ui/api/status", "/healthz", "/metrics", "/v1/cluster", "/v1/ring", "/v1/owner?key=user:42", "/v1/owner", "/v1/owner?key=" + strings.Repeat("k", 1025), "/v1/policy", "/v1/overrides"} {
			status, body := get(base+path, token)
			if status >= 500 {
				t.Errorf("%s: GET %s = %d %s", n.Router().Self(), path, status, body)
			}
			get(base+path, "") // 401 on node-3 (--private-reads)
		}
		for i := range 5 {
			body := `{"key":"user:` + string(rune('a'+i)) + `","limit":{"limit":2,"per":"1h"}}`
			if status, b, err := send(h.client, http.MethodPost, base+"/v1/check", body, ""); err != nil || status >= 500 {
				t.Errorf("%s: POST /v1/check = %d %s %v", n.Router().Self(), status, b, err)
			}
		}
	}
}

// notYet is an error holding the answer of a node that is not ready.
type notYet struct{ body string }

func (e *notYet) Error() string { return "not ready: " + e.body }
