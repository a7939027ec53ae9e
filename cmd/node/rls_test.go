package main

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/ring"
	"github.com/ringlimit/ringlimit/rls"
)

// rlsTestConfig is an envoyproxy/ratelimit configuration as its users
// write them.
const rlsTestConfig = `domain: shop
descriptors:
  # Every user: 5 an hour; one of them unlimited.
  - key: user_id
    rate_limit:
      unit: hour
      requests_per_unit: 5
  - key: user_id
    value: vip
    rate_limit:
      unlimited: true
  # Uploads, per API key.
  - key: api_key
    descriptors:
      - key: path
        value: /upload
        rate_limit:
          unit: hour
          requests_per_unit: 10
  # Being tried out: counted, never refused.
  - key: trial
    shadow_mode: true
    rate_limit:
      unit: hour
      requests_per_unit: 2
`

// rlsClients dials the public gRPC port of each node.
func rlsClients(t *testing.T, addrs []string) []rlsv3.RateLimitServiceClient {
	t.Helper()
	out := make([]rlsv3.RateLimitServiceClient, len(addrs))
	for i, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		out[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	return out
}

// desc is a descriptor of the entries, given as key, value, key, value…
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// rlsTally sends n requests round robin over the clients and counts the
// overall codes; it fails the test on an error.
func rlsTally(t *testing.T, cs []rlsv3.RateLimitServiceClient, n int, req *rlsv3.RateLimitRequest) (ok, over int, last *rlsv3.RateLimitResponse) {
	t.Helper()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cs[i%len(cs)].ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("request %d of %v: %v", i+1, req, err)
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			ok++
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			over++
		default:
			t.Fatalf("request %d: overall code %v", i+1, resp.GetOverallCode())
		}
		last = resp
	}
	return ok, over, last
}

