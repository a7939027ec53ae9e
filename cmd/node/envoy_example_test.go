package main

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestEnvoyExample: examples/envoy/envoy.yaml is a valid Envoy bootstrap
// whose rate limit filter asks for the domain of the configuration
// directory examples/envoy/config; a node running that directory answers
// the descriptors those rate_limits send, exactly.
func TestEnvoyExample(t *testing.T) {
	raw, err := os.ReadFile("../../examples/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml does not validate: %v", err)
	}
	var m hcm.HttpConnectionManager
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m); err != nil {
		t.Fatal(err)
	}
	var rl rlfilter.RateLimit
	if err := m.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatal(err)
	}
	if rl.GetDomain() != "shop" || !rl.GetFailureModeDeny() {
		t.Fatalf("rate limit filter: domain %q, failure_mode_deny %v; want shop, true", rl.GetDomain(), rl.GetFailureModeDeny())
	}
	if n := len(m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()); n != 3 {
		t.Fatalf("%d rate_limits, want 3", n)
	}

	// What Envoy sends for a request with x-api-key k1 to path p from
	// address ip: one descriptor per rate_limits entry.
	h := newHarness(t)
	n, _ := h.startArgs("n1", "--rls-config", "../../examples/envoy/config")
	c := rlsClients(t, []string{n.GRPCAddr()})
	envoyRequest := func(key, path, ip string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: rl.GetDomain(), Descriptors: []*rlcommon.RateLimitDescriptor{
			desc("api_key", key), desc("api_key", key, "path", path), desc("remote_address", ip)}}
	}
	if ok, over, _ := rlsTally(t, c, 12, envoyRequest("k1", "/upload", "192.0.2.7")); ok != 10 || over != 2 {
		t.Fatalf("12 uploads: %d OK, %d OVER_LIMIT; want 10 and 2", ok, over)
	}
	// The key's 100 a minute: 12 spent above (the over-limit uploads too).
	if ok, over, _ := rlsTally(t, c, 95, envoyRequest("k1", "/items", "192.0.2.7")); ok != 88 || over != 7 {
		t.Fatalf("95 more: %d OK, %d OVER_LIMIT; want 88 and 7", ok, over)
	}
	// Without a key Envoy sends the address alone; the health checker's
	// is unlimited.
	addr := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*rlcommon.RateLimitDescriptor{desc("remote_address", "10.0.0.53")}}
	if ok, over, _ := rlsTally(t, c, 400, addr); ok != 400 || over != 0 {
		t.Fatalf("health checker: %d OK, %d OVER_LIMIT of 400; want 400 OK", ok, over)
	}
}
