package main

// Admin tokens (--admin-token-file): the overrides endpoints and pprof
// refuse requests without the token, the audit log names the token, a
// revocation reaches every node, and a rotated token file takes effect
// without a restart.

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/policy"
)

// TestClusterOverrideAdminAndRevoke: on three nodes, POST /v1/overrides
// without a token is 401, with a wrong one 403, and with the right one 200
// and audited on every node under the token's name (not the body's actor).
// DELETE /v1/overrides/{id} through another node than the one that took it
// removes it from every node, where checks go back to the caller's tier,
// and each node audits the revocation; a second DELETE is 404.
func TestClusterOverrideAdminAndRevoke(t *testing.T) {
	h := newHarness(t)
	h.validateOpenAPI()
	c := startPolicyCluster(h, t.TempDir(), overridePolicy)
	body := `{"actor":"mallory","reason":"incident 14","user":"42","tier":"enterprise","expires_in":"1m"}`
	url := "http://" + c.addrs[0] + "/v1/overrides"
	for _, st := range []struct {
		auth   string
		status int
	}{{"", http.StatusUnauthorized}, {"Basic b25jYWxsOng=", http.StatusUnauthorized}, {"Bearer not-the-token", http.StatusForbidden}} {
		status, b, err := send(h.client, http.MethodPost, url, body, st.auth)
		if err != nil {
			t.Fatal(err)
		}
		if status != st.status {
			t.Errorf("POST /v1/overrides with Authorization %q: %d %s, want %d", st.auth, status, b, st.status)
		}
	}
	for i, a := range c.addrs {
		if o := h.overrides(a); len(o) != 0 {
			t.Fatalf("%s: overrides %+v after refused requests, want none", c.names[i], o)
		}
	}
	status, b, err := postJSON(h.client, url, body)
	var o policy.Override
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &o) != nil || o.Actor != "oncall" {
		t.Fatalf("POST /v1/overrides with the token: %d %s %v, want 200 and actor oncall", status, b, err)
	}
	entKey := "p|api|override:tier:enterprise|user:42"
	poll(t, 2*time.Second, "the override on every node", func() (bool, string) {
		for i, a := range c.addrs {
			if got := h.overrides(a); len(got) != 1 || got[0].ID != o.ID {
				return false, fmt.Sprintf("%s: GET /v1/overrides = %+v, want %s", c.names[i], got, o.ID)
			}
		}
		return true, ""
	})
	for i, a := range c.addrs {
		if r := h.mustCheck(a, `{"user":"42"}`); r.status != http.StatusOK || r.body.Scope != "override:tier:enterprise" || r.body.Owner != c.owner(entKey) {
			t.Fatalf("user 42 via %s under the override: %d %+v", c.names[i], r.status, r.body)
		}
	}

	del := "http://" + c.addrs[2] + "/v1/overrides/" + o.ID
	if status, b, _ := send(h.client, http.MethodDelete, del, "", ""); status != http.StatusUnauthorized {
		t.Errorf("DELETE without a token: %d %s, want 401", status, b)
	}
	if status, b, _ := send(h.client, http.MethodDelete, del, "", "Bearer not-the-token"); status != http.StatusForbidden {
		t.Errorf("DELETE with a wrong token: %d %s, want 403", status, b)
	}
	if status, b, _ := send(h.client, http.MethodDelete, "http://"+c.addrs[2]+"/v1/overrides/ovr-unknown", "", "Bearer "+testAdminToken); status != http.StatusNotFound {
		t.Errorf("DELETE an unknown id: %d %s, want 404", status, b)
	}
	revoked := time.Now()
	if status, b, err := send(h.client, http.MethodDelete, del, "", "Bearer "+testAdminToken); err != nil || status != http.StatusOK {
		t.Fatalf("DELETE %s: %d %s %v, want 200", del, status, b, err)
	}
	poll(t, 2*time.Second, "the override gone from every node", func() (bool, string) {
		for i, a := range c.addrs {
			if got := h.overrides(a); len(got) != 0 {
				return false, fmt.Sprintf("%s: GET /v1/overrides = %+v, want none", c.names[i], got)
			}
		}
		return true, ""
	})
	t.Logf("the revocation on every node %v after the DELETE", time.Since(revoked).Round(time.Millisecond))
	freeKey := "p|api|tier:free|user:42"
	for i, a := range c.addrs {
		r := h.mustCheck(a, `{"user":"42"}`)
		if r.body.Scope != "tier:free" || r.body.Owner != c.owner(freeKey) {
			t.Errorf("user 42 via %s after the revocation: %d %+v, want tier:free", c.names[i], r.status, r.body)
		}
	}
	for i, p := range c.audits {
		lines := readAudit(t, p)
		ovr, rev := actions(lines, "override"), actions(lines, "override_revoked")
		if len(ovr) != 1 || ovr[0].Actor != "oncall" || ovr[0].Reason != "incident 14" {
			t.Errorf("%s: override audited as %+v, want once, by oncall", c.names[i], ovr)
		}
		if len(rev) != 1 || rev[0].Actor != "oncall" || rev[0].What != "api|user:42" || rev[0].Old != "tier enterprise" {
			t.Errorf("%s: revocation audited as %+v, want once, by oncall, of api|user:42", c.names[i], rev)
		}
	}
	if status, b, _ := send(h.client, http.MethodDelete, del, "", "Bearer "+testAdminToken); status != http.StatusNotFound {
		t.Errorf("DELETE %s again: %d %s, want 404", del, status, b)
	}
}