// TestRLSCluster drives Envoy's rate limit service on a 3-node process
// cluster with the generated client, round robin over the nodes.
func TestRLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the node binary")
	}
	h := newHarness(t)
	bin := buildNode(t)
	conf := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(conf, []byte(rlsTestConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := []string{"--rls-config", conf, "--rls-headers"}
	p1 := startFaultProc(t, bin, nil, procSpec{name: "node-1", extra: extra})
	p2 := startFaultProc(t, bin, nil, procSpec{name: "node-2", join: []string{p1.gossip}, extra: extra})
	p3 := startFaultProc(t, bin, nil, procSpec{name: "node-3", join: []string{p1.gossip}, extra: extra})
	procs := []*proc{p1, p2, p3}
	h.waitMembers(procs, names3, 15*time.Second)
	cs := rlsClients(t, []string{p1.grpc, p2.grpc, p3.grpc})
	one := func(d ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: d}
	}

	t.Run("plain limit", func(t *testing.T) {
		ok, over, last := rlsTally(t, cs, 8, one(desc("user_id", "alice")))
		if ok != 5 || over != 3 {
			t.Fatalf("alice: %d OK, %d OVER_LIMIT of 8, want 5 and 3", ok, over)
		}
		st := last.GetStatuses()[0]
		if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 ||
			st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
			st.GetDurationUntilReset().AsDuration() <= 0 || st.GetDurationUntilReset().AsDuration() > time.Hour {
			t.Fatalf("last status %v", st)
		}
		if hs := last.GetResponseHeadersToAdd(); len(hs) != 3 || hs[0].GetKey() != "RateLimit-Limit" || hs[0].GetValue() != "5" || hs[1].GetValue() != "0" {
			t.Fatalf("headers %v", hs)
		}
	})

	t.Run("hits_addend", func(t *testing.T) {
		req := one(desc("user_id", "bob"))
		req.HitsAddend = 3
		want := []struct {
			code      rlsv3.RateLimitResponse_Code
			remaining uint32
		}{{rlsv3.RateLimitResponse_OK, 2}, {rlsv3.RateLimitResponse_OVER_LIMIT, 2}}
		for i, w := range want {
			_, _, r := rlsTally(t, cs[i:], 1, req)
			if st := r.GetStatuses()[0]; st.GetCode() != w.code || st.GetLimitRemaining() != w.remaining {
				t.Fatalf("bob, hits 3, call %d: %v, want %v with %d remaining", i+1, st, w.code, w.remaining)
			}
		}
		// The descriptor's own hits_addend wins over the request's.
		d := desc("user_id", "bob")
		d.HitsAddend = wrapperspb.UInt64(2)
		req.Descriptors = []*rlcommon.RateLimitDescriptor{d}
		if _, _, r := rlsTally(t, cs[2:], 1, req); r.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("bob, descriptor hits 2: %v, want OK with 0 remaining", r.GetStatuses()[0])
		}
	})

	t.Run("hits_addend 0 peeks", func(t *testing.T) {
		// erin: 5 an hour. A descriptor's own hits_addend 0 answers OK
		// while one remains and OVER_LIMIT once none does, through every
		// node, and spends nothing.
		peekReq := func() *rlsv3.RateLimitRequest {
			d := desc("user_id", "erin")
			d.HitsAddend = wrapperspb.UInt64(0)
			return one(d)
		}
		peekAll := func(step string, code rlsv3.RateLimitResponse_Code, remaining uint32) {
			t.Helper()
			for i, c := range cs {
				r, err := c.ShouldRateLimit(context.Background(), peekReq())
				if err != nil {
					t.Fatal(err)
				}
				if st := r.GetStatuses()[0]; r.GetOverallCode() != code || st.GetLimitRemaining() != remaining {
					t.Fatalf("%s, peek through node %d: %v, want %v with %d remaining", step, i+1, r, code, remaining)
				}
			}
		}
		peekAll("fresh", rlsv3.RateLimitResponse_OK, 5)
		if ok, over, _ := rlsTally(t, cs, 2, one(desc("user_id", "erin"))); ok != 2 || over != 0 {
			t.Fatalf("erin: %d OK, %d OVER_LIMIT of 2", ok, over)
		}
		peekAll("after 2 hits", rlsv3.RateLimitResponse_OK, 3)
		if ok, over, _ := rlsTally(t, cs, 4, one(desc("user_id", "erin"))); ok != 3 || over != 1 {
			t.Fatalf("erin after the peeks: %d OK, %d OVER_LIMIT of 4, want 3 and 1 (the peeks spent nothing)", ok, over)
		}
		peekAll("exhausted", rlsv3.RateLimitResponse_OVER_LIMIT, 0)
	})

	t.Run("nested descriptors", func(t *testing.T) {
		if ok, over, _ := rlsTally(t, cs, 12, one(desc("api_key", "k1", "path", "/upload"))); ok != 10 || over != 2 {
			t.Fatalf("k1 uploads: %d OK, %d OVER_LIMIT of 12, want 10 and 2", ok, over)
		}
		// The key alone, and another path, match no rule: OK, no limit.
		for _, d := range []*rlcommon.RateLimitDescriptor{desc("api_key", "k1"), desc("api_key", "k1", "path", "/download")} {
			ok, over, last := rlsTally(t, cs, 6, one(d))
			if ok != 6 || over != 0 || last.GetStatuses()[0].GetCurrentLimit() != nil {
				t.Fatalf("%v: %d OK, %d OVER_LIMIT, status %v; want 6 OK with no limit", d, ok, over, last.GetStatuses()[0])
			}
		}
	})

	t.Run("shadow mode", func(t *testing.T) {
		before := 0.0
		for _, p := range procs {
			before += h.metric(p.http, "ringlimit_rls_shadow_over_limit_total", `{domain="shop"}`)
		}
		if ok, over, _ := rlsTally(t, cs, 5, one(desc("trial", "t1"))); ok != 5 || over != 0 {
			t.Fatalf("trial: %d OK, %d OVER_LIMIT of 5, want 5 OK", ok, over)
		}
		after := 0.0
		for _, p := range procs {
			after += h.metric(p.http, "ringlimit_rls_shadow_over_limit_total", `{domain="shop"}`)
		}
		if after-before != 3 {
			t.Fatalf("shadow refusals counted: %v, want 3", after-before)
		}
	})

	t.Run("unlimited", func(t *testing.T) {
		ok, over, last := rlsTally(t, cs, 20, one(desc("user_id", "vip")))
		if ok != 20 || over != 0 || last.GetStatuses()[0].GetLimitRemaining() != math.MaxUint32 {
			t.Fatalf("vip: %d OK, %d OVER_LIMIT, status %v; want 20 OK, remaining MaxUint32", ok, over, last.GetStatuses()[0])
		}
	})

	t.Run("several descriptors", func(t *testing.T) {
		req := one(desc("user_id", "carol"), desc("api_key", "k2", "path", "/upload"), desc("user_id", "vip"))
		ok, over, last := rlsTally(t, cs, 7, req)
		if ok != 5 || over != 2 {
			t.Fatalf("carol + k2 upload: %d OK, %d OVER_LIMIT of 7, want 5 and 2", ok, over)
		}
		sts := last.GetStatuses()
		if len(sts) != 3 || sts[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
			sts[1].GetCode() != rlsv3.RateLimitResponse_OK || sts[1].GetLimitRemaining() != 3 ||
			sts[2].GetCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("statuses of the 7th: %v; want carol over, k2 upload OK with 3 left, vip OK", sts)
		}
	})

	t.Run("unknown domain and bad input", func(t *testing.T) {
		req := &rlsv3.RateLimitRequest{Domain: "elsewhere", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user_id", "alice")}}
		if ok, _, _ := rlsTally(t, cs, 3, req); ok != 3 {
			t.Fatalf("unknown domain: %d OK of 3", ok)
		}
		for _, bad := range []*rlsv3.RateLimitRequest{{Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "b")}}, {Domain: "shop"}} {
			_, err := cs[0].ShouldRateLimit(context.Background(), bad)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v, want InvalidArgument", bad, err)
			}
		}
	})
	for _, p := range procs {
		if got := h.metric(p.http, "ringlimit_rls_requests_total", `{code="Unavailable"}`); got != 0 {
			t.Errorf("%s answered UNAVAILABLE %v times", p.name, got)
		}
	}

	// node-1 alone, the others killed: it is in the minority and cannot
	// decide for their keys, so it answers UNAVAILABLE and Envoy's
	// failure_mode_deny decides. The user's key is owned by node-2 and
	// succeeded by node-3, so that node-1 never owns it on the way (node-2
	// may be seen dead before node-3 is, while node-1 still has a
	// majority).
	full, err := ring.New(ring.DefaultConfig(), names3)
	if err != nil {
		t.Fatal(err)
	}
	var theirs string
	for i := range 100 {
		user := fmt.Sprintf("u%d", i)
		key := rls.BucketKey("shop", [][2]string{{"user_id", user}})
		var o api.OwnerResponse
		if err := getJSON(h.client, "http://"+p1.http+"/v1/owner?key="+url.QueryEscape(key), &o); err != nil {
			t.Fatal(err)
		}
		if o.Owner == "node-2" && full.Successors(key, 1)[0] == "node-3" {
			theirs = user
			break
		}
	}
	if theirs == "" {
		t.Fatal("none of 100 users is owned by node-2 and succeeded by node-3")
	}
	for _, p := range procs[1:] {
		_ = p.stop(t, syscall.SIGKILL, 5*time.Second) // its error is "signal: killed"
	}
	testkit.WaitFor(t, 10*time.Second, "UNAVAILABLE for a user of node-2", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cs[0].ShouldRateLimit(ctx, one(desc("user_id", theirs)))
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
}

