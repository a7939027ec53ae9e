package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

func withKeys(keys ...[]byte) nodeOpt { return func(c *Config) { c.Keys = keys } }
func withLabel(l string) nodeOpt      { return func(c *Config) { c.Label = l } }

func mustKey(t *testing.T) []byte {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startClusterWith is startCluster with opts given to every member.
func startClusterWith(t *testing.T, opts []nodeOpt, names ...string) []*testNode {
	t.Helper()
	nodes := []*testNode{startNode(t, names[0], opts...)}
	for _, name := range names[1:] {
		nodes = append(nodes, startNode(t, name, append(slices.Clone(opts), withSeeds(nodes[0].LocalAddr()))...))
	}
	testkit.WaitFor(t, 10*time.Second, "cluster converges", func() error { return expectOneCluster(nodes) })
	return nodes
}

// TestOutsidersRefused: members with key K and label "prod" never list a
// member with no key, with another key, or with K and another label, and
// it never lists them, however long it tries to join.
func TestOutsidersRefused(t *testing.T) {
	t.Parallel()
	k := mustKey(t)
	// The members must stay one cluster at every poll: patient probes, so
	// that a busy machine does not get one of them suspected (seen: c
	// suspect with two busy loops).
	nodes := startClusterWith(t, []nodeOpt{withKeys(k), withLabel("prod"), withPatience}, "a", "b", "c")
	seeds := withSeeds(nodes[0].LocalAddr(), nodes[1].LocalAddr(), nodes[2].LocalAddr())
	outsiders := []*testNode{
		startNode(t, "no-key", seeds, withLabel("prod")),
		startNode(t, "other-key", seeds, withLabel("prod"), withKeys(mustKey(t))),
		startNode(t, "other-label", seeds, withLabel("staging"), withKeys(k)),
		startNode(t, "no-label", seeds, withKeys(k)),
	}
	// Until every outsider has been refused three times (each attempt
	// contacts every seed), no side ever lists the other.
	testkit.WaitFor(t, 20*time.Second, "three refused join attempts of every outsider", func() error {
		if err := expectOneCluster(nodes); err != nil {
			t.Fatal(err)
		}
		for _, o := range outsiders {
			if got := o.Members(); len(got) != 1 || got[0].Name != o.name {
				t.Fatalf("%s: Members() = %v, want only itself", o.name, got)
			}
		}
		for _, o := range outsiders {
			if n := o.log.count(msgJoinFailed); n < 3 {
				return fmt.Errorf("%s: %d refused attempts", o.name, n)
			}
		}
		return nil
	})
	for _, o := range outsiders {
		for _, n := range nodes {
			if o.rec.saw(n.name, StateAlive) || o.rec.saw(n.name, StateSuspect) {
				t.Errorf("%s's listener was told of %s", o.name, n.name)
			}
			for _, s := range []State{StateAlive, StateSuspect, StateDead, StateLeft} {
				if n.rec.saw(o.name, s) {
					t.Errorf("%s's listener was told of %s (%s)", n.name, o.name, s)
				}
			}
		}
	}
}

// TestKeyRotation rotates K1 to K2 one member at a time (add K2 everywhere,
// use it everywhere, remove K1 everywhere) while watching every 50 ms that
// no member ever sees another suspect or dead; then a member with only K2
// joins. Not parallel: false suspicions from a loaded machine would be
// blamed on the rotation.
func TestKeyRotation(t *testing.T) {
	k1, k2 := mustKey(t), mustKey(t)
	nodes := startClusterWith(t, []nodeOpt{withKeys(k1), withLabel("prod"), withPatience}, "a", "b", "c")

	stop := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := expectOneCluster(nodes); err != nil {
				watchErr <- err
				return
			}
			select {
			case <-stop:
				watchErr <- nil
				return
			case <-tick.C:
			}
		}
	}()

	steps := []struct {
		name string
		do   func(*testNode) error
		want [][]byte // each member's keyring after the step
	}{
		{"AddKey(K2)", func(n *testNode) error { return n.AddKey(k2) }, [][]byte{k1, k2}},
		{"UseKey(K2)", func(n *testNode) error { return n.UseKey(k2) }, [][]byte{k2, k1}},
		{"RemoveKey(K1)", func(n *testNode) error { return n.RemoveKey(k1) }, [][]byte{k2}},
	}
	for i, s := range steps {
		for _, n := range nodes {
			if err := s.do(n); err != nil {
				t.Fatalf("step %d: %s.%s = %v", i, n.name, s.name, err)
			}
			if got := n.Keys(); !slices.EqualFunc(got, s.want, bytes.Equal) {
				t.Fatalf("step %d: %s.Keys() after %s = %x, want %x", i, n.name, s.name, got, s.want)
			}
			time.Sleep(400 * time.Millisecond) // gossip and probes in the mixed state
		}
	}
	close(stop)
	if err := <-watchErr; err != nil {
		t.Fatalf("during the rotation: %v", err)
	}
	for _, o := range nodes {
		for _, n := range nodes {
			if o.rec.saw(n.name, StateSuspect) || o.rec.saw(n.name, StateDead) {
				t.Errorf("%s saw %s suspect or dead during the rotation", o.name, n.name)
			}
		}
	}

	d := startNode(t, "d", withKeys(k2), withLabel("prod"), withPatience, withSeeds(nodes[1].LocalAddr()))
	all := append(slices.Clone(nodes), d)
	testkit.WaitFor(t, 10*time.Second, "d with K2 joins", func() error { return expectOneCluster(all) })

	old := startNode(t, "old", withKeys(k1), withLabel("prod"), withSeeds(nodes[1].LocalAddr()))
	testkit.WaitFor(t, 20*time.Second, "three refused join attempts of the member with only K1", func() error {
		if n := old.log.count(msgJoinFailed); n < 3 {
			return fmt.Errorf("%d refused attempts", n)
		}
		return nil
	})
	if err := expectOneCluster(all); err != nil {
		t.Errorf("after a member with only K1 tried to join: %v", err)
	}
	if got := old.Members(); len(got) != 1 {
		t.Errorf("member with only K1: Members() = %v, want only itself", got)
	}
}

