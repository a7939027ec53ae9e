package bucket

// Property tests: every algorithm is compared, check by check, with a
// reference model written from the algorithm's definition in exact rational
// arithmetic (math/big.Rat), independently of the production integer-units
// representation. On top of the model comparison the tests check properties
// that hold for any correct implementation: RetryAfter is exact to the
// millisecond, a token bucket never admits more than burst + rate × elapsed,
// and time going backwards is a zero step for the buckets.
//
// Every identifier here starts with prop so that it cannot collide with the
// table tests of the same package.

import (
	"fmt"
	"math/big"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/clock"
)

// ---------------------------------------------------------------------------
// Exact arithmetic. Every helper returns a fresh value and never mutates its
// arguments, so models can share *big.Rat values between clones.

func propRat(v int64) *big.Rat { return new(big.Rat).SetInt64(v) }

// propNs returns d in nanoseconds.
func propNs(d time.Duration) *big.Rat { return propRat(int64(d)) }

func propAdd(a, b *big.Rat) *big.Rat { return new(big.Rat).Add(a, b) }
func propSub(a, b *big.Rat) *big.Rat { return new(big.Rat).Sub(a, b) }
func propMul(a, b *big.Rat) *big.Rat { return new(big.Rat).Mul(a, b) }
func propQuo(a, b *big.Rat) *big.Rat { return new(big.Rat).Quo(a, b) }

