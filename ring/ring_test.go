package ring

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// numKeys is the size of the deterministic key set "key-0".."key-99999".
const numKeys = 100_000

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}

// nodeNames returns "node-1".."node-n".
func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "node-" + strconv.Itoa(i+1)
	}
	return names
}

func mustNew(t testing.TB, cfg Config, names []string) *Ring {
	t.Helper()
	r, err := New(cfg, names)
	if err != nil {
		t.Fatalf("New(%+v, %d members %v): %v", cfg, len(names), names, err)
	}
	return r
}

// owners returns the owner of each key.
func owners(t testing.TB, r *Ring, keys []string) []string {
	t.Helper()
	out := make([]string, len(keys))
	for i, k := range keys {
		o, err := r.Owner(k)
		if err != nil {
			t.Fatalf("Owner(%q): %v", k, err)
		}
		out[i] = o
	}
	return out
}

// library builds the reference: the library itself, given the same
// members (under the same encoding) and the same settings as New.
func library(t testing.TB, cfg Config, names []string) *consistent.Consistent {
	t.Helper()
	cfg = cfg.withDefaults()
	ms := make([]consistent.Member, len(names))
	for i, n := range names {
		ms[i] = member{name: n, key: memberKey(n)}
	}
	return consistent.New(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.Partitions,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
}

// agree checks that r.Owner and the library's LocateKey name the same owner,
// a member of r, for every key.
func agree(t *testing.T, r *Ring, lib *consistent.Consistent, keys []string) {
	t.Helper()
	for _, k := range keys {
		got, err := r.Owner(k)
		if err != nil {
			t.Fatalf("Owner(%q): %v", k, err)
		}
		if !r.Has(got) {
			t.Fatalf("Owner(%q) = %q, not a member of %v", k, got, r.Members())
		}
		m := lib.LocateKey([]byte(placement(k))) // an inline key is placed by its caller's key
		if m == nil {
			t.Fatalf("library LocateKey(%q) = nil", k)
		}
		if want := m.(member).name; got != want {
			t.Fatalf("Owner(%q) = %q, library LocateKey = %q", k, got, want)
		}
		if p, want := int(xxhash.Sum64String(placement(k))%uint64(len(r.table))), lib.FindPartitionID([]byte(placement(k))); p != want {
			t.Fatalf("partition of %q = %d, library FindPartitionID = %d", k, p, want)
		}
	}
}

func TestEmptyRing(t *testing.T) {
	fromNil := mustNew(t, Config{}, nil)
	fromEmpty := mustNew(t, Config{}, []string{})
	for _, tc := range []struct {
		name string
		r    *Ring
	}{
		{"New(nil)", fromNil},
		{"New([]string{})", fromEmpty},
		{"zero Ring", &Ring{}},
		{"nil *Ring", nil},
	} {
		r := tc.r
		if o, err := r.Owner("user:42"); !errors.Is(err, ErrNoMembers) || o != "" {
			t.Errorf("%s: Owner = %q, %v; want \"\", ErrNoMembers", tc.name, o, err)
		}
		if n := r.Len(); n != 0 {
			t.Errorf("%s: Len = %d, want 0", tc.name, n)
		}
		if m := r.Members(); len(m) != 0 {
			t.Errorf("%s: Members = %v, want none", tc.name, m)
		}
		if r.Has("node-1") || r.Has("") {
			t.Errorf("%s: Has reports a member", tc.name)
		}
		if v := r.Version(); v != 0 {
			t.Errorf("%s: Version = %d, want 0", tc.name, v)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		members []string
		is      error // nil: any error
	}{
		{"empty name", Config{}, []string{"node-1", ""}, ErrInvalidMember},
		{"only empty name", Config{}, []string{""}, ErrInvalidMember},
		{"duplicate", Config{}, []string{"node-1", "node-2", "node-1"}, ErrInvalidMember},
		{"more members than partitions", Config{Partitions: 7}, nodeNames(10), ErrTooManyMembers},
		{"one more member than partitions", Config{Partitions: 7}, nodeNames(8), ErrTooManyMembers},
		{"negative partitions", Config{Partitions: -1}, nodeNames(1), nil},
		{"replication 1", Config{ReplicationFactor: 1}, nodeNames(2), nil},
		{"negative replication", Config{ReplicationFactor: -3}, nodeNames(2), nil},
		{"load 1", Config{Load: 1}, nodeNames(2), nil},
		{"load below 1", Config{Load: 0.5}, nodeNames(2), nil},
		{"negative load", Config{Load: -1.25}, nodeNames(2), nil},
		{"load NaN", Config{Load: math.NaN()}, nodeNames(2), nil},
		{"load +Inf", Config{Load: math.Inf(1)}, nodeNames(2), nil},
		{"bad config, no members", Config{Load: 0.5}, nil, nil},
	} {
		r, err := New(tc.cfg, tc.members)
		if err == nil {
			t.Errorf("%s: New(%+v, %v) = %v, nil; want an error", tc.name, tc.cfg, tc.members, r)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: New error = %v; want %v", tc.name, err, tc.is)
		}
		if r != nil {
			t.Errorf("%s: New returned a ring with its error", tc.name)
		}
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: Validate = %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig: Validate = %v", err)
	}
	if got, want := (Config{}).withDefaults(), DefaultConfig(); got != want {
		t.Errorf("zero Config defaults to %+v, want %+v", got, want)
	}
	// The smallest ring: one partition, one member, two points.
	r := mustNew(t, Config{Partitions: 1, ReplicationFactor: 2, Load: 1.01}, []string{"solo"})
	if o, err := r.Owner("anything"); o != "solo" || err != nil {
		t.Errorf("Owner on a one-partition ring = %q, %v", o, err)
	}
}

// TestTooManyMembers: the library panics when it cannot spread the
// partitions; New must answer an error instead, at and around the limit.
func TestTooManyMembers(t *testing.T) {
	for n := 1; n <= 12; n++ {
		r, err := New(Config{Partitions: 7}, nodeNames(n))
		switch {
		case n <= 7 && err != nil:
			t.Errorf("%d members, 7 partitions: %v", n, err)
		case n <= 7:
			agree(t, r, library(t, Config{Partitions: 7}, nodeNames(n)), testKeys(1000))
		case !errors.Is(err, ErrTooManyMembers):
			t.Errorf("%d members, 7 partitions: err = %v, want ErrTooManyMembers", n, err)
		}
	}
}

// TestDistributeRecovers drives the library into its panics with settings
// that Validate refuses, and checks that distribute turns them into errors.
func TestDistributeRecovers(t *testing.T) {
	ms := func(names ...string) []consistent.Member {
		out := make([]consistent.Member, len(names))
		for i, n := range names {
			out[i] = member{name: n, key: memberKey(n)}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		ms    []consistent.Member
		cfg   consistent.Config
		isTMM bool // error should be ErrTooManyMembers
	}{
		// floor(7/2) × 1.0 = 3 partitions a member, 6 < 7.
		{"load 1 without room", ms("a", "b"), consistent.Config{Hasher: hasher{}, PartitionCount: 7, ReplicationFactor: 20, Load: 1}, true},
		// average load floor(7/8) = 0.
		{"more members than partitions", ms(nodeNames(8)...), consistent.Config{Hasher: hasher{}, PartitionCount: 7, ReplicationFactor: 20, Load: 1.25}, true},
		// The library's search visits all points but one: with a single point
		// it never visits any.
		{"one point in all", ms("a"), consistent.Config{Hasher: hasher{}, PartitionCount: 7, ReplicationFactor: 1, Load: 1.25}, true},
		// An empty non-nil member list also panics.
		{"empty member list", ms(), consistent.Config{Hasher: hasher{}, PartitionCount: 7, ReplicationFactor: 20, Load: 1.25}, true},
		{"nil hasher", ms("a", "b"), consistent.Config{PartitionCount: 7, ReplicationFactor: 20, Load: 1.25}, false},
	} {
		c, err := distribute(tc.ms, tc.cfg)
		if err == nil || c != nil {
			t.Errorf("%s: distribute = %v, %v; want nil, an error", tc.name, c, err)
			continue
		}
		if got := errors.Is(err, ErrTooManyMembers); got != tc.isTMM {
			t.Errorf("%s: errors.Is(%v, ErrTooManyMembers) = %v, want %v", tc.name, err, got, tc.isTMM)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

// TestOwnerAgreesWithLibrary: for 1..64 members every partition has the
// owner the library gives it, and every key has an owner in the member set,
// the one the library's LocateKey names (all 100k keys for 3 and 64
// members, the first 2000 otherwise).
func TestOwnerAgreesWithLibrary(t *testing.T) {
	all := testKeys(numKeys)
	for n := 1; n <= 64; n++ {
		t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) {
			t.Parallel() // the library's New is quadratic in members
			names := nodeNames(n)
			r := mustNew(t, Config{}, names)
			if r.Len() != n {
				t.Fatalf("Len = %d, want %d", r.Len(), n)
			}
			lib := library(t, Config{}, names)
			for p, got := range r.table {
				if want := lib.GetPartitionOwner(p).(member).name; got != want {
					t.Fatalf("partition %d owned by %q, library says %q", p, got, want)
				}
			}
			keys := all[:2000]
			if n == 3 || n == 64 {
				keys = all
			}
			agree(t, r, lib, keys)
		})
	}
}

// TestOwnerAgreesRandom compares Owner with LocateKey on random keys, random
// member sets and non-default configurations.
func TestOwnerAgreesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		cfg := Config{
			Partitions:        1 + rng.IntN(4000),
			ReplicationFactor: 2 + rng.IntN(60),
			Load:              1.01 + rng.Float64(),
		}
		n := 1 + rng.IntN(min(cfg.Partitions, 40))
		names := make([]string, 0, n)
		for len(names) < n {
			name := fmt.Sprintf("%x", rng.Uint32()%4096) // short names collide under the naive scheme
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		r := mustNew(t, cfg, names)
		keys := make([]string, 2000)
		for i := range keys {
			b := make([]byte, rng.IntN(40))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			keys[i] = string(b)
		}
		agree(t, r, library(t, cfg, names), keys)
	}
}

func TestOrderIrrelevant(t *testing.T) {
	names := nodeNames(17)
	want := mustNew(t, Config{}, names)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5 {
		shuffled := slices.Clone(names)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := mustNew(t, Config{}, shuffled)
		if !slices.Equal(got.table, want.table) {
			t.Fatalf("members %v give a different partition table than %v", shuffled, names)
		}
		if got.Version() != want.Version() {
			t.Fatalf("members %v: Version %#x, want %#x", shuffled, got.Version(), want.Version())
		}
	}
}

func TestMembers(t *testing.T) {
	r := mustNew(t, Config{}, []string{"node-c", "node-a", "node-b"})
	want := []string{"node-a", "node-b", "node-c"}
	got := r.Members()
	if !slices.Equal(got, want) {
		t.Fatalf("Members = %v, want %v", got, want)
	}
	got[0] = "mutated"
	if again := r.Members(); !slices.Equal(again, want) {
		t.Fatalf("changing Members' result changed the ring: %v", again)
	}
	for _, n := range want {
		if !r.Has(n) {
			t.Errorf("Has(%q) = false", n)
		}
	}
	for _, n := range []string{"", "node-d", "node", "mutated"} {
		if r.Has(n) {
			t.Errorf("Has(%q) = true", n)
		}
	}
	if r.Len() != 3 {
		t.Errorf("Len = %d, want 3", r.Len())
	}
}

// naiveMember is a member as the library expects it to be used: its String
// is the node name itself.
type naiveMember string

func (m naiveMember) String() string { return string(m) }

// collidingNames share replica strings under the library's naive scheme
// (name followed by the replica number): "node-1"+"12" = "node-11"+"2",
// "node-1"+"11" = "node-11"+"1", "node-11"+"10" = "node-111"+"0",
// "a"+"10" = "a1"+"0", and so on.
var collidingNames = []string{"node-1", "node-11", "node-111", "a", "a1"}

// TestNaiveSchemeCollides documents hazard (a): under the library's own
// scheme these names lose replica points, and removing one of them makes
// the library dereference nil. The collision check catches it too.
func TestNaiveSchemeCollides(t *testing.T) {
	cfg := DefaultConfig()
	if err := checkPoints(collidingNames, cfg.ReplicationFactor, xxhash.Sum64); !errors.Is(err, ErrHashCollision) {
		t.Errorf("checkPoints on the naive names = %v, want ErrHashCollision", err)
	} else {
		t.Logf("naive scheme: %v", err)
	}
	ms := make([]consistent.Member, len(collidingNames))
	for i, n := range collidingNames {
		ms[i] = naiveMember(n)
	}
	c := consistent.New(ms, consistent.Config{
		Hasher: hasher{}, PartitionCount: cfg.Partitions,
		ReplicationFactor: cfg.ReplicationFactor, Load: cfg.Load,
	})
	points := map[uint64]bool{}
	for _, n := range collidingNames {
		for i := range cfg.ReplicationFactor {
			points[xxhash.Sum64String(n+strconv.Itoa(i))] = true
		}
	}
	if want := len(collidingNames) * cfg.ReplicationFactor; len(points) >= want {
		t.Errorf("naive scheme: %d distinct points, expected fewer than %d", len(points), want)
	}
	panicked := func() (p any) {
		defer func() { p = recover() }()
		c.Remove("node-1")
		return nil
	}()
	if panicked == nil {
		t.Errorf("library Remove(node-1) on naive members did not panic; hazard (a) may be gone")
	} else {
		t.Logf("naive scheme: library Remove(node-1) panics: %v", panicked)
	}
}

// TestCollidingNames: names that collide under the naive scheme get
// distinct points here; a ring built without one of them keeps every other
// member's points, agrees with the library's own incremental Remove, and
// moves only keys whose owner was the removed member (measured, see below).
func TestCollidingNames(t *testing.T) {
	cfg := DefaultConfig()
	keys := testKeys(numKeys)
	all := mustNew(t, cfg, collidingNames)
	agree(t, all, library(t, cfg, collidingNames), keys)
	before := owners(t, all, keys)

	for _, gone := range collidingNames {
		rest := slices.DeleteFunc(slices.Clone(collidingNames), func(n string) bool { return n == gone })
		r := mustNew(t, cfg, rest)
		agree(t, r, library(t, cfg, rest), keys)

		// The library, updated in place, must reach the same table.
		lib := library(t, cfg, collidingNames)
		lib.Remove(memberKey(gone))
		if got := len(lib.GetMembers()); got != len(rest) {
			t.Fatalf("library Remove(%q): %d members left, want %d", gone, got, len(rest))
		}
		agree(t, r, lib, keys)

		// Every surviving member keeps all its points.
		restKeys := make([]string, len(rest))
		for i, n := range rest {
			restKeys[i] = memberKey(n)
		}
		if err := checkPoints(restKeys, cfg.ReplicationFactor, xxhash.Sum64); err != nil {
			t.Fatalf("without %q: %v", gone, err)
		}

		after := owners(t, r, keys)
		var fromGone, between int
		for i := range keys {
			switch {
			case before[i] == after[i]:
			case before[i] == gone:
				fromGone++
			default:
				between++
			}
		}
		t.Logf("remove %-8q: %5.2f%% of keys moved off it, %5.2f%% moved between survivors",
			gone, pct(fromGone, len(keys)), pct(between, len(keys)))
		if frac := float64(between) / float64(len(keys)); frac > maxBetween {
			t.Errorf("remove %q: %.2f%% of keys moved between surviving members, want ≤ %.0f%%",
				gone, 100*frac, 100*maxBetween)
		}
	}
}

func TestCheckPoints(t *testing.T) {
	keys := []string{memberKey("node-1"), memberKey("node-11"), memberKey("node-111")}
	if err := checkPoints(keys, 40, xxhash.Sum64); err != nil {
		t.Errorf("encoded names: %v", err)
	}
	// A hash with few values collides quickly.
	weak := func(b []byte) uint64 { return xxhash.Sum64(b) % 50 }
	if err := checkPoints(keys, 40, weak); !errors.Is(err, ErrHashCollision) {
		t.Errorf("weak hash: checkPoints = %v, want ErrHashCollision", err)
	}
	// The encoding is what keeps replica strings apart.
	for _, pair := range [][2]string{{"node-1", "node-11"}, {"a", "a1"}, {"1", "11"}, {"x|", "x"}, {"1:", "1"}} {
		if err := checkPoints([]string{memberKey(pair[0]), memberKey(pair[1])}, 200, xxhash.Sum64); err != nil {
			t.Errorf("%q and %q: %v", pair[0], pair[1], err)
		}
	}
}

// TestMemberKeyInjective checks the property the encoding exists for: the
// replica strings of distinct names never coincide.
func TestMemberKeyInjective(t *testing.T) {
	names := []string{"", "a", "a1", "a12", "1", "11", "1:", "1:a|", "|", "1|", "node-1", "node-11", "node-111", "2:a1|", "a1|0"}
	seen := map[string]string{}
	for _, n := range names {
		for i := range 150 {
			s := fmt.Sprintf("%s%d", memberKey(n), i)
			if other, dup := seen[s]; dup && other != n {
				t.Fatalf("replica string %q comes from both %q and %q", s, other, n)
			}
			seen[s] = n
		}
	}
}

// maxLoad returns the largest and the mean number of keys a member owns.
func maxLoad(t *testing.T, r *Ring, keys []string) (maxKeys int, mean float64) {
	t.Helper()
	count := map[string]int{}
	for _, o := range owners(t, r, keys) {
		count[o]++
	}
	for _, c := range count {
		maxKeys = max(maxKeys, c)
	}
	return maxKeys, float64(len(keys)) / float64(r.Len())
}

// TestSpread: with the default Load of 1.25 no member owns more than
// ceil(floor(1021/n) × 1.25) partitions, 1.249× the mean for 3 members and
// 1.254× for 10; keys add a little noise on top.
func TestSpread(t *testing.T) {
	const bound = 1.30
	keys := testKeys(numKeys)
	for _, n := range []int{3, 10} {
		r := mustNew(t, Config{}, nodeNames(n))
		maxKeys, mean := maxLoad(t, r, keys)

		parts := map[string]int{}
		for _, o := range r.table {
			parts[o]++
		}
		maxParts := 0
		for _, c := range parts {
			maxParts = max(maxParts, c)
		}
		meanParts := float64(len(r.table)) / float64(n)
		capParts := math.Ceil(float64(len(r.table)/n) * DefaultLoad)

		t.Logf("%2d members: keys max %d mean %.1f max/mean %.3f; partitions max %d mean %.1f max/mean %.3f (cap %v = %.3f×mean)",
			n, maxKeys, mean, float64(maxKeys)/mean, maxParts, meanParts, float64(maxParts)/meanParts, capParts, capParts/meanParts)
		if float64(maxParts) > capParts {
			t.Errorf("%d members: a member owns %d partitions, over the bound %v", n, maxParts, capParts)
		}
		if ratio := float64(maxKeys) / mean; ratio > bound {
			t.Errorf("%d members: max/mean keys = %.3f, want ≤ %.2f", n, ratio, bound)
		}
	}
}

// maxBetween bounds the fraction of all keys that move from one surviving
// member to another on a membership change. Bounded loads move some: a
// change of member count changes every member's capacity, so partitions
// that had spilled over to a neighbour go back, or new ones spill.
const maxBetween = 0.10

func pct(n, of int) float64 { return 100 * float64(n) / float64(of) }

// TestMovement: one member joining or leaving moves about 1/N of the keys
// (N the larger member count), and only a few keys move between members
// that stay.
func TestMovement(t *testing.T) {
	keys := testKeys(numKeys)
	for _, tc := range []struct{ from, to int }{{3, 4}, {4, 3}, {10, 11}, {10, 9}} {
		before := owners(t, mustNew(t, Config{}, nodeNames(tc.from)), keys)
		after := owners(t, mustNew(t, Config{}, nodeNames(tc.to)), keys)
		big := max(tc.from, tc.to)
		changed := "node-" + strconv.Itoa(big) // the member that joins or leaves

		var moved, between int
		for i := range keys {
			if before[i] == after[i] {
				continue
			}
			moved++
			if before[i] != changed && after[i] != changed {
				between++
			}
		}
		ideal := 1 / float64(big)
		frac := float64(moved) / float64(len(keys))
		fracBetween := float64(between) / float64(len(keys))
		t.Logf("%2d→%-2d members: %5.2f%% of keys moved (ideal %5.2f%%, %.2f× ideal); %5.2f%% of keys via %s, %5.2f%% between members that stay",
			tc.from, tc.to, 100*frac, 100*ideal, frac/ideal, pct(moved-between, len(keys)), changed, 100*fracBetween)
		if frac < 0.5*ideal || frac > 2*ideal {
			t.Errorf("%d→%d members: %.2f%% of keys moved, want within [%.2f%%, %.2f%%]",
				tc.from, tc.to, 100*frac, 50*ideal, 200*ideal)
		}
		if fracBetween > maxBetween {
			t.Errorf("%d→%d members: %.2f%% of keys moved between members that stay, want ≤ %.0f%%",
				tc.from, tc.to, 100*fracBetween, 100*maxBetween)
		}
	}
}

func TestVersion(t *testing.T) {
	v := func(cfg Config, names ...string) uint64 {
		t.Helper()
		return mustNew(t, cfg, names).Version()
	}
	abc := v(Config{}, "a", "b", "c")
	if abc == 0 {
		t.Fatal("Version of a non-empty ring is 0")
	}
	if got := v(Config{}, "c", "a", "b"); got != abc {
		t.Errorf("same members in another order: Version %#x, want %#x", got, abc)
	}
	if got := v(DefaultConfig(), "b", "c", "a"); got != abc {
		t.Errorf("explicit default Config: Version %#x, want %#x", got, abc)
	}

	// Different sets, including ones a naive join would confuse, all differ.
	sets := [][]string{
		{"a", "b", "c"}, {"a", "b"}, {"a", "b", "c", "d"}, {"a", "b", "d"}, {"a"},
		{"ab", "c"}, {"a", "bc"}, {"abc"}, {"a,b", "c"}, {"a", "b,c"},
		{"node-1"}, {"node-1", "node-11"}, {"node-11"}, {"node-1", "1"},
	}
	seen := map[uint64][]string{}
	for _, s := range sets {
		ver := v(Config{}, s...)
		if other, dup := seen[ver]; dup {
			t.Errorf("members %q and %q share Version %#x", other, s, ver)
		}
		seen[ver] = s
	}

	// Another Config maps keys differently, so it is another version.
	for _, cfg := range []Config{{Partitions: 271}, {ReplicationFactor: 20}, {Load: 1.5}} {
		if got := v(cfg, "a", "b", "c"); got == abc {
			t.Errorf("Config %+v: same Version as the default Config", cfg)
		}
	}
}

func TestOwnerAllocs(t *testing.T) {
	r := mustNew(t, Config{}, nodeNames(10))
	keys := testKeys(64)
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Owner(keys[i%len(keys)]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("Owner allocates %v times per call, want 0", allocs)
	}
}

// TestConcurrentOwner reads one Ring from many goroutines (run with -race).
func TestConcurrentOwner(t *testing.T) {
	r := mustNew(t, Config{}, nodeNames(5))
	keys := testKeys(2000)
	want := owners(t, r, keys)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range keys {
				j := (i + g*250) % len(keys)
				if o, err := r.Owner(keys[j]); err != nil || o != want[j] {
					t.Errorf("Owner(%q) = %q, %v; want %q", keys[j], o, err, want[j])
					return
				}
				_ = r.Has(want[j])
				_ = r.Version()
			}
		})
	}
	wg.Wait()
}

