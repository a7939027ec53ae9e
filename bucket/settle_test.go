package bucket

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// TestSettleDebt: a budget of 1,000 refilling 1 token a second. Reserve
// 100 and settle 30 gives 70 back; an overrun of 150 past zero is a debt
// that a check of 1 waits out exactly: (150 + 1) seconds.
func TestSettleDebt(t *testing.T) {
	s := newStore(t, 16, 1)
	l := MustLimit(TokenBucket, 1000, 1000*time.Second, 1000)
	const k = "k"
	sec := clock.Instant(time.Second)
	type step struct {
		do        string // "take" or "settle"
		at        clock.Instant
		n         int64
		allowed   bool
		remaining int64
		retry     time.Duration
	}
	for i, st := range []step{
		{"take", 0, 100, true, 900, 0},
		{"settle", 0, 30 - 100, true, 970, 0},
		{"take", 0, 870, true, 100, 0},
		{"take", 0, 100, true, 0, 0},
		{"settle", 0, 250 - 100, true, 0, 0},
		{"take", 0, 1, false, 0, 151 * time.Second},
		{"take", 150 * sec, 1, false, 0, time.Second},
		{"take", 151 * sec, 1, true, 0, 0},
		{"settle", 151 * sec, -1000, true, 1000, 0}, // a give-back stops at full
	} {
		var d Decision
		var err error
		if st.do == "take" {
			d, err = s.Take(k, &l, st.at, st.n)
		} else {
			d, err = s.Settle(k, &l, st.at, st.n)
		}
		if err != nil || d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != st.retry {
			t.Fatalf("step %d: %s(%v, %d) = %+v, %v; want allowed %v remaining %d retry %v", i, st.do, st.at, st.n, d, err, st.allowed, st.remaining, st.retry)
		}
	}
}

// TestDebtTravels: a state in debt keeps it through Used, Set, Merge,
// MergeEach and Charge; a state without debt still saturates at the
// capacity as before.
func TestDebtTravels(t *testing.T) {
	l := MustLimit(TokenBucket, 1000, 1000*time.Second, 1000)
	src := newStore(t, 16, 1)
	mustTake(t, src, "k", &l, 0, 1000)
	if _, err := src.Settle("k", &l, 0, 150); err != nil {
		t.Fatal(err)
	}
	_, used, _ := src.Used("k", 0)
	if used != 1150 {
		t.Fatalf("used in debt = %d, want 1150", used)
	}
	for name, apply := range map[string]func(*Store) error{
		"Set":    func(s *Store) error { return s.Set("k", &l, 0, used) },
		"Merge":  func(s *Store) error { return s.Merge("k", &l, 0, used) },
		"Charge": func(s *Store) error { return s.Charge("k", &l, 0, used) },
		"MergeEach": func(s *Store) error {
			s.MergeEach(0, 1, func(int) (string, *Limit, int64) { return "k", &l, used })
			return nil
		},
	} {
		dst := newStore(t, 16, 1)
		if err := apply(dst); err != nil {
			t.Fatal(name, err)
		}
		if _, got, _ := dst.Used("k", 0); got != 1150 {
			t.Errorf("%s: used %d, want 1150", name, got)
		}
		if d := mustTake(t, dst, "k", &l, 0, 1); d.Allowed || d.RetryAfter != 151*time.Second {
			t.Errorf("%s: check of 1 = %+v, want refused for 151s", name, d)
		}
	}
	// Two copies that both spent without debt still saturate at empty.
	dst := newStore(t, 16, 1)
	mustTake(t, dst, "k", &l, 0, 800)
	if err := dst.Charge("k", &l, 0, 800); err != nil {
		t.Fatal(err)
	}
	if _, got, _ := dst.Used("k", 0); got != 1000 {
		t.Errorf("Charge without debt: used %d, want 1000", got)
	}
	// The debt is floored at one capacity.
	if _, err := dst.Settle("k", &l, 0, 5000); err != nil {
		t.Fatal(err)
	}
	if _, got, _ := dst.Used("k", 0); got != 2000 {
		t.Errorf("floored debt: used %d, want 2000", got)
	}
	// A lease grants nothing from a key in debt.
	if n := dst.Grant("k", &l, 0, 10); n != 0 {
		t.Errorf("Grant in debt = %d", n)
	}
}

func TestSettleRefusesWindows(t *testing.T) {
	s := newStore(t, 16, 1)
	l := MustLimit(FixedWindow, 10, time.Second, 0)
	if _, err := s.Settle("k", &l, 0, 1); !errors.Is(err, ErrNotToken) {
		t.Fatalf("Settle on a fixed window: %v", err)
	}
}