func propMin(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

func propMax(a, b *big.Rat) *big.Rat {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

// propFloor returns ⌊x⌋. big.Int.Div is Euclidean division, which for the
// always positive denominator of a Rat is the floor.
func propFloor(x *big.Rat) int64 {
	q := new(big.Int).Div(x.Num(), x.Denom())
	if !q.IsInt64() {
		panic(fmt.Sprintf("propFloor(%v) overflows int64", x))
	}
	return q.Int64()
}

// propCeil returns ⌈x⌉ = −⌊−x⌋.
func propCeil(x *big.Rat) int64 { return -propFloor(new(big.Rat).Neg(x)) }

// propCeilMs turns an exact duration in nanoseconds into a Decision duration:
// zero if x ≤ 0, else x rounded up to a whole millisecond.
func propCeilMs(x *big.Rat) time.Duration {
	if x.Sign() <= 0 {
		return 0
	}
	return time.Duration(propCeil(propQuo(x, propRat(int64(time.Millisecond))))) * time.Millisecond
}

// ---------------------------------------------------------------------------
// Reference models.

// propModel is a reference implementation of one key under one limit.
// take returns the decision the check must get; retryKnown is false when the
// model does not define RetryAfter (the sliding window counter, whose
// RetryAfter is checked by the exactness property instead).
//
// horizons returns exact durations, measured from the latest check, to the
// instants where the model's state crosses a boundary (bucket full or empty,
// the next whole token, a window end, a log entry expiring, the previous
// window's weight crossing a whole unit). The generator steps onto them, ±1ns
// and modulo 1ms, to hit the rounding edges.
type propModel interface {
	take(now clock.Instant, cost int64) (d Decision, retryKnown bool)
	clone() propModel
	horizons() []*big.Rat
}

// propParams are a limit's parameters as the test chose them; the models are
// built from these, not from the production Limit.
type propParams struct {
	alg          Algorithm
	limit, burst int64
	per          time.Duration
}

// bucketCap is the capacity of a bucket algorithm: burst, 0 meaning limit.
func (p propParams) bucketCap() int64 {
	if p.burst > 0 {
		return p.burst
	}
	return p.limit
}

// capacity is the largest cost a check may have.
func (p propParams) capacity() int64 {
	if p.alg == TokenBucket || p.alg == LeakyBucket {
		return p.bucketCap()
	}
	return p.limit
}

func (p propParams) String() string {
	return fmt.Sprintf("%v limit=%d per=%v(%dns) burst=%d", p.alg, p.limit, p.per, int64(p.per), p.burst)
}

func newPropModel(p propParams) propModel {
	per := p.per
	switch p.alg {
	case TokenBucket:
		return &propToken{limit: p.limit, capacity: propRat(p.bucketCap()), rate: big.NewRat(p.limit, int64(per))}
	case LeakyBucket:
		return &propLeaky{limit: p.limit, capacity: propRat(p.bucketCap()), rate: big.NewRat(p.limit, int64(per))}
	case FixedWindow:
		return &propFixed{limit: p.limit, per: per}
	case SlidingWindowLog:
		return &propLog{limit: p.limit, per: per}
	case SlidingWindowCounter:
		return &propCounter{limit: p.limit, per: per}
	}
	panic(fmt.Sprintf("newPropModel: algorithm %d", p.alg))
}

// propToken is a token bucket: capacity tokens, refilled at rate tokens per
// nanosecond, full when new. Time going backwards refills nothing.
type propToken struct {
	limit    int64
	capacity *big.Rat
	rate     *big.Rat      // tokens per nanosecond
	tokens   *big.Rat      // nil until the first check
	last     clock.Instant // latest time seen
}

func (m *propToken) clone() propModel { c := *m; return &c }

func (m *propToken) horizons() []*big.Rat {
	if m.tokens == nil {
		return nil
	}
	var hs []*big.Rat
	if m.tokens.Cmp(m.capacity) < 0 {
		hs = append(hs, propQuo(propSub(m.capacity, m.tokens), m.rate)) // full
	}
	if next := propRat(propFloor(m.tokens) + 1); next.Cmp(m.capacity) <= 0 {
		hs = append(hs, propQuo(propSub(next, m.tokens), m.rate)) // next whole token
	}
	return hs
}

func (m *propToken) take(now clock.Instant, cost int64) (Decision, bool) {
	if m.tokens == nil {
		m.tokens, m.last = m.capacity, now
	}
	if now > m.last {
		m.tokens = propMin(propAdd(m.tokens, propMul(propNs(now.Sub(m.last)), m.rate)), m.capacity)
		m.last = now
	}
	d := Decision{Limit: m.limit}
	c := propRat(cost)
	if m.tokens.Cmp(c) < 0 {
		d.RetryAfter = propCeilMs(propQuo(propSub(c, m.tokens), m.rate))
	} else {
		d.Allowed = true
		m.tokens = propSub(m.tokens, c)
	}
	d.Remaining = propFloor(m.tokens)
	d.ResetAfter = propCeilMs(propQuo(propSub(m.capacity, m.tokens), m.rate))
	return d, true
}

// propLeaky is a leaky bucket used as a shaper: level is the queued cost,
// draining at rate per nanosecond; empty when new.
type propLeaky struct {
	limit    int64
	capacity *big.Rat
	rate     *big.Rat
	level    *big.Rat // nil until the first check
	last     clock.Instant
}

func (m *propLeaky) clone() propModel { c := *m; return &c }

func (m *propLeaky) horizons() []*big.Rat {
	if m.level == nil || m.level.Sign() == 0 {
		return nil
	}
	next := propRat(propCeil(m.level) - 1) // next whole level below
	return []*big.Rat{
		propQuo(m.level, m.rate), // empty
		propQuo(propSub(m.level, next), m.rate),
	}
}

func (m *propLeaky) take(now clock.Instant, cost int64) (Decision, bool) {
	if m.level == nil {
		m.level, m.last = new(big.Rat), now
	}
	if now > m.last {
		m.level = propMax(propSub(m.level, propMul(propNs(now.Sub(m.last)), m.rate)), new(big.Rat))
		m.last = now
	}
	d := Decision{Limit: m.limit}
	after := propAdd(m.level, propRat(cost))
	if after.Cmp(m.capacity) <= 0 {
		d.Allowed = true
		d.Delay = propCeilMs(propQuo(m.level, m.rate))
		m.level = after
	} else {
		d.RetryAfter = propCeilMs(propQuo(propSub(after, m.capacity), m.rate))
	}
	d.Remaining = propFloor(propSub(m.capacity, m.level))
	d.ResetAfter = propCeilMs(propQuo(m.level, m.rate))
	return d, true
}

// propWindow returns the start of the window of length per that holds
// now: windows are [k·per, (k+1)·per) on the Instant timeline.
func propWindow(now clock.Instant, per time.Duration) clock.Instant {
	return now.Add(-(now.Sub(0) % per))
}

// propFixed is a fixed window counter; windows are [k·per, (k+1)·per).
type propFixed struct {
	limit       int64
	per         time.Duration
	start, last clock.Instant
	count       int64
	seen        bool
}

func (m *propFixed) clone() propModel { c := *m; return &c }

func (m *propFixed) horizons() []*big.Rat {
	if !m.seen {
		return nil
	}
	return []*big.Rat{propNs(m.start.Add(m.per).Sub(m.last))}
}

func (m *propFixed) take(now clock.Instant, cost int64) (Decision, bool) {
	if ws := propWindow(now, m.per); !m.seen || ws != m.start {
		m.start, m.count, m.seen = ws, 0, true
	}
	m.last = now
	toEnd := propNs(m.start.Add(m.per).Sub(now))
	d := Decision{Limit: m.limit}
	if m.count+cost <= m.limit {
		d.Allowed = true
		m.count += cost
	} else {
		d.RetryAfter = propCeilMs(toEnd)
	}
	d.Remaining = m.limit - m.count
	if m.count > 0 {
		d.ResetAfter = propCeilMs(toEnd)
	}
	return d, true
}

// propLogRun stands for n admitted units of cost all stamped t: the log keeps
// one timestamp per unit, and a run is just n equal timestamps written once.
type propLogRun struct {
	t clock.Instant
	n int64
}

// propLog is a sliding window log: a unit admitted at t counts at now while
// t > now − per.
type propLog struct {
	limit int64
	per   time.Duration
	runs  []propLogRun // every admission ever, oldest first
	last  clock.Instant
}

func (m *propLog) horizons() []*big.Rat {
	var hs []*big.Rat
	for _, r := range m.runs {
		if r.t > m.last.Add(-m.per) {
			hs = append(hs, propNs(r.t.Add(m.per).Sub(m.last))) // the run expires
		}
	}
	return hs
}

func (m *propLog) clone() propModel {
	c := *m
	c.runs = slices.Clone(m.runs)
	return &c
}

func (m *propLog) take(now clock.Instant, cost int64) (Decision, bool) {
	m.last = now
	var live []propLogRun // runs still in the window, oldest first
	var count int64
	for _, r := range m.runs {
		if r.t > now.Add(-m.per) {
			live = append(live, r)
			count += r.n
		}
	}
	d := Decision{Limit: m.limit}
	if count+cost <= m.limit {
		d.Allowed = true
		m.runs = append(m.runs, propLogRun{now, cost})
		live = append(live, propLogRun{now, cost})
		count += cost
	} else {
		// The k-th oldest live unit has to leave the window first.
		k := count + cost - m.limit
		for _, r := range live {
			if k <= r.n {
				d.RetryAfter = propCeilMs(propNs(r.t.Add(m.per).Sub(now)))
				break
			}
			k -= r.n
		}
	}
	d.Remaining = m.limit - count
	if count > 0 {
		d.ResetAfter = propCeilMs(propNs(live[len(live)-1].t.Add(m.per).Sub(now)))
	}
	return d, true
}

// propCounter is a sliding window counter: the estimate of the last per is
// curr + prev × (per − e)/per, e the time elapsed in the current window.
type propCounter struct {
	limit      int64
	per        time.Duration
	start      clock.Instant // current window start
	curr, prev int64
	last       clock.Instant
	seen       bool
}

func (m *propCounter) clone() propModel { c := *m; return &c }

func (m *propCounter) horizons() []*big.Rat {
	if !m.seen {
		return nil
	}
	e := m.last.Sub(m.start)
	hs := []*big.Rat{propNs(m.per - e), propNs(2*m.per - e)} // next two window ends
	if m.prev > 0 {
		// prev×(per−e')/per falls to the whole number k below its value now
		// at e' = per − k×per/prev.
		part := propQuo(propMul(propRat(m.prev), propNs(m.per-e)), propNs(m.per))
		k := propRat(propCeil(part) - 1)
		at := propSub(propNs(m.per), propQuo(propMul(k, propNs(m.per)), propRat(m.prev)))
		hs = append(hs, propSub(at, propNs(e)))
	}
	return hs
}

func (m *propCounter) take(now clock.Instant, cost int64) (Decision, bool) {
	ws := propWindow(now, m.per)
	switch {
	case !m.seen:
		m.start, m.seen = ws, true
	case ws != m.start:
		if ws.Sub(m.start) == m.per {
			m.prev = m.curr
		} else {
			m.prev = 0
		}
		m.curr, m.start = 0, ws
	}
	m.last = now
	e := now.Sub(m.start)
	prevPart := propQuo(propMul(propRat(m.prev), propNs(m.per-e)), propNs(m.per))
	d := Decision{Limit: m.limit}
	if propAdd(propAdd(propRat(m.curr), prevPart), propRat(cost)).Cmp(propRat(m.limit)) <= 0 {
		d.Allowed = true
		m.curr += cost
	}
	// RetryAfter is left to the exactness property; all we know here is that
	// a rejection must name a positive wait.
	d.Remaining = max(m.limit-m.curr-propCeil(prevPart), 0)
	// The estimate is zero once curr has aged out of the next window too.
	switch {
	case m.curr > 0:
		d.ResetAfter = propCeilMs(propNs(m.start.Add(2 * m.per).Sub(now)))
	case m.prev > 0:
		d.ResetAfter = propCeilMs(propNs(m.start.Add(m.per).Sub(now)))
	}
	return d, false
}

// propDiff compares a production decision with the model's; it returns "" if
// they agree.
func propDiff(got, want Decision, retryKnown bool) string {
	if !retryKnown {
		want.RetryAfter = got.RetryAfter
	}
	if got == want {
		return ""
	}
	return fmt.Sprintf("got  %+v\nwant %+v", got, want)
}

// propInvariants are the checks every decision must pass whatever the history.
func propInvariants(capacity int64, alg Algorithm, d Decision) string {
	switch {
	case d.Remaining < 0 || d.Remaining > capacity:
		return fmt.Sprintf("Remaining %d outside [0, %d]", d.Remaining, capacity)
	case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0:
		return "negative duration"
	case (d.RetryAfter == 0) != d.Allowed:
		return "RetryAfter must be 0 exactly when Allowed"
	case d.Delay != 0 && alg != LeakyBucket:
		return "Delay set by an algorithm other than leaky_bucket"
	case d.RetryAfter%time.Millisecond != 0 || d.ResetAfter%time.Millisecond != 0 || d.Delay%time.Millisecond != 0:
		return "duration not a whole number of milliseconds"
	}
	return ""
}

// ---------------------------------------------------------------------------
// Generators.

// propPers are the periods every algorithm must handle; random whole
// milliseconds and random nanosecond periods are drawn besides.
var propPers = []time.Duration{
	time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour,
}

func drawPropParams(rt *rapid.T, alg Algorithm) propParams {
	per := rapid.OneOf(
		rapid.SampledFrom(propPers),
		rapid.Map(rapid.Int64Range(1, 100_000), func(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }),
		rapid.Map(rapid.Int64Range(int64(time.Millisecond), int64(10*time.Second)), func(ns int64) time.Duration { return time.Duration(ns) }),
	).Draw(rt, "per")
	return propParams{
		alg:   alg,
		limit: rapid.Int64Range(1, 1000).Draw(rt, "limit"),
		per:   per,
		burst: rapid.Int64Range(0, 1000).Draw(rt, "burst"),
	}
}

func propLimit(rt *rapid.T, p propParams) Limit {
	rt.Helper()
	lim, err := NewLimit(p.alg, p.limit, p.per, p.burst)
	if err != nil {
		rt.Fatalf("NewLimit(%v): %v", p, err)
	}
	if lim.Capacity() != p.capacity() {
		rt.Fatalf("NewLimit(%v).Capacity() = %d, want %d", p, lim.Capacity(), p.capacity())
	}
	return lim
}

// propCall is one check: the time and the cost.
type propCall struct {
	now  clock.Instant
	cost int64
}

// propGen draws a sequence of checks with non-decreasing times and costs in
// [1, capacity], one at a time, so that a step can aim at the boundaries of
// the model's current state.
type propGen struct {
	p   propParams
	n   int           // checks to draw
	now clock.Instant // time of the latest check
}

func newPropGen(rt *rapid.T, p propParams, maxLen int) *propGen {
	return &propGen{
		p: p,
		n: rapid.IntRange(1, maxLen).Draw(rt, "len"),
		now: clock.Instant(rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(0, 1<<40),
			rapid.Int64Range(1_700_000_000_000_000_000, 1_800_000_000_000_000_000), // Unix time now-ish
		).Draw(rt, "start")),
	}
}

// next draws check i; m is the model after checks 0..i−1.
func (g *propGen) next(rt *rapid.T, i int, m propModel) propCall {
	if i > 0 {
		g.now = g.now.Add(drawPropStep(rt, g.p.per, g.now, m.horizons()))
	}
	return propCall{now: g.now, cost: rapid.Int64Range(1, g.p.capacity()).Draw(rt, "cost")}
}

// drawPropStep draws how far time moves before the next check: zero, tiny
// nanosecond steps, whole milliseconds, part of a period, exactly onto a
// window boundary (±1ns), several periods, a jump of up to a year, or onto
// one of the model's horizons.
func drawPropStep(rt *rapid.T, per time.Duration, now clock.Instant, horizons []*big.Rat) time.Duration {
	ns := func(lo, hi time.Duration, label string) time.Duration {
		return time.Duration(rapid.Int64Range(int64(lo), int64(hi)).Draw(rt, label))
	}
	switch rapid.IntRange(0, 8).Draw(rt, "stepKind") {
	case 0:
		return 0
	case 1:
		return ns(1, 999, "ns")
	case 2:
		return ns(1, 2000, "ms") * time.Millisecond
	case 3:
		return ns(1, per, "partOfPer")
	case 4:
		return per - now.Sub(0)%per + ns(-1, 1, "boundaryOffset")
	case 5:
		return per*ns(1, 3, "pers") + ns(0, per, "extra")
	case 6:
		return ns(0, 366*24*time.Hour, "jump")
	default:
		if len(horizons) == 0 {
			return 0
		}
		h := horizons[rapid.IntRange(0, len(horizons)-1).Draw(rt, "horizon")]
		lo, hi := propFloor(h), propCeil(h)
		const ms = int64(time.Millisecond)
		// Stepping by ⌊h⌋ mod 1ms leaves a whole number of milliseconds
		// (plus h's fraction of a nanosecond) until the boundary: the next
		// rounded-up duration sits right on a millisecond edge.
		step := []int64{lo, hi, hi + 1, lo - 1, lo % ms, hi % ms, lo%ms + 1}[rapid.IntRange(0, 6).Draw(rt, "horizonOffset")]
		return time.Duration(max(step, 0))
	}
}

// propStore returns a small store for one key.
func propStore(rt *rapid.T) *Store {
	rt.Helper()
	s, err := NewStore(StoreConfig{MaxKeys: 4, Shards: 1})
	if err != nil {
		rt.Fatalf("NewStore: %v", err)
	}
	return s
}

// propReplay returns a fresh bucket that has seen calls.
func propReplay(rt *rapid.T, lim Limit, calls []propCall) Bucket {
	rt.Helper()
	b := New(lim)
	for i, c := range calls {
		if _, err := b.TakeAt(c.now, c.cost); err != nil {
			rt.Fatalf("replay step %d: TakeAt(now=%d, cost=%d): %v", i, c.now, c.cost, err)
		}
	}
	return b
}

// ---------------------------------------------------------------------------
// Model comparison, with RetryAfter exactness and the rate bounds.

func TestPropModelTokenBucket(t *testing.T)          { propCheckModel(t, TokenBucket) }
func TestPropModelLeakyBucket(t *testing.T)          { propCheckModel(t, LeakyBucket) }
func TestPropModelFixedWindow(t *testing.T)          { propCheckModel(t, FixedWindow) }
func TestPropModelSlidingWindowLog(t *testing.T)     { propCheckModel(t, SlidingWindowLog) }
func TestPropModelSlidingWindowCounter(t *testing.T) { propCheckModel(t, SlidingWindowCounter) }

// propCheckModel runs random sequences through New(lim).TakeAt, through
// Store.Take on one key and through the model, and requires all three to agree
// on every field of every decision. It then checks RetryAfter exactness for
// every rejection and the algorithm's admission bound over the sequence.
func propCheckModel(t *testing.T, alg Algorithm) {
	t.Helper()
	rapid.Check(t, func(rt *rapid.T) {
		p := drawPropParams(rt, alg)
		lim := propLimit(rt, p)
		gen := newPropGen(rt, p, 40)

		b := New(lim)
		store := propStore(rt)
		model := newPropModel(p)
		var (
			calls []propCall
			got   []Decision
			after []propModel // model state after each call
		)
		for i := range gen.n {
			c := gen.next(rt, i, model)
			calls = append(calls, c)
			want, retryKnown := model.take(c.now, c.cost)
			after = append(after, model.clone())
			d, err := b.TakeAt(c.now, c.cost)
			if err != nil {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d): unexpected error %v", i, p, c.now, c.cost, err)
			}
			if diff := propDiff(d, want, retryKnown); diff != "" {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) differs from the model:\n%s", i, p, c.now, c.cost, diff)
			}
			if msg := propInvariants(p.capacity(), alg, d); msg != "" {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) = %+v: %s", i, p, c.now, c.cost, d, msg)
			}
			ds, err := store.Take("key", &lim, c.now, c.cost)
			if err != nil {
				rt.Fatalf("step %d: %v: Store.Take(now=%d, cost=%d): unexpected error %v", i, p, c.now, c.cost, err)
			}
			if ds != d {
				rt.Fatalf("step %d: %v: Store.Take(now=%d, cost=%d) differs from Bucket.TakeAt:\ngot  %+v\nwant %+v", i, p, c.now, c.cost, ds, d)
			}
			got = append(got, d)
		}

		propCheckRetryExact(rt, p, lim, calls, got, after)
		switch alg {
		case TokenBucket, LeakyBucket:
			propCheckRateBound(rt, p, calls, got)
		case FixedWindow, SlidingWindowLog:
			propCheckWindowBound(rt, p, calls, got)
		}
	})
}

