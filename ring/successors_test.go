package ring

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// successorsByHand is the definition of Successors: the owner of key on
// the ring over the members minus the owner and the successors found so
// far, built from scratch each time.
func successorsByHand(t testing.TB, cfg Config, members []string, key string, n int) []string {
	t.Helper()
	left := slices.Clone(members)
	owner, err := mustNew(t, cfg, left).Owner(key)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for len(out) < n && len(left) > 1 {
		left = slices.DeleteFunc(left, func(m string) bool { return m == owner })
		if owner, err = mustNew(t, cfg, left).Owner(key); err != nil {
			t.Fatal(err)
		}
		out = append(out, owner)
	}
	return out
}

func TestSuccessorsMatchDefinition(t *testing.T) {
	keys := testKeys(2000)
	ref := refRings{}
	for _, size := range []int{3, 5, 8} {
		members := nodeNames(size)
		r := mustNew(t, Config{}, members)
		for _, k := range keys {
			want := ref.successors(t, members, k)
			for n := 1; n <= size+1; n++ {
				got := r.Successors(k, n)
				w := want[:min(n, size-1)]
				if !slices.Equal(got, w) {
					t.Fatalf("%d members: Successors(%q, %d) = %v, want %v", size, k, n, got, w)
				}
			}
		}
	}
}

// refRings builds the reference rings of the default Config, once per
// member list (building them from scratch for each of 2000 keys would take
// minutes). It is not safe for concurrent use.
type refRings map[string]*Ring

// successors is successorsByHand over the default Config, every successor.
func (c refRings) successors(t testing.TB, members []string, key string) []string {
	t.Helper()
	left := slices.Clone(members)
	owner, _ := c.ring(t, left).Owner(key)
	var out []string
	for len(left) > 1 {
		left = slices.DeleteFunc(left, func(m string) bool { return m == owner })
		owner, _ = c.ring(t, left).Owner(key)
		out = append(out, owner)
	}
	return out
}

func (c refRings) ring(t testing.TB, members []string) *Ring {
	t.Helper()
	k := strings.Join(members, "\x00")
	if r, ok := c[k]; ok {
		return r
	}
	r := mustNew(t, Config{}, members)
	c[k] = r
	return r
}

// A non-default Config is the one the smaller rings are built under.
func TestSuccessorsKeepConfig(t *testing.T) {
	cfg := Config{Partitions: 97, ReplicationFactor: 7, Load: 1.5}
	members := nodeNames(6)
	r := mustNew(t, cfg, members)
	for _, k := range testKeys(300) {
		if got, want := r.Successors(k, 3), successorsByHand(t, cfg, members, k, 3); !slices.Equal(got, want) {
			t.Fatalf("Successors(%q, 3) = %v, want %v", k, got, want)
		}
	}
}

func TestSuccessorsSmallRings(t *testing.T) {
	var empty Ring
	var nilRing *Ring
	one := mustNew(t, Config{}, []string{"solo"})
	two := mustNew(t, Config{}, []string{"a", "b"})
	for _, c := range []struct {
		name string
		r    *Ring
		n    int
		want []string
	}{
		{"zero ring", &empty, 3, nil},
		{"nil ring", nilRing, 3, nil},
		{"one member", one, 1, nil},
		{"one member, n=5", one, 5, nil},
		{"n=0", two, 0, nil},
		{"n<0", two, -1, nil},
	} {
		if got := c.r.Successors("k", c.n); len(got) != 0 {
			t.Errorf("%s: Successors(k, %d) = %v, want none", c.name, c.n, got)
		}
	}
	for _, k := range testKeys(100) {
		owner, _ := two.Owner(k)
		got := two.Successors(k, 5) // capped at one
		if len(got) != 1 || got[0] == owner || !two.Has(got[0]) {
			t.Fatalf("two members: Successors(%q, 5) = %v, owner %s; want the other member", k, got, owner)
		}
	}
}

func TestSuccessorsDistinct(t *testing.T) {
	r := mustNew(t, Config{}, nodeNames(8))
	for _, k := range testKeys(500) {
		owner, _ := r.Owner(k)
		got := r.Successors(k, 7)
		seen := map[string]bool{owner: true}
		for _, s := range got {
			if seen[s] {
				t.Fatalf("Successors(%q, 7) = %v (owner %s): %s twice", k, got, owner, s)
			}
			seen[s] = true
		}
		if len(got) != 7 {
			t.Fatalf("Successors(%q, 7) = %v, want 7 members", k, got)
		}
	}
}

// Once the smaller rings are built, a call allocates only its result.
func TestSuccessorsAllocs(t *testing.T) {
	r := mustNew(t, Config{}, nodeNames(5))
	keys := testKeys(64)
	for _, k := range keys {
		r.Successors(k, 2) // build the rings
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if len(r.Successors(keys[i%len(keys)], 2)) != 2 {
			t.Fatal("fewer than 2 successors")
		}
		i++
	})
	if allocs != 1 {
		t.Errorf("Successors allocates %v times per call, want 1 (the result)", allocs)
	}
}

// TestConcurrentSuccessors builds and reads the cached rings from many
// goroutines at once (run with -race).
func TestConcurrentSuccessors(t *testing.T) {
	members := nodeNames(5)
	keys := testKeys(400)
	want := make([][]string, len(keys))
	ref := refRings{}
	for i, k := range keys {
		want[i] = ref.successors(t, members, k)
	}
	r := mustNew(t, Config{}, members)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range keys {
				j := (i + g*50) % len(keys)
				if got := r.Successors(keys[j], 4); !slices.Equal(got, want[j]) {
					t.Errorf("Successors(%q, 4) = %v, want %v", keys[j], got, want[j])
					return
				}
				_, _ = r.Owner(keys[j])
			}
		})
	}
	wg.Wait()
}

func BenchmarkSuccessors(b *testing.B) {
	keys := testKeys(1 << 12)
	mask := len(keys) - 1
	r := mustNew(b, Config{}, nodeNames(5))
	for _, k := range keys {
		r.Successors(k, 2)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Successors(keys[i&mask], 2)
			i++
		}
	})
}