func TestKeyringMethods(t *testing.T) {
	t.Parallel()
	k1, k2, k3 := mustKey(t), mustKey(t), bytes.Repeat([]byte{7}, 16)
	a := startNode(t, "a", withKeys(k1))

	if err := a.AddKey(make([]byte, 20)); err == nil || !strings.Contains(err.Error(), "16, 24 or 32 bytes") {
		t.Errorf("AddKey(20 bytes) = %v, want a length error", err)
	}
	if err := a.UseKey(k2); err == nil {
		t.Errorf("UseKey(not in keyring) = nil, want an error")
	}
	if err := a.RemoveKey(k1); err == nil || !strings.Contains(err.Error(), "primary") {
		t.Errorf("RemoveKey(primary) = %v, want an error", err)
	}
	if err := a.RemoveKey(k2); err != nil {
		t.Errorf("RemoveKey(absent) = %v, want nil", err)
	}
	// Removing a key in the middle keeps the order of the others.
	for _, k := range [][]byte{k2, k3} {
		if err := a.AddKey(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveKey(k2); err != nil {
		t.Fatal(err)
	}
	if got, want := a.Keys(), [][]byte{k1, k3}; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Errorf("Keys() = %x, want %x", got, want)
	}
	// Keys returns copies.
	a.Keys()[0][0] ^= 0xff
	if got := a.Keys()[0]; !bytes.Equal(got, k1) {
		t.Errorf("Keys() shares memory with the keyring")
	}
	if err := a.SetKeys([][]byte{k2, k3}); err != nil {
		t.Fatal(err)
	}
	if got, want := a.Keys(), [][]byte{k2, k3}; !slices.EqualFunc(got, want, bytes.Equal) {
		t.Errorf("after SetKeys: Keys() = %x, want %x", got, want)
	}
	if err := a.SetKeys(nil); err == nil {
		t.Errorf("SetKeys(nil) = nil, want an error")
	}

	plain := startNode(t, "plain")
	for name, err := range map[string]error{
		"AddKey": plain.AddKey(k1), "UseKey": plain.UseKey(k1), "RemoveKey": plain.RemoveKey(k1),
		"SetKeys": plain.SetKeys([][]byte{k1}),
	} {
		if !errors.Is(err, ErrNoEncryption) {
			t.Errorf("%s without Keys = %v, want ErrNoEncryption", name, err)
		}
	}
	if got := plain.Keys(); got != nil {
		t.Errorf("Keys() without Keys = %x, want nil", got)
	}
}

func TestNewKey(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	if len(a) != KeyLen || bytes.Equal(a, b) {
		t.Errorf("NewKey() = %x, %x: want two different %d-byte keys", a, b, KeyLen)
	}
	if err := checkKey(a); err != nil {
		t.Error(err)
	}
}