// propCheckRetryExact checks, for every rejection at t with RetryAfter r, that
// a copy of the state (a fresh bucket replaying the history up to and
// including the rejection) admits the same check at t+r and rejects it at
// t+r−1ms. The probes are also compared with the model's copy, so the
// decisions there must be right in every field, not just Allowed.
func propCheckRetryExact(rt *rapid.T, p propParams, lim Limit, calls []propCall, got []Decision, after []propModel) {
	rt.Helper()
	probe := func(i int, at clock.Instant) Decision {
		rt.Helper()
		c := calls[i]
		d, err := propReplay(rt, lim, calls[:i+1]).TakeAt(at, c.cost)
		if err != nil {
			rt.Fatalf("step %d: %v: probe TakeAt(now=%d, cost=%d): %v", i, p, at, c.cost, err)
		}
		want, retryKnown := after[i].clone().take(at, c.cost)
		if diff := propDiff(d, want, retryKnown); diff != "" {
			rt.Fatalf("step %d: %v: probe TakeAt(now=%d, cost=%d) after the history differs from the model:\n%s", i, p, at, c.cost, diff)
		}
		return d
	}
	for i, d := range got {
		if d.Allowed {
			continue
		}
		c, r := calls[i], d.RetryAfter
		if r < time.Millisecond {
			rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) rejected with RetryAfter %v, want at least 1ms", i, p, c.now, c.cost, d.RetryAfter)
		}
		if at := probe(i, c.now.Add(r)); !at.Allowed {
			rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) rejected with RetryAfter %v, but the same check at now+RetryAfter=%d is rejected too: %+v",
				i, p, c.now, c.cost, d.RetryAfter, c.now.Add(r), at)
		}
		if before := probe(i, c.now.Add(r-time.Millisecond)); before.Allowed {
			rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) rejected with RetryAfter %v, but the same check at now+RetryAfter-1ms=%d is admitted: %+v (RetryAfter is not the shortest wait)",
				i, p, c.now, c.cost, d.RetryAfter, c.now.Add(r-time.Millisecond), before)
		}
	}
}