// benchMembers are the member counts the benchmarks run at.
var benchMembers = []int{3, 64}

// BenchmarkOwner is one Owner call, cycling through 65536 keys.
func BenchmarkOwner(b *testing.B) {
	keys := testKeys(1 << 16)
	mask := len(keys) - 1
	for _, n := range benchMembers {
		r := mustNew(b, Config{}, nodeNames(n))
		b.Run(fmt.Sprintf("members=%d/serial", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := r.Owner(keys[i&mask]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("members=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(keys))
				for pb.Next() {
					if _, err := r.Owner(keys[i&mask]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkLibraryLocateKey is the baseline for BenchmarkOwner: the
// library's LocateKey (hash, then a map lookup under a read lock) on the
// same members and keys, given as byte slices made in advance.
func BenchmarkLibraryLocateKey(b *testing.B) {
	keys := testKeys(1 << 16)
	bkeys := make([][]byte, len(keys))
	for i, k := range keys {
		bkeys[i] = []byte(k)
	}
	mask := len(keys) - 1
	for _, n := range benchMembers {
		lib := library(b, Config{}, nodeNames(n))
		b.Run(fmt.Sprintf("members=%d/serial", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if lib.LocateKey(bkeys[i&mask]) == nil {
					b.Fatal("no owner")
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("members=%d/parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(keys))
				for pb.Next() {
					if lib.LocateKey(bkeys[i&mask]) == nil {
						b.Error("no owner")
						return
					}
					i++
				}
			})
		})
	}
}

// BenchmarkNew is one ring build, as on every membership change. The
// library re-sorts all points after adding each member, so the cost grows
// faster than linearly with members.
func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 64, 256} {
		names := nodeNames(n)
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(Config{}, names); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestPartitions(t *testing.T) {
	var empty *Ring
	if p := empty.Partitions(); p != nil {
		t.Errorf("nil ring: Partitions() = %v, want nil", p)
	}
	r, err := New(Config{}, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Partitions()
	if len(p) != DefaultPartitions {
		t.Fatalf("%d partitions, want %d", len(p), DefaultPartitions)
	}
	count := map[string]int{}
	for _, o := range p {
		count[o]++
	}
	if len(count) != 3 || count["a"]+count["b"]+count["c"] != DefaultPartitions {
		t.Errorf("owners %v, want a, b and c only", count)
	}
	for i := range 2000 {
		k := fmt.Sprintf("k%d", i)
		want, _ := r.Owner(k)
		if got := p[xxhash.Sum64String(k)%DefaultPartitions]; got != want {
			t.Fatalf("%s: partition owner %s, Owner says %s", k, got, want)
		}
	}
	p[0] = "x" // the caller's copy
	if q := r.Partitions(); q[0] == "x" {
		t.Error("Partitions returned the ring's own table")
	}
}
