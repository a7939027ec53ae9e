package main

import (
	"crypto/sha256"
	"encoding/hex"
	"github.com/ringlimit/ringlimit/node"

	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func writeKeys(t *testing.T, path string, keys ...[]byte) {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(b64(k) + "\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newTestKey(t *testing.T) []byte {
	t.Helper()
	k, err := cluster.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParseConfigGossipFlags(t *testing.T) {
	dir := t.TempDir()
	k := newTestKey(t)
	good := filepath.Join(dir, "good")
	writeKeys(t, good, k)
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("c2hvcnQ=\n"), 0o600); err != nil { // "short"
		t.Fatal(err)
	}
	env := map[string]string{"RINGLIMIT_GOSSIP_KEY_FILE": good, "RINGLIMIT_CLUSTER_NAME": "prod"}
	c, err := parseConfig(nil, func(v string) string { return env[v] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ClusterName != "prod" || c.GossipKeyFile != good || !slices.EqualFunc(c.GossipKeys, [][]byte{k}, bytes.Equal) {
		t.Errorf("config from the environment = %q %q %x", c.ClusterName, c.GossipKeyFile, c.GossipKeys)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster-name", strings.Repeat("x", 256)}, "--cluster-name: must be at most 255 bytes, got 256"},
		{[]string{"--gossip-key-file", filepath.Join(dir, "missing")}, "--gossip-key-file: open"},
		{[]string{"--gossip-key-file", bad}, "--gossip-key-file: line 1: key of 5 bytes"},
	} {
		_, err := parseConfig(tt.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseConfig(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// startArgs starts an in-process node on 127.0.0.1:0 with extra flags,
// re-reading its gossip key file every 100ms, and closes it when the test
// ends.
func (h *harness) startArgs(name string, extra ...string) (*node.Node, *testkit.LogSink) {
	h.t.Helper()
	return h.startWith(name, extra, func(c *config) { c.KeyFilePoll = 100 * time.Millisecond })
}

// memberNames returns the names n's cluster lists, in any state.
func memberNames(n *node.Node) []string {
	var out []string
	for _, m := range n.Cluster().Members() {
		out = append(out, m.Name)
	}
	return out
}

// TestClusterNameSeparates: a node with another --cluster-name never joins,
// and a node with the same name does.
func TestClusterNameSeparates(t *testing.T) {
	h := newHarness(t)
	blue, _ := h.startArgs("blue-1", "--cluster-name", "blue")
	green, greenLog := h.startArgs("green-1", "--cluster-name", "green", "--join", blue.Cluster().LocalAddr())
	blue2, _ := h.startArgs("blue-2", "--cluster-name", "blue", "--join", blue.Cluster().LocalAddr())
	h.waitRing([]*node.Node{blue, blue2}, []string{"blue-1", "blue-2"}, 10*time.Second)
	// Until green-1 has been refused three times, neither side lists the
	// other.
	testkit.WaitFor(t, 20*time.Second, "three refused join attempts of green-1", func() error {
		for _, n := range []*node.Node{blue, blue2} {
			if got := memberNames(n); !slices.Equal(got, []string{"blue-1", "blue-2"}) {
				t.Fatalf("%s lists %v, want [blue-1 blue-2]", n.Router().Self(), got)
			}
		}
		if got := memberNames(green); !slices.Equal(got, []string{"green-1"}) {
			t.Fatalf("green-1 lists %v, want only itself", got)
		}
		if n := len(greenLog.Records("cluster: join failed, will retry")); n < 3 {
			return fmt.Errorf("%d refused attempts", n)
		}
		return nil
	})
}

// TestKeyFileRotation rewrites the key files of 3 running nodes (add K2,
// make it primary, remove K1), each step on every node before the next,
// and checks every 50 ms that they stay one cluster with no member suspect
// or dead; a file that does not parse is ignored; then a node with only K2
// joins.
func TestKeyFileRotation(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	k1, k2 := newTestKey(t), newTestKey(t)
	names := []string{"a", "b", "c"}
	files := make([]string, len(names))
	nodes := make([]*node.Node, len(names))
	sinks := make([]*testkit.LogSink, len(names))
	for i, name := range names {
		files[i] = filepath.Join(dir, name+".keys")
		writeKeys(t, files[i], k1)
		extra := []string{"--cluster-name", "prod", "--gossip-key-file", files[i]}
		if i > 0 {
			extra = append(extra, "--join", nodes[0].Cluster().LocalAddr())
		}
		nodes[i], sinks[i] = h.startArgs(name, extra...)
	}
	h.waitRing(nodes, names, 10*time.Second)

	oneCluster := func() error {
		for _, n := range nodes {
			ms := n.Cluster().Members()
			if len(ms) != len(names) {
				return fmt.Errorf("%s lists %v", n.Router().Self(), ms)
			}
			for _, m := range ms {
				if m.State != cluster.StateAlive {
					return fmt.Errorf("%s sees %s %s", n.Router().Self(), m.Name, m.State)
				}
			}
		}
		return nil
	}
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		for {
			if err := oneCluster(); err != nil {
				watched <- err
				return
			}
			select {
			case <-stop:
				watched <- nil
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	waitKeys := func(step string, want [][]byte) {
		t.Helper()
		testkit.WaitFor(t, 5*time.Second, step, func() error {
			for _, n := range nodes {
				if got := n.Cluster().Keys(); !slices.EqualFunc(got, want, bytes.Equal) {
					return fmt.Errorf("%s's keyring is %v, want %v", n.Router().Self(), fingerprints(got), fingerprints(want))
				}
			}
			return nil
		})
		time.Sleep(time.Second) // gossip and probes under the new keyrings
	}

	for _, step := range []struct {
		name string
		keys [][]byte
	}{
		{"add K2", [][]byte{k1, k2}},
		{"use K2", [][]byte{k2, k1}},
		{"remove K1", [][]byte{k2}},
	} {
		for _, f := range files {
			writeKeys(t, f, step.keys...)
		}
		waitKeys(step.name, step.keys)
	}
	// A file that does not parse leaves the keyring as it was.
	if err := os.WriteFile(files[0], []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the bad key file reported", func() bool {
		return len(sinks[0].Records("gossip key file ignored; keyring unchanged")) > 0
	})
	if got := nodes[0].Cluster().Keys(); !slices.EqualFunc(got, [][]byte{k2}, bytes.Equal) {
		t.Errorf("after a bad key file: keyring %v, want [K2]", fingerprints(got))
	}
	close(stop)
	if err := <-watched; err != nil {
		t.Fatalf("during the rotation: %v", err)
	}

	d2 := filepath.Join(dir, "d.keys")
	writeKeys(t, d2, k2)
	d, _ := h.startArgs("d", "--cluster-name", "prod", "--gossip-key-file", d2, "--join", nodes[1].Cluster().LocalAddr())
	h.waitRing(append(slices.Clone(nodes), d), append(slices.Clone(names), "d"), 10*time.Second)
}

// fingerprints names keys as the node's logs do: the first 8 hex digits of
// each key's SHA-256.
func fingerprints(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		sum := sha256.Sum256(k)
		out[i] = hex.EncodeToString(sum[:4])
	}
	return out
}