// TestAdminTokenRotation: the token file is replaced while the node runs;
// within a few seconds (it is polled every 2s) the old token is refused
// with 403 and the new one accepted, under its new name in the audit log.
func TestAdminTokenRotation(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	path, audit := filepath.Join(dir, "node-1.yaml"), filepath.Join(dir, "node-1.audit.jsonl")
	writePolicy(t, path, overridePolicy)
	n, _ := h.startPolicyNode("node-1", path, audit)
	url := "http://" + httpAddr(n) + "/v1/overrides"
	body := `{"reason":"incident 15","user":"42","tier":"enterprise","expires_in":"1m"}`
	if status, b, err := postJSON(h.client, url, body); err != nil || status != http.StatusOK {
		t.Fatalf("POST with the first token: %d %s %v", status, b, err)
	}
	const rotated = "token-of-the-next-oncall"
	writePolicy(t, tokenPath(path, "node-1"), "# rotated\nnext:"+rotated+"\n")
	start := time.Now()
	// Polled with an empty body: 400 once authenticated, so that nothing
	// is installed meanwhile.
	poll(t, 5*time.Second, "the old token refused", func() (bool, string) {
		status, b, err := postJSON(h.client, url, `{}`)
		return err == nil && status == http.StatusForbidden, fmt.Sprintf("%d %s %v", status, b, err)
	})
	t.Logf("rotation took effect %v after the file changed", time.Since(start).Round(time.Millisecond))
	if status, b, err := send(h.client, http.MethodPost, url, body, "Bearer "+rotated); err != nil || status != http.StatusOK {
		t.Fatalf("POST with the new token: %d %s %v", status, b, err)
	}
	var by []string
	for _, l := range actions(readAudit(t, audit), "override") {
		by = append(by, l.Actor)
	}
	if !slices.Equal(by, []string{"oncall", "next"}) {
		t.Errorf("overrides audited by %v, want by oncall then by next", by)
	}
}

// TestPprofRequiresAdmin: pprof answers only to the admin token, and to
// nobody on a node without one.
func TestPprofRequiresAdmin(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	tokens := &api.Tokens{}
	get := func(addr, auth string) int {
		t.Helper()
		status, b, err := send(&http.Client{}, http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=1", "", auth)
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusOK && !strings.Contains(string(b), "admin token") && !strings.Contains(string(b), "bearer token") {
			t.Errorf("pprof refused with %d %s: the body does not say why", status, b)
		}
		return status
	}
	for _, st := range []struct {
		set    bool
		auth   string
		status int
	}{
		{false, "Bearer " + testAdminToken, http.StatusForbidden}, // no admin token configured
		{true, "", http.StatusUnauthorized},
		{true, "Bearer wrong-token-wrong-token", http.StatusForbidden},
		{true, "Bearer " + testAdminToken, http.StatusOK},
	} {
		if st.set {
			tokens.Set([]api.Token{{Name: "oncall", Token: testAdminToken}})
		}
		stop, addr := servePprofTest(t, log, tokens)
		if got := get(addr, st.auth); got != st.status {
			t.Errorf("pprof with tokens set %v, Authorization %q: %d, want %d", st.set, st.auth, got, st.status)
		}
		stop()
	}
}

// servePprofTest is node.ServePprof on 127.0.0.1:0, returning its address.
func servePprofTest(t *testing.T, log *slog.Logger, tokens *api.Tokens) (func(), string) {
	t.Helper()
	stop, addr, err := node.ServePprof("127.0.0.1:0", log, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return stop, addr
}
