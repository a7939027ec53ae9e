package node_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/statefile"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/node"
)

// TestRestartKeepsReset: three nodes with state files (written only when
// the test says: their loops are stopped) spend 700 of a key's 1,000 and
// every node writes its file; the key is reset; then some nodes write
// again and every node is killed (its file left as it last wrote it, as
// by kill -9) and started again on its directory. Every node wrote after
// the reset; or only the key's successor did (the owner's file still
// holds the 700); or every node but the successor did (its file still
// holds its replica of the 700): each time every node holds the key's
// tombstone after the restart, and exactly 1,000 are admitted.
func TestRestartKeepsReset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(owner, successor string) []string // the nodes that write after the reset
	}{
		{"every node wrote after the reset", func(_, _ string) []string { return []string{"node-1", "node-2", "node-3"} }},
		{"only the successor wrote after the reset", func(_, successor string) []string { return []string{successor} }},
		{"every node but the successor wrote after the reset", func(_, successor string) []string {
			return slices.DeleteFunc([]string{"node-1", "node-2", "node-3"}, func(n string) bool { return n == successor })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
			nodes := startDurableCluster(t, dirs)
			byName := map[string]*node.Node{}
			for _, n := range nodes {
				node.StopStateLoop(n)
				byName[n.Name()] = n
			}
			if got := spend(t, nodes, "acme", 700); got != 700 {
				t.Fatalf("admitted %d of the first 700", got)
			}
			// The key as the API names it in the store; its owner holds 700
			// spent, its successor a replica of them.
			year := bucket.MustLimit(bucket.TokenBucket, 1000, 8784*time.Hour, 0)
			key := bucket.InlineKey("acme", &year)
			owner, _ := nodes[0].Router().Owner(key)
			successor := ""
			testkit.WaitFor(t, 20*time.Second, "acme's owner with 700 spent and a replica of it", func() error {
				i := slices.IndexFunc(nodes, func(n *node.Node) bool { return n.Name() == owner })
				if st, _ := nodes[i].Router().Lookup("", key, nil); st.Used != 700 {
					return fmt.Errorf("the owner %s holds acme with %d spent", owner, st.Used)
				}
				for _, n := range nodes {
					for _, st := range n.Router().Export().Replicas[owner] {
						if st.Key == key && st.Used == 700 {
							successor = n.Name()
							return nil
						}
					}
				}
				return fmt.Errorf("no node holds a replica of %s's acme with 700 spent", owner)
			})
			for _, n := range nodes {
				if err := node.WriteState(n); err != nil {
					t.Fatal(err)
				}
			}
			if res, err := nodes[0].Router().Reset(t.Context(), key, year); err != nil || res.Previous != 300 || len(res.Unconfirmed) != 0 {
				t.Fatalf("reset: %+v %v", res, err)
			}
			writers := tc.after(owner, successor)
			for _, name := range writers {
				if err := node.WriteState(byName[name]); err != nil {
					t.Fatal(err)
				}
			}
			killAll(t, nodes, dirs)
			nodes = startDurableCluster(t, dirs)
			defer func() {
				for _, n := range nodes {
					closeNode(t, n)
				}
			}()
			testkit.WaitFor(t, 20*time.Second, "every node holds acme's tombstone", func() error {
				for _, n := range nodes {
					if st, _ := n.Router().Lookup("", key, nil); st.ResetAt == 0 {
						return fmt.Errorf("%s holds acme with %d spent and no tombstone", n.Name(), st.Used)
					}
				}
				return nil
			})
			if got := spend(t, nodes, "acme", 1100); got != 1000 {
				t.Fatalf("after the restart (owner %s, successor %s, written after the reset: %v), admitted %d of 1,100, want exactly 1,000",
					owner, successor, writers, got)
			}
		})
	}
}

// killAll stops every node as kill -9 would leave their state files: as
// each last wrote it (a node's Close writes one more, which is put back).
func killAll(t *testing.T, nodes []*node.Node, dirs []string) {
	t.Helper()
	files := make([][]byte, len(dirs))
	for i, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, statefile.Name))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = b
	}
	for _, n := range nodes {
		closeNode(t, n)
	}
	for i, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, statefile.Name), files[i], 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