// TestRLSReload: a node takes a rewritten --rls-config file without a
// restart, and refuses one that does not validate, keeping the running
// configuration.
func TestRLSReload(t *testing.T) {
	h := newHarness(t)
	conf := filepath.Join(t.TempDir(), "shop.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(conf+".tmp", []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(conf+".tmp", conf); err != nil {
			t.Fatal(err)
		}
	}
	limit := func(n int) string {
		return fmt.Sprintf("domain: shop\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n)
	}
	write(limit(2))
	n, _ := h.startArgs("n1", "--rls-config", conf)
	c := rlsClients(t, []string{n.GRPCAddr()})
	req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user_id", "a")}}
	if ok, over, _ := rlsTally(t, c, 3, req); ok != 2 || over != 1 {
		t.Fatalf("limit 2: %d OK, %d OVER_LIMIT of 3", ok, over)
	}
	write(limit(5))
	poll(t, 10*time.Second, "the limit of 5 in force", func() (bool, string) {
		_, _, r := rlsTally(t, c, 1, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user_id", "probe")}})
		got := r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
		return got == 5, fmt.Sprintf("current_limit %d", got)
	})
	// The same window, now holding 5: 3 more for a.
	if ok, over, _ := rlsTally(t, c, 4, req); ok != 3 || over != 1 {
		t.Fatalf("limit 5 after 2 spent: %d OK, %d OVER_LIMIT of 4, want 3 and 1", ok, over)
	}
	write("domain: shop\ndescriptors:\n  - key: user_id\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	poll(t, 10*time.Second, "the bad file refused", func() (bool, string) {
		got := h.metric(httpAddr(n), "ringlimit_rls_config_reloads_total", `{result="error"}`)
		return got >= 1, fmt.Sprintf("%v errors", got)
	})
	_, _, r := rlsTally(t, c, 1, &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user_id", "b")}})
	if st := r.GetStatuses()[0]; st.GetCurrentLimit().GetRequestsPerUnit() != 5 || st.GetLimitRemaining() != 4 {
		t.Fatalf("after a bad file: %v, want the limit of 5 with 4 remaining", st)
	}
}

// TestRLSBeforeJoin: a node whose seed has not answered owns no key, so it
// answers UNAVAILABLE for every limited descriptor (Envoy's
// failure_mode_deny decides) and spends nothing; an unlimited one needs no
// owner and is OK. Once another node joins it, the limit holds exactly
// across both.
func TestRLSBeforeJoin(t *testing.T) {
	h := newHarness(t)
	conf := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(conf, []byte(rlsTestConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	lonely, logs := h.startArgs("lonely", "--rls-config", conf, "--join", testkit.DeadAddr(t))
	waitJoinAttempts(t, logs, 1, 10*time.Second)
	c := rlsClients(t, []string{lonely.GRPCAddr()})
	limited := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user_id", "early")}}
	for i := range 7 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c[0].ShouldRateLimit(ctx, limited)
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("request %d before the join: %v, want UNAVAILABLE", i+1, err)
		}
	}
	vip := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user_id", "vip")}}
	if ok, over, _ := rlsTally(t, c, 3, vip); ok != 3 || over != 0 {
		t.Fatalf("unlimited before the join: %d OK, %d OVER_LIMIT of 3, want 3 and 0", ok, over)
	}

	other, _ := h.startArgs("other", "--rls-config", conf, "--join", lonely.Cluster().LocalAddr())
	h.waitRing([]*node.Node{lonely, other}, []string{"lonely", "other"}, 10*time.Second)
	both := rlsClients(t, []string{lonely.GRPCAddr(), other.GRPCAddr()})
	if ok, over, _ := rlsTally(t, both, 8, limited); ok != 5 || over != 3 {
		t.Fatalf("after the join, round robin: %d OK, %d OVER_LIMIT of 8, want 5 and 3 (nothing spent before)", ok, over)
	}
}