// propCheckRateBound checks that over any interval [t_i, t_j] of the sequence
// the admitted cost is at most burst + rate × (t_j − t_i), exactly. It holds
// for the token bucket (at most burst saved up) and for the leaky bucket (at
// most burst queued).
func propCheckRateBound(rt *rapid.T, p propParams, calls []propCall, got []Decision) {
	rt.Helper()
	burst, rate := propRat(p.bucketCap()), big.NewRat(p.limit, int64(p.per))
	for i := range calls {
		var admitted int64
		for j := i; j < len(calls); j++ {
			if got[j].Allowed {
				admitted += calls[j].cost
			}
			bound := propAdd(burst, propMul(rate, propNs(calls[j].now.Sub(calls[i].now))))
			if propRat(admitted).Cmp(bound) > 0 {
				rt.Fatalf("%v: steps %d..%d (now %d..%d) admitted cost %d > burst + rate×elapsed = %v",
					p, i, j, calls[i].now, calls[j].now, admitted, bound.FloatString(3))
			}
		}
	}
}

// propCheckWindowBound checks that a window algorithm never admits more than
// limit: per fixed window, and in every interval (t − per, t] for the log.
func propCheckWindowBound(rt *rapid.T, p propParams, calls []propCall, got []Decision) {
	rt.Helper()
	per := p.per
	for j := range calls {
		var admitted int64
		for i := j; i >= 0; i-- {
			in := calls[i].now > calls[j].now.Add(-per) // sliding: (t_j − per, t_j]
			if p.alg == FixedWindow {
				in = calls[i].now.Sub(0)/per == calls[j].now.Sub(0)/per
			}
			if in && got[i].Allowed {
				admitted += calls[i].cost
			}
		}
		if admitted > p.limit {
			rt.Fatalf("%v: the window ending at step %d (now %d) holds admitted cost %d > limit %d", p, j, calls[j].now, admitted, p.limit)
		}
	}
}

