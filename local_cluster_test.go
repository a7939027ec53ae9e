package ringlimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLocalClusterNine: scripts/local-cluster.sh up 9 starts nine nodes that
// all see the nine alive on one ring, a key's limit holds through all of
// them, and down stops every one. Before that, up refuses port ranges that
// overlap, and builds nothing.
func TestLocalClusterNine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a nine-node cluster")
	}
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing: scripts/local-cluster.sh needs it", tool)
			}
			t.Skipf("%s is missing: scripts/local-cluster.sh needs it", tool)
		}
	}
	httpBase, grpcBase, peerBase, gossipBase := pickPortBases(t, 9)
	dir := filepath.Join(t.TempDir(), "cluster")
	env := []string{"RINGLIMIT_CLUSTER_DIR=" + dir, "RINGLIMIT_PEER_BASE=" + strconv.Itoa(peerBase)}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RINGLIMIT_") {
			env = append(env, kv)
		}
	}
	script := func(ctx context.Context, extra []string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "scripts/local-cluster.sh", args...)
		cmd.Env = append(slices.Clone(env), extra...)
		cmd.WaitDelay = 5 * time.Second // should a node hold our pipe, the call still returns
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	bases := func(gossip int) []string {
		return []string{"RINGLIMIT_HTTP_BASE=" + strconv.Itoa(httpBase), "RINGLIMIT_GRPC_BASE=" + strconv.Itoa(grpcBase),
			"RINGLIMIT_GOSSIP_BASE=" + strconv.Itoa(gossip)}
	}

	// Gossip ports 3 above the HTTP base: nine nodes' ranges overlap.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := script(ctx, bases(httpBase+3), "up", "9")
	cancel()
	want := fmt.Sprintf("9 nodes: the HTTP ports %d-%d overlap the gossip ports %d-%d", httpBase+1, httpBase+9, httpBase+4, httpBase+12)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(out, want) {
		t.Fatalf("up 9 with overlapping ports: %v\n%s\nwant exit status 2 and %q", err, out, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "ringlimit-node")); !os.IsNotExist(err) {
		t.Errorf("up refused the ports but built the node anyway (%v)", err)
	}

	env = append(env, bases(gossipBase)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := script(ctx, nil, "down")
		if err != nil {
			t.Errorf("scripts/local-cluster.sh down: %v\n%s", err, out)
		}
		if n := strings.Count(out, "stopped (SIGTERM)"); n != 9 {
			t.Errorf("down stopped %d nodes, want 9:\n%s", n, out)
		}
	})
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	out, err = script(ctx, nil, "up", "9")
	if err != nil {
		t.Fatalf("up 9: %v\n%s", err, out)
	}
	if n := strings.Count(out, " up: http 127.0.0.1:"); n != 9 {
		t.Fatalf("up 9 reported %d nodes up, want 9:\n%s", n, out)
	}
	t.Logf("scripts/local-cluster.sh up 9 returned after %v (builds included)", time.Since(began).Round(time.Millisecond))

	tok, err := os.ReadFile(filepath.Join(dir, "admin.tokens"))
	if err != nil {
		t.Fatal(err)
	}
	_, token, _ := strings.Cut(strings.TrimSpace(string(tok)), ":")
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	do := func(method, url, body string) (*http.Response, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		return client.Do(req)
	}
	var version uint64
	for i := 1; i <= 9; i++ {
		resp, err := do(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/v1/cluster", httpBase+i), "")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Self        string `json:"self"`
			RingVersion uint64 `json:"ring_version"`
			Members     []struct {
				Name   string `json:"name"`
				State  string `json:"state"`
				OnRing bool   `json:"on_ring"`
			} `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		alive := 0
		for _, m := range st.Members {
			if m.State == "alive" && m.OnRing {
				alive++
			}
		}
		if st.Self != fmt.Sprintf("node-%d", i) || alive != 9 || len(st.Members) != 9 || (i > 1 && st.RingVersion != version) {
			t.Errorf("node-%d's /v1/cluster: self %s, %d of %d members alive on the ring, version %d (node-1's %d); want 9 of 9 at one version",
				i, st.Self, alive, len(st.Members), st.RingVersion, version)
		}
		version = st.RingVersion
	}

	// 18 checks of a limit of 5, two through each node: exactly 5 admitted.
	admitted := 0
	for c := range 18 {
		resp, err := do(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/v1/check", httpBase+1+c%9),
			`{"key":"nine:1","limit":{"limit":5,"per":"1h","failure_mode":"fail_closed"}}`)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("check %d: status %d", c, resp.StatusCode)
		}
	}
	if admitted != 5 {
		t.Errorf("nine:1 admitted %d of 18 checks through nine nodes, want exactly 5", admitted)
	}
}