func TestReservationID(t *testing.T) {
	key := "i|tb:10/1s:10|user:42"
	id := NewReservationID(key)
	if got, err := ParseReservationID(id); err != nil || got != key {
		t.Fatalf("ParseReservationID(%q) = %q, %v", id, got, err)
	}
	if NewReservationID(key) == id {
		t.Fatal("two ids alike")
	}
	for _, bad := range []string{"", "r1.", "r2." + id[3:], id + "x", id[:len(id)-1], "r1..AAAAAAAAAAAAAAAA", "r1.a.AAAAAAAAAAAAAA*A", strings.Repeat("r", MaxReservationIDLen+1)} {
		if _, err := ParseReservationID(bad); !errors.Is(err, ErrReservationID) {
			t.Errorf("ParseReservationID(%q) = %v", bad, err)
		}
	}
}

func TestReservations(t *testing.T) {
	l := MustLimit(TokenBucket, 10, time.Second, 10)
	tab := NewReservations(2)
	a := Reservation{ID: NewReservationID("a"), Key: "a", Limit: l, Reserved: 5, Expires: 100}
	b := Reservation{ID: NewReservationID("b"), Key: "b", Limit: l, Reserved: 5, Expires: 200}
	c := Reservation{ID: NewReservationID("c"), Key: "c", Limit: l, Reserved: 5, Expires: 300}
	for _, r := range []Reservation{a, b} {
		if err := tab.Add(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.Add(c, 99); !errors.Is(err, ErrReservationsFull) {
		t.Fatalf("Add to a full table: %v", err)
	}
	if err := tab.Add(c, 100); err != nil { // a expired: room
		t.Fatalf("Add after an expiry: %v", err)
	}
	if _, err := tab.Settle(a.ID, 1, 100); !errors.Is(err, ErrReservationNotFound) {
		t.Fatalf("Settle of an expired id: %v", err)
	}
	forged := b.ID[:len(b.ID)-1] + "A"
	if forged == b.ID {
		forged = b.ID[:len(b.ID)-1] + "B"
	}
	if _, err := tab.Settle(forged, 1, 100); !errors.Is(err, ErrReservationNotFound) {
		t.Fatalf("Settle of a forged nonce: %v", err)
	}
	if r, err := tab.Settle(b.ID, 7, 100); err != nil || r.Reserved != 5 || r.Settled {
		t.Fatalf("Settle = %+v, %v", r, err)
	}
	if _, err := tab.Settle(b.ID, 7, 150); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("second Settle: %v", err)
	}
	// Merge: settled wins, by id; an unsettled copy does not undo it.
	other := NewReservations(4)
	other.Merge([]Reservation{b, c}, 100)
	bs := b
	bs.Settled, bs.SettledCost = true, 7
	other.Merge([]Reservation{bs}, 100)
	other.Merge([]Reservation{b}, 100)
	if r, ok := other.Get(b.ID, 100); !ok || !r.Settled || r.SettledCost != 7 {
		t.Fatalf("merged record %+v, %v", r, ok)
	}
	if got := other.AppendKey(nil, "c", 100); len(got) != 1 || got[0].ID != c.ID {
		t.Fatalf("AppendKey = %+v", got)
	}
}

// TestReservationsKeys: Keys names the keys with a record unexpired at
// its instant, dropping the expired records: a table whose records have
// all expired is empty again.
func TestReservationsKeys(t *testing.T) {
	l := MustLimit(TokenBucket, 10, time.Second, 10)
	tab := NewReservations(8)
	for i, r := range []Reservation{
		{ID: NewReservationID("a"), Key: "a", Limit: l, Reserved: 1, Expires: 100},
		{ID: NewReservationID("a"), Key: "a", Limit: l, Reserved: 1, Expires: 300},
		{ID: NewReservationID("b"), Key: "b", Limit: l, Reserved: 1, Expires: 200},
		{ID: NewReservationID("c"), Key: "c", Limit: l, Reserved: 1, Expires: 100},
	} {
		if err := tab.Add(r, 0); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	for _, tc := range []struct {
		now  clock.Instant
		keys []string
		len  int
	}{{99, []string{"a", "b", "c"}, 4}, {100, []string{"a", "b"}, 2}, {250, []string{"a"}, 1}, {300, nil, 0}} {
		got := tab.Keys(tc.now)
		slices.Sort(got)
		if !slices.Equal(got, tc.keys) || tab.Len() != tc.len || tab.Empty() != (tc.len == 0) {
			t.Fatalf("at %d: Keys %v, %d records (empty %v); want %v, %d", tc.now, got, tab.Len(), tab.Empty(), tc.keys, tc.len)
		}
	}
}

// TestReservationsChanged: a round hands out each change once: a new
// record, then its settle; Resend hands a lost one out again.
func TestReservationsChanged(t *testing.T) {
	l := MustLimit(TokenBucket, 10, time.Second, 10)
	tab := NewReservations(4)
	r := Reservation{ID: NewReservationID("k"), Key: "k", Limit: l, Reserved: 5, Expires: 100}
	if err := tab.Add(r, 0); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		if got := len(tab.AppendChanged(nil, "k", 0)); got != want {
			t.Fatalf("round %d: %d changed, want %d", i, got, want)
		}
	}
	if _, err := tab.Settle(r.ID, 2, 0); err != nil {
		t.Fatal(err)
	}
	if got := tab.AppendChanged(nil, "k", 0); len(got) != 1 || !got[0].Settled || got[0].SettledCost != 2 {
		t.Fatalf("after the settle: %+v", got)
	}
	tab.Resend([]string{r.ID})
	if got := len(tab.AppendChanged(nil, "k", 0)); got != 1 {
		t.Fatalf("after Resend: %d changed, want 1", got)
	}
	if got := len(tab.AppendKey(nil, "k", 0)); got != 1 {
		t.Fatalf("AppendKey: %d, want every record (1)", got)
	}
}

// TestSettleMatchesReference: random takes and settles on a token bucket
// answer as an exact model in rationals in which a settle moves the level
// by the delta, clamped to [−capacity, capacity], and a debt refills like
// any level.
func TestSettleMatchesReference(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := propParams{alg: TokenBucket, limit: rapid.Int64Range(1, 1000).Draw(rt, "limit"),
			per:   time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(time.Hour)).Draw(rt, "per")),
			burst: rapid.Int64Range(0, 1000).Draw(rt, "burst")}
		l, err := NewLimit(TokenBucket, p.limit, p.per, p.burst)
		if err != nil {
			rt.Skip(err)
		}
		s := mustStore(rt, StoreConfig{MaxKeys: 16, Shards: 1})
		capa := p.bucketCap()
		rate := big.NewRat(p.limit, int64(p.per))
		capR := propRat(capa)
		tokens, last := capR, clock.Instant(0)
		now := clock.Instant(0)
		for i := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			now += clock.Instant(rapid.Int64Range(0, int64(p.per)).Draw(rt, fmt.Sprint("dt", i)))
			tokens = propMin(propAdd(tokens, propMul(propNs(now.Sub(last)), rate)), capR)
			last = now
			if rapid.Bool().Draw(rt, fmt.Sprint("settle", i)) {
				delta := rapid.Int64Range(-2*capa, 2*capa).Draw(rt, fmt.Sprint("delta", i))
				d, err := s.Settle("k", &l, now, delta)
				if err != nil {
					rt.Fatal(err)
				}
				tokens = propMax(propMin(propSub(tokens, propRat(delta)), capR), propRat(-capa))
				if want := max(propFloor(tokens), 0); d.Remaining != want {
					rt.Fatalf("step %d: Settle(%d) remaining %d, want %d", i, delta, d.Remaining, want)
				}
				continue
			}
			cost := rapid.Int64Range(1, capa).Draw(rt, fmt.Sprint("cost", i))
			d, err := s.Take("k", &l, now, cost)
			if err != nil {
				rt.Fatal(err)
			}
			c := propRat(cost)
			want := Decision{Limit: p.limit}
			if tokens.Cmp(c) < 0 {
				want.RetryAfter = propCeilMs(propQuo(propSub(c, tokens), rate))
			} else {
				want.Allowed = true
				tokens = propSub(tokens, c)
			}
			want.Remaining = max(propFloor(tokens), 0)
			want.ResetAfter = propCeilMs(propQuo(propSub(capR, tokens), rate))
			if d != want {
				rt.Fatalf("step %d: Take(%d) = %+v, want %+v", i, cost, d, want)
			}
		}
	})
}

