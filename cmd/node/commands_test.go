package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ringlimit/ringlimit/node"
)

// TestAdvertise: every listener's advertised address, from the bound one,
// --advertise-host (or $POD_IP) and the per-listener overrides.
func TestAdvertise(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want node.Advertised
	}{
		{"specific binds advertise themselves", nil, nil,
			node.Advertised{HTTP: "127.0.0.1:8080", GRPC: "127.0.0.1:9090", Peer: "127.0.0.1:9190"}},
		{"0.0.0.0 with --advertise-host", []string{"--advertise-host", "10.1.2.3"}, nil,
			node.Advertised{HTTP: "10.1.2.3:8080", GRPC: "10.1.2.3:9090", Peer: "10.1.2.3:9190", Gossip: "10.1.2.3:7946"}},
		{"0.0.0.0 with POD_IP", nil, map[string]string{"POD_IP": "10.9.8.7"},
			node.Advertised{HTTP: "10.9.8.7:8080", GRPC: "10.9.8.7:9090", Peer: "10.9.8.7:9190", Gossip: "10.9.8.7:7946"}},
		{"the flag wins over POD_IP", []string{"--advertise-host", "10.1.2.3"}, map[string]string{"POD_IP": "10.9.8.7"},
			node.Advertised{HTTP: "10.1.2.3:8080", GRPC: "10.1.2.3:9090", Peer: "10.1.2.3:9190", Gossip: "10.1.2.3:7946"}},
		{"overrides", []string{"--advertise-host", "10.1.2.3", "--advertise-grpc", "api.example:443", "--advertise-peer", "n1.peers.example:9190",
			"--advertise-http", "203.0.113.5:80", "--advertise-gossip", "203.0.113.5:17946"}, nil,
			node.Advertised{HTTP: "203.0.113.5:80", GRPC: "api.example:443", Peer: "n1.peers.example:9190", Gossip: "203.0.113.5:17946"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--name", "n1", "--insecure"}, tc.args...)
			bound := [3]string{"127.0.0.1:8080", "127.0.0.1:9090", "127.0.0.1:9190"}
			if tc.name != "specific binds advertise themselves" {
				args = append(args, "--gossip", "0.0.0.0:7946")
				bound = [3]string{"0.0.0.0:8080", "[::]:9090", "0.0.0.0:9190"}
			}
			c, err := parseConfig(args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Advertise(bound[0], bound[1], bound[2])
			if err != nil || got != tc.want {
				t.Errorf("advertiseAll = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--advertise-host", "0.0.0.0"}, "--advertise-host 0.0.0.0: other machines cannot dial an unspecified address"},
		{[]string{"--advertise-gossip", "gossip.example:7946"}, "--advertise-gossip gossip.example:7946: the host must be an IP address"},
		{[]string{"--advertise-peer", "10.0.0.1"}, "--advertise-peer: address 10.0.0.1: missing port in address"},
		{[]string{"--advertise-grpc", "10.0.0.1:0"}, `--advertise-grpc: "10.0.0.1:0": the port must be from 1 to 65535`},
		{[]string{"--advertise-http", "0.0.0.0:80"}, `--advertise-http: "0.0.0.0:80": other machines cannot dial an unspecified address`},
		{[]string{"--resolver", "10.0.0.1"}, "--resolver: address 10.0.0.1: missing port in address"},
		{[]string{"--drain-delay", "-1s"}, "--drain-delay: must not be negative, got -1s"},
	} {
		_, err := parseConfig(append([]string{"--name", "n1"}, tc.args...), func(string) string { return "" }, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("parseConfig(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestSubcommands: validate-flags, version and probe.
func TestSubcommands(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	var out bytes.Buffer
	if ok, err := subcommand([]string{"validate-flags", "--name", "n1", "--http", "0.0.0.0:8080"}, env(nil), &out, io.Discard); !ok || err != nil || out.String() != "flags ok\n" {
		t.Errorf("validate-flags of good flags = %v, %v, %q", ok, err, out.String())
	}
	ok, err := subcommand([]string{"validate-flags", "--name", "n1", "--peer", "10.0.0.1:9190"}, env(nil), io.Discard, io.Discard)
	if !ok || exitCode(err) != 2 || !strings.Contains(err.Error(), "--peer 10.0.0.1:9190 is reachable from other machines") {
		t.Errorf("validate-flags of an exposed peer = %v, %v (exit %d), want exit 2 naming --peer", ok, err, exitCode(err))
	}
	ok, err = subcommand([]string{"validate-flags", "--name", "n1"}, env(map[string]string{"RINGLIMIT_MAX_KEYS": "0"}), io.Discard, io.Discard)
	if !ok || exitCode(err) != 2 || err.Error() != "--max-keys: must be at least 1, got 0" {
		t.Errorf("validate-flags with a bad environment = %v, %v", ok, err)
	}
	out.Reset()
	version, commit = "v9.8.7", "abc123"
	t.Cleanup(func() { version, commit = "", "" })
	if ok, err := subcommand([]string{"version"}, env(nil), &out, io.Discard); !ok || err != nil || !strings.HasPrefix(out.String(), "ringlimit-node v9.8.7 (commit abc123, go1.") {
		t.Errorf("version = %v, %v, %q", ok, err, out.String())
	}
	if ok, _ := subcommand([]string{"--name", "n1"}, env(nil), io.Discard, io.Discard); ok {
		t.Errorf("flags taken for a subcommand")
	}

	status := http.StatusServiceUnavailable
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		fmt.Fprint(w, "body\n")
	}))
	defer srv.Close()
	port := srv.Listener.Addr().String()[strings.LastIndexByte(srv.Listener.Addr().String(), ':'):]
	probeEnv := env(map[string]string{"RINGLIMIT_HTTP": "0.0.0.0" + port})
	if _, err := subcommand([]string{"probe"}, probeEnv, io.Discard, io.Discard); err == nil || exitCode(err) != 1 ||
		!strings.Contains(err.Error(), "answered 503 Service Unavailable") {
		t.Errorf("probe of a node not ready = %v, want an error with exit 1", err)
	}
	status = http.StatusOK
	out.Reset()
	if _, err := subcommand([]string{"probe"}, probeEnv, &out, io.Discard); err != nil || out.String() != "http://127.0.0.1"+port+"/readyz: body\n" {
		t.Errorf("probe of a ready node = %v, %q", err, out.String())
	}
	if _, err := subcommand([]string{"probe", srv.URL + "/other"}, env(nil), io.Discard, io.Discard); err == nil {
		t.Errorf("probe of a URL answering 404 = nil, want an error")
	}
}

// TestBuildInfoMetric: ringlimit_build_info is 1 with the build's labels.
func TestBuildInfoMetric(t *testing.T) {
	h := newHarness(t)
	n, _ := h.start("node-1")
	v, rev, goVersion := buildInfo()
	labels := fmt.Sprintf(`{commit=%q,go_version=%q,version=%q}`, rev, goVersion, v)
	if got := h.metric(n.HTTPAddr(), "ringlimit_build_info", labels); got != 1 {
		t.Errorf("ringlimit_build_info%s = %v, want 1", labels, got)
	}
}
