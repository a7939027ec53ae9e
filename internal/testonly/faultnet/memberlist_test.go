package faultnet_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ringlimit/ringlimit/internal/testonly/faultnet"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// detectWithin bounds failure detection with fastConfig's timings, whose
// expected detection time is well under a second; the margin is for -race
// on a loaded machine (10 s was not enough under the busy suite: a member
// whose own probes fail slows itself down).
const detectWithin = 30 * time.Second

// logBuffer keeps memberlist's log for a failing test. It outlives the test
// safely: memberlist may log after the test returns.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 1<<20 {
		l.buf.Write(p)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// fastConfig is memberlist.DefaultLocalConfig with probe and gossip timings
// ten times shorter. Its stream timeout stays long: it bounds a join's
// push/pull, whose first bytes a busy machine held past 500 ms (the seed
// gave up reading the stream's label header, and the join failed), and no
// test here waits on a stream to time out.
func fastConfig(name string, tr *faultnet.Transport, log *logBuffer) *memberlist.Config {
	cfg := memberlist.DefaultLocalConfig()
	cfg.Name = name
	cfg.Transport = tr
	cfg.LogOutput = log
	cfg.ProbeInterval = 100 * time.Millisecond
	cfg.ProbeTimeout = 50 * time.Millisecond
	cfg.GossipInterval = 20 * time.Millisecond
	cfg.PushPullInterval = time.Second
	cfg.TCPTimeout = 5 * time.Second
	return cfg
}

// startCluster starts one memberlist per name over n, joins them through
// the first one, and waits until every node sees every other as alive.
func startCluster(t *testing.T, n *faultnet.Network, names ...string) map[string]*memberlist.Memberlist {
	t.Helper()
	log := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("memberlist log:\n%s", log)
		}
	})
	mls := make(map[string]*memberlist.Memberlist)
	var seed string
	for _, name := range names {
		tr, err := n.Transport(name)
		if err != nil {
			t.Fatal(err)
		}
		ml, err := memberlist.Create(fastConfig(name, tr, log))
		if err != nil {
			tr.Shutdown()
			t.Fatalf("memberlist.Create(%s): %v", name, err)
		}
		t.Cleanup(func() { ml.Shutdown() })
		mls[name] = ml
		if seed == "" {
			seed = tr.Addr().String()
			continue
		}
		if _, err := ml.Join([]string{seed}); err != nil {
			t.Fatalf("%s: Join(%s): %v", name, seed, err)
		}
	}
	all := strings.Join(names, ",")
	took := testkit.Eventually(t, detectWithin, "every node sees "+all, func() bool {
		for _, ml := range mls {
			if alive(ml) != all {
				return false
			}
		}
		return true
	})
	t.Logf("%d nodes converged in %v", len(names), took.Round(time.Millisecond))
	return mls
}

// alive returns the names of the members ml sees as alive or suspect,
// sorted and comma-separated.
func alive(ml *memberlist.Memberlist) string {
	var names []string
	for _, m := range ml.Members() {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

func views(mls map[string]*memberlist.Memberlist) string {
	var b strings.Builder
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range mls {
			if !yield(k) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "%s sees [%s] ", name, alive(mls[name]))
	}
	return b.String()
}

func TestMemberlistIsolateAndRejoin(t *testing.T) {
	n := newNet(t)
	mls := startCluster(t, n, "node-1", "node-2", "node-3")

	n.Isolate("node-3")
	took := testkit.Eventually(t, detectWithin, "node-1 and node-2 see node-3 dead", func() bool {
		return alive(mls["node-1"]) == "node-1,node-2" && alive(mls["node-2"]) == "node-1,node-2"
	})
	t.Logf("isolated node-3 declared dead by both others in %v", took.Round(time.Millisecond))
	if st := n.Stats("node-3", "node-1"); st.PacketsDropped == 0 {
		t.Errorf("no packet from node-3 to node-1 was dropped during the isolation: %+v", st)
	}

	n.Restore("node-3")
	if _, err := mls["node-3"].Join([]string{mls["node-1"].LocalNode().Address()}); err != nil {
		t.Fatalf("rejoin after Restore: %v", err)
	}
	took = testkit.Eventually(t, detectWithin, "every node sees all three again", func() bool {
		for _, ml := range mls {
			if alive(ml) != "node-1,node-2,node-3" {
				return false
			}
		}
		return true
	})
	t.Logf("rejoined in %v; %s", took.Round(time.Millisecond), views(mls))
}

func TestMemberlistOneWayCutIsDetected(t *testing.T) {
	n := newNet(t)
	mls := startCluster(t, n, "node-1", "node-2", "node-3")

	// node-3 still hears everybody but nobody hears node-3: its acks are
	// lost, so the others' probes of it fail, directly and indirectly.
	heard := n.Stats("node-1", "node-3").Packets
	n.CutOneWay("node-3", "node-1")
	n.CutOneWay("node-3", "node-2")
	took := testkit.Eventually(t, detectWithin, "node-1 and node-2 see node-3 dead", func() bool {
		return alive(mls["node-1"]) == "node-1,node-2" && alive(mls["node-2"]) == "node-1,node-2"
	})
	t.Logf("mute node-3 declared dead in %v; %s", took.Round(time.Millisecond), views(mls))
	if got := n.Stats("node-1", "node-3").Packets; got <= heard {
		t.Errorf("node-3 received no packet from node-1 during the one-way cut (%d before, %d after)", heard, got)
	}
	if got := n.Stats("node-3", "node-1"); got.PacketsDropped == 0 {
		t.Errorf("no packet from node-3 to node-1 was dropped: %+v", got)
	}
}