// ---------------------------------------------------------------------------
// Time going backwards.

func TestPropTokenBucketBackwardsIsZeroStep(t *testing.T) { propCheckBackwards(t, TokenBucket) }
func TestPropLeakyBucketBackwardsIsZeroStep(t *testing.T) { propCheckBackwards(t, LeakyBucket) }

// propCheckBackwards runs the same checks on two buckets: bucket a sometimes
// gets a time earlier than the latest it has seen, bucket z gets the latest
// time seen instead (a zero step). Going backwards must neither lose nor gain
// tokens, so every decision of the two must be identical, and z's must match
// the model.
func propCheckBackwards(t *testing.T, alg Algorithm) {
	t.Helper()
	rapid.Check(t, func(rt *rapid.T) {
		p := drawPropParams(rt, alg)
		lim := propLimit(rt, p)
		gen := newPropGen(rt, p, 30)
		a, z := New(lim), New(lim)
		store := propStore(rt)
		model := newPropModel(p)
		latest := gen.now
		for i := range gen.n {
			c := gen.next(rt, i, model)
			at := c.now // time given to a
			if i > 0 && latest > 0 && rapid.Bool().Draw(rt, "backwards") {
				back := time.Duration(rapid.OneOf(
					rapid.Int64Range(1, 1000),
					rapid.Int64Range(1, int64(p.per)),
					rapid.Int64Range(1, latest.UnixNano()),
				).Draw(rt, "back"))
				at = latest.Add(-min(back, latest.Sub(0)))
			}
			latest = max(latest, at)
			gen.now = latest // the next step starts from the latest time seen
			da, err := a.TakeAt(at, c.cost)
			if err != nil {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d): %v", i, p, at, c.cost, err)
			}
			dz, err := z.TakeAt(latest, c.cost)
			if err != nil {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d): %v", i, p, latest, c.cost, err)
			}
			if da != dz {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) with latest time seen %d differs from the zero step TakeAt(now=%d):\ngot  %+v\nwant %+v",
					i, p, at, c.cost, latest, latest, da, dz)
			}
			ds, err := store.Take("key", &lim, at, c.cost)
			if err != nil || ds != da {
				rt.Fatalf("step %d: %v: Store.Take(now=%d, cost=%d) = %+v, %v; want %+v (as Bucket.TakeAt)", i, p, at, c.cost, ds, err, da)
			}
			want, _ := model.take(latest, c.cost)
			if diff := propDiff(dz, want, true); diff != "" {
				rt.Fatalf("step %d: %v: TakeAt(now=%d, cost=%d) differs from the model:\n%s", i, p, latest, c.cost, diff)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Sanity checks of the reference models themselves on hand-worked cases, so
// that a model bug cannot hide behind agreeing with a production bug.

func TestPropModelsWorkedExamples(t *testing.T) {
	const ms = time.Millisecond
	type check struct {
		at   time.Duration // since Instant 0
		cost int64
		want Decision
	}
	cases := []struct {
		name   string
		p      propParams
		checks []check
	}{
		{"token 10/s burst 2", propParams{TokenBucket, 10, 2, time.Second}, []check{
			{0, 2, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 200 * time.Millisecond}},
			{50 * ms, 1, Decision{Limit: 10, Remaining: 0, RetryAfter: 50 * time.Millisecond, ResetAfter: 150 * time.Millisecond}},
			{100*ms + 1, 1, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 200 * time.Millisecond}},
		}},
		{"leaky 10/s queue 3", propParams{LeakyBucket, 10, 3, time.Second}, []check{
			{0, 1, Decision{Allowed: true, Limit: 10, Remaining: 2, ResetAfter: 100 * time.Millisecond}},
			{0, 2, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 300 * time.Millisecond, Delay: 100 * time.Millisecond}},
			{50 * ms, 1, Decision{Limit: 10, Remaining: 0, RetryAfter: 50 * time.Millisecond, ResetAfter: 250 * time.Millisecond}},
		}},
		{"fixed 3/s", propParams{FixedWindow, 3, 0, time.Second}, []check{
			{1500 * ms, 3, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 500 * time.Millisecond}},
			{1900 * ms, 1, Decision{Limit: 3, Remaining: 0, RetryAfter: 100 * time.Millisecond, ResetAfter: 100 * time.Millisecond}},
			{2000 * ms, 1, Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second}},
		}},
		{"log 3/s", propParams{SlidingWindowLog, 3, 0, time.Second}, []check{
			{0, 1, Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Second}},
			{400 * ms, 2, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Second}},
			{500 * ms, 2, Decision{Limit: 3, Remaining: 0, RetryAfter: 900 * time.Millisecond, ResetAfter: 900 * time.Millisecond}},
			{1000 * ms, 1, Decision{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: time.Second}},
		}},
		{"counter 10/s", propParams{SlidingWindowCounter, 10, 0, time.Second}, []check{
			{900 * ms, 8, Decision{Allowed: true, Limit: 10, Remaining: 2, ResetAfter: 1100 * time.Millisecond}},
			// e = 250ms: estimate 0 + 8×0.75 = 6, so 4 fit and 5 do not.
			{1250 * ms, 4, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 1750 * time.Millisecond}},
			// Three windows later prev and curr are both empty.
			{4000 * ms, 10, Decision{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 2 * time.Second}},
		}},
	}
	for _, tc := range cases {
		m := newPropModel(tc.p)
		for i, c := range tc.checks {
			now := clock.Instant(0).Add(c.at)
			got, retryKnown := m.take(now, c.cost)
			if diff := propDiff(got, c.want, retryKnown); diff != "" {
				t.Fatalf("%s: step %d: model take(now=%d, cost=%d):\n%s", tc.name, i, now, c.cost, diff)
			}
		}
	}
}