func TestMaxReservationIDLen(t *testing.T) {
	if got := len(NewReservationID(strings.Repeat("k", MaxKeyLen+MaxNamespaceLen))); got != MaxReservationIDLen {
		t.Fatalf("the longest id is %d bytes, MaxReservationIDLen %d", got, MaxReservationIDLen)
	}
}

// TestReservationsBytes: records of long keys fill the table by bytes
// before its count: exactly MaxReservationBytes / recordBytes of them.
func TestReservationsBytes(t *testing.T) {
	tab := NewReservations(1 << 20)
	key := strings.Repeat("k", MaxKeyLen)
	l := MustLimit(TokenBucket, 10, time.Second, 10)
	n := 0
	for ; ; n++ {
		r := Reservation{ID: NewReservationID(key), Key: key, Limit: l, Reserved: 1, Expires: 100}
		if err := tab.Add(r, 0); errors.Is(err, ErrReservationsFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	per := recordBytes(&Reservation{ID: NewReservationID(key), Key: key})
	if want := int(MaxReservationBytes / per); n != want {
		t.Fatalf("%d records of %d bytes fit, want %d", n, per, want)
	}
	// Once they expire, there is room again.
	if err := tab.Add(Reservation{ID: NewReservationID(key), Key: key, Limit: l, Reserved: 1, Expires: 200}, 100); err != nil {
		t.Fatalf("Add after the expiry: %v", err)
	}
	if tab.Len() != 1 {
		t.Fatalf("Len after the sweep = %d, want 1", tab.Len())
	}
}
