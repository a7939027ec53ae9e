package api

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/policy"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// newPrivateEnv is newPolicyEnv's node with PrivateReads: its HTTP server
// sends no token.
func newPrivateEnv(t *testing.T) (*testEnv, *httpServer) {
	t.Helper()
	e := newTestEnv(t, nil)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(headerPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	mgr, err := policy.NewManager(policy.ManagerConfig{Path: path, Clock: e.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tokens := &Tokens{}
	tokens.Set([]Token{{Name: "ops", Token: testAdminToken}})
	reg := prometheus.NewRegistry()
	e.api, err = New(Config{Checker: e.router, Policy: mgr, Logger: slog.New(slog.DiscardHandler), AdminTokens: tokens, PrivateReads: true, Registerer: reg, Gatherer: reg,
		AddOverride: func(_ context.Context, o policy.Override) (policy.Override, error) { return mgr.AddOverride(o) },
		RevokeOverride: func(_ context.Context, id, actor string) (policy.Override, error) {
			return mgr.RevokeOverride(id, actor)
		}})
	if err != nil {
		t.Fatal(err)
	}
	return e, e.startHTTP(t)
}

// leaks returns the private names found in an answer: the owner, the
// policy's version, its name and its tiers.
func leaks(answer string) []string {
	var found []string
	for _, name := range []string{"node-1", `"owner_addr"`, `"policy_version"`, "hdr", "tier:", "free", "gold", "route:", "/login", "policy api"} {
		if strings.Contains(answer, name) {
			found = append(found, name)
		}
	}
	return found
}

// With PrivateReads, an answer to a caller without the admin token, over
// HTTP and gRPC, admitted, refused or invalid, names no owner, no owner
// address, no policy version and no tier or route; with the token, the
// same answers name them.
func TestPrivateReadsHideOwnersAndTiers(t *testing.T) {
	e, s := newPrivateEnv(t)
	show := func(r httpResult) string {
		var b strings.Builder
		b.Write(r.body)
		for k, v := range r.header {
			b.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
		return b.String()
	}
	for i, st := range []struct {
		body   string
		status int
	}{
		{`{"user":"u1"}`, 200},
		{`{"user":"u1"}`, 200},
		{`{"user":"u1","route":"/login","ip":"192.0.2.1"}`, 200},
		{`{"user":"u1"}`, 429},
		{`{"user":"u2","cost":7}`, 400},      // cost over tier:free's capacity
		{`{"user":"u2","tier":"gold"}`, 200}, // its own tier name, in the request only
	} {
		r := s.check(t, st.body)
		if r.status != st.status {
			t.Fatalf("step %d: %s: %d %s, want %d", i, st.body, r.status, r.body, st.status)
		}
		if found := leaks(show(r)); len(found) > 0 {
			t.Errorf("step %d: %s without a token: %d answer names %q:\n%s", i, st.body, r.status, found, show(r))
		}
	}
	s.auth = "Bearer " + testAdminToken
	r := s.check(t, `{"user":"u1"}`)
	if a := show(r); r.status != 429 || !strings.Contains(a, `"owner":"node-1"`) || !strings.Contains(a, `"policy_version":"hdr-`) || !strings.Contains(a, `"scope":"tier:free"`) {
		t.Errorf("with the admin token: %d %s, want 429 naming node-1, hdr and tier:free", r.status, a)
	}
	s.auth = "Bearer not-the-token-of-anyone"
	if r := s.check(t, `{"user":"u1"}`); len(leaks(show(r))) > 0 {
		t.Errorf("with a wrong token: %d answer names %q", r.status, leaks(show(r)))
	}

	c := e.startGRPC(t)
	req := &pb.CheckRequest{Checks: []*pb.Check{{Request: &pb.PolicyRequest{User: "u3"}}}}
	resp, err := c.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetDecisions()[0]; d.GetOwner() != "" || d.GetOwnerAddr() != "" || d.GetPolicyVersion() != "" || d.GetScope() != "tier" {
		t.Errorf("gRPC without a token: %v, want no owner, no address, no version, scope tier", d)
	}
	cost := int64(7)
	_, err = c.Check(context.Background(), &pb.CheckRequest{Checks: []*pb.Check{{Cost: &cost, Request: &pb.PolicyRequest{User: "u3"}}}})
	if found := leaks(status.Convert(err).Message()); err == nil || len(found) > 0 {
		t.Errorf("gRPC invalid without a token: %v names %q", err, found)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testAdminToken)
	resp, err = c.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetDecisions()[0]; d.GetOwner() != "node-1" || !strings.HasPrefix(d.GetPolicyVersion(), "hdr-") || d.GetScope() != "tier:free" {
		t.Errorf("gRPC with the token: %v, want owner node-1, version hdr, scope tier:free", d)
	}
}
