package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/internal/statefile"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// startDurable starts a node named name with its state in dir, logging
// to sink when not nil; the caller closes it (closeNode).
func startDurable(t *testing.T, name, dir string, sink *testkit.LogSink, join ...string) *node.Node {
	t.Helper()
	cfg := node.DefaultLocalConfig()
	cfg.Name, cfg.Join, cfg.DataDir = name, join, dir
	// A peer deadline a starved CPU cannot miss. With the local 500ms, a
	// key's successor stood in for an owner slow to answer a batch that
	// the owner then decided as well: the batch was counted twice (250
	// admitted of the 300 left after the restart).
	cfg.PeerTimeout = 3 * time.Second
	if sink != nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(sink, nil))
	}
	n, err := node.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return n
}

func closeNode(t *testing.T, n *node.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Errorf("close %s: %v", n.Name(), err)
	}
}

// startCluster starts node-1..node-3 on dirs, node-2 and node-3 joining
// node-1, and waits until every ring holds the three and they are ready.
func startDurableCluster(t *testing.T, dirs []string) []*node.Node {
	t.Helper()
	n1 := startDurable(t, "node-1", dirs[0], nil)
	nodes := []*node.Node{n1, startDurable(t, "node-2", dirs[1], nil, n1.GossipAddr()), startDurable(t, "node-3", dirs[2], nil, n1.GossipAddr())}
	want := []string{"node-1", "node-2", "node-3"}
	testkit.WaitFor(t, 20*time.Second, "three nodes on every ring, ready", func() error {
		for _, n := range nodes {
			if got := slices.Sorted(slices.Values(n.Router().RingMembers())); !slices.Equal(got, want) {
				return fmt.Errorf("%s's ring: %v", n.Name(), got)
			}
			if n.Router().RingVersion() != n1.Router().RingVersion() {
				return fmt.Errorf("%s's ring version differs from node-1's", n.Name())
			}
			if err := n.Ready(); err != nil {
				return fmt.Errorf("%s: %w", n.Name(), err)
			}
		}
		return nil
	})
	return nodes
}

// spend sends n checks of cost 1 on key (1,000 a year, burst 1,000: no
// token comes back within a test) through the nodes in turn, 50 a call,
// and returns how many were admitted.
func spend(t *testing.T, nodes []*node.Node, key string, n int) int {
	t.Helper()
	var clients []*client.Client
	for _, nd := range nodes {
		cl, err := client.New(client.Config{Targets: []string{nd.GRPCAddr()}, Timeout: 5 * time.Second, RingRefresh: -1}) // stays on its node
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		clients = append(clients, cl)
	}
	limit := &pb.Limit{Limit: 1000, PerMs: (8784 * time.Hour).Milliseconds()}
	admitted := 0
	for call := 0; n > 0; call++ {
		batch := make([]*pb.Check, min(n, 50))
		for i := range batch {
			batch[i] = &pb.Check{Key: key, Limit: limit}
		}
		ds, err := clients[call%len(clients)].Check(t.Context(), batch...)
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
		for _, d := range ds {
			if d.GetDegraded() {
				t.Fatalf("call %d: a degraded decision %v", call, d)
			}
			if d.GetAllowed() {
				admitted++
			}
		}
		n -= len(batch)
	}
	return admitted
}

// TestRestartKeepsSpend: three nodes with state files spend 700 of a
// key's 1,000; all three stop (one after the other: each hands its keys
// to the ones left) and start again on the same directories: exactly 300
// more are admitted, through all three. Each node wrote one state file,
// and no temporary file is left.
func TestRestartKeepsSpend(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	nodes := startDurableCluster(t, dirs)
	if got := spend(t, nodes, "acme", 700); got != 700 {
		t.Fatalf("admitted %d of the first 700", got)
	}
	for _, n := range nodes {
		closeNode(t, n)
	}
	for _, d := range dirs {
		if ents, _ := os.ReadDir(d); len(ents) != 1 || ents[0].Name() != statefile.Name {
			t.Fatalf("%s holds %v, want only %s", d, ents, statefile.Name)
		}
	}
	nodes = startDurableCluster(t, dirs)
	defer func() {
		for _, n := range nodes {
			closeNode(t, n)
		}
	}()
	if got := spend(t, nodes, "acme", 400); got != 300 {
		t.Fatalf("after the restart, admitted %d of 400, want exactly 300", got)
	}
}

// TestStateFileRefused: a node whose state file was cut short logs that
// it refused it, sets it aside (ringlimit.state.refused) and starts empty:
// all 1,000 of the key are admitted again.
func TestStateFileRefused(t *testing.T) {
	dir := t.TempDir()
	n := startDurable(t, "solo", dir, nil)
	testkit.WaitFor(t, 10*time.Second, "ready", n.Ready)
	if got := spend(t, []*node.Node{n}, "acme", 600); got != 600 {
		t.Fatalf("admitted %d of 600", got)
	}
	closeNode(t, n)
	path := filepath.Join(dir, statefile.Name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	sink := &testkit.LogSink{}
	n = startDurable(t, "solo", dir, sink)
	defer closeNode(t, n)
	recs := sink.Records("state file refused: starting empty")
	if len(recs) != 1 || recs[0]["file"] != path || recs[0]["set_aside"] != path+".refused" {
		t.Fatalf("log records %v; lines %v", recs, sink.Lines())
	}
	if err, _ := recs[0]["err"].(string); err != fmt.Sprintf("statefile: corrupt: checksum mismatch (%d bytes: cut short or changed)", len(b)-5) {
		t.Fatalf("logged err %q", err)
	}
	if _, err := os.Stat(path + ".refused"); err != nil {
		t.Fatalf("the refused file was not set aside: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, "ready", n.Ready)
	if got := spend(t, []*node.Node{n}, "acme", 1000); got != 1000 {
		t.Fatalf("after the refused file, admitted %d of 1000, want all", got)
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
