package bucket

import "math/bits"

// state is the per-key state of every algorithm but the log's timestamps.
// Its meaning depends on the algorithm:
//
//	TokenBucket          a = tokens in units of 1/den, b = time of last check
//	LeakyBucket          a = queued cost in units of 1/den, b = time of last check
//	FixedWindow          a = window start, b = count in that window
//	SlidingWindowCounter a = window start, b = curr<<32 | prev
//	SlidingWindowLog     unused (the log's runs live apart)
//
// The zero state with seen == false means "never seen": full.
type state struct {
	a, b int64
}

// take applies one check to st (and, for the log, to *log). It assumes l is
// valid and 1 ≤ cost ≤ l.Capacity(); callers check both.
func (l *Limit) take(st *state, log *[]logRun, fresh bool, now, cost int64) Decision {
	switch l.alg {
	case TokenBucket:
		return l.takeToken(st, fresh, now, cost)
	case LeakyBucket:
		return l.takeLeaky(st, fresh, now, cost)
	case FixedWindow:
		return l.takeFixed(st, now, cost)
	case SlidingWindowCounter:
		return l.takeCounter(st, now, cost)
	default:
		return l.takeLog(log, now, cost)
	}
}

// elapsedUnits returns how many units refill (or drain) in the time from last
// to now, capped at limit units. Time going backwards counts as zero.
func (l *Limit) elapsedUnits(last, now, limit int64) int64 {
	e := now - last
	if e <= 0 || limit <= 0 {
		return 0
	}
	if e >= l.fillNs { // e×num could overflow; it is at least capUnits
		if limit > l.capUnits { // a token bucket in debt (settle.go)
			return l.debtUnits(e, limit)
		}
		return limit
	}
	return min(e*l.num, limit)
}

// refill returns a token bucket's level at now (a key never seen is full)
// and the time to record it at: now, or the last check's time if the clock
// is behind it.
func (l *Limit) refill(st *state, fresh bool, now int64) (level, at int64) {
	if fresh {
		return l.capUnits, now
	}
	return st.a + l.elapsedUnits(st.b, now, l.capUnits-st.a), max(now, st.b)
}

func (l *Limit) takeToken(st *state, fresh bool, now, cost int64) Decision {
	level, now := l.refill(st, fresh, now)
	need := cost * l.den
	d := Decision{Limit: l.limit}
	if level < need {
		d.RetryAfter = roundUpMs(ceilDiv(need-level, l.num))
	} else {
		d.Allowed = true
		level -= need
	}
	st.a, st.b = level, now
	d.Remaining = max(level, 0) / l.den // 0 in debt (settle.go)
	d.ResetAfter = roundUpMs(ceilDiv(l.capUnits-level, l.num))
	return d
}

func (l *Limit) takeLeaky(st *state, fresh bool, now, cost int64) Decision {
	var level int64
	if !fresh {
		level = st.a - l.elapsedUnits(st.b, now, st.a)
		if now < st.b {
			now = st.b
		}
	}
	need := cost * l.den
	d := Decision{Limit: l.limit}
	if need > l.capUnits-level { // not level+need > capUnits: that can overflow
		d.RetryAfter = roundUpMs(ceilDiv(level+need-l.capUnits, l.num))
	} else {
		d.Allowed = true
		d.Delay = roundUpMs(ceilDiv(level, l.num))
		level += need
	}
	st.a, st.b = level, now
	d.Remaining = (l.capUnits - level) / l.den
	d.ResetAfter = roundUpMs(ceilDiv(level, l.num))
	return d
}

// windowStart returns the start of the window of length w that holds now:
// windows are cut from the timeline, so they line up for every key.
func windowStart(now, w int64) int64 {
	m := now % w
	if m < 0 {
		m += w
	}
	return now - m
}

func (l *Limit) takeFixed(st *state, now, cost int64) Decision {
	start, end := l.window(now)
	if start < st.a { // time went backwards into an earlier window
		start, end = st.a, l.windowEnd(st.a)
	}
	if st.a != start {
		st.a, st.b = start, 0
	}
	d := Decision{Limit: l.limit}
	end -= now
	if st.b+cost > l.limit {
		d.RetryAfter = roundUpMs(end)
	} else {
		d.Allowed = true
		st.b += cost
	}
	d.Remaining = l.limit - st.b
	if st.b > 0 {
		d.ResetAfter = roundUpMs(end)
	}
	return d
}

func (l *Limit) takeCounter(st *state, now, cost int64) Decision {
	w := int64(l.per)
	start := windowStart(now, w)
	if start < st.a {
		start, now = st.a, st.a
	}
	curr, prev := st.b>>32, st.b&(1<<32-1)
	if st.a != start {
		if st.a == start-w {
			prev = curr
		} else {
			prev = 0
		}
		curr = 0
		st.a = start
	}
	e := now - start // elapsed in the window, 0 ≤ e < w
	d := Decision{Limit: l.limit}
	// Admit when curr + prev×(w−e)/w + cost ≤ limit, i.e. when
	// prev×(w−e) ≤ (limit−cost−curr)×w, compared exactly in 128 bits.
	room := l.limit - cost - curr
	if room < 0 {
		// Not even an empty previous window would make room in this one: wait
		// for the next window, where curr becomes prev, and then until
		// curr×(w−e') ≤ (limit−cost)×w.
		wait := start + w - now
		if curr > 0 {
			wait += w - mulDivFloor(l.limit-cost, w, curr)
		}
		d.RetryAfter = roundUpMs(wait)
	} else if cmpMul(prev, w-e, room, w) > 0 {
		// Wait in this window until prev×(w−e') ≤ room×w: e' ≥ w − room×w/prev.
		d.RetryAfter = roundUpMs(w - mulDivFloor(room, w, prev) - e)
	} else {
		d.Allowed = true
		curr += cost
	}
	st.b = curr<<32 | prev
	used := curr + mulDivCeil(prev, w-e, w)
	d.Remaining = max(l.limit-used, 0)
	switch {
	case curr > 0:
		d.ResetAfter = roundUpMs(start + 2*w - now)
	case prev > 0:
		d.ResetAfter = roundUpMs(start + w - now)
	}
	return d
}

// logRun is n units of cost admitted at one instant t: the sliding window
// log keeps runs, oldest first, with t never decreasing, instead of one
// timestamp per unit.
type logRun struct {
	t, n int64
}

// maxLogRuns bounds the runs a key's log holds (16 bytes each). A check that
// would add a run beyond it first merges two adjacent runs into the later
// one's time (see mergeRuns), so merging only ever keeps cost longer.
const maxLogRuns = 64

// mergeRuns merges the adjacent pair of runs whose merge delays the least
// cost-time (the older run's n × the gap to the next run) into the later
// run's time, and returns the log one run shorter. Units never move earlier,
// so the merged log refuses whenever the exact one would.
func mergeRuns(rs []logRun) []logRun {
	best := 0
	for i := 1; i < len(rs)-1; i++ {
		if cmpMul(rs[i].n, rs[i+1].t-rs[i].t, rs[best].n, rs[best+1].t-rs[best].t) < 0 {
			best = i
		}
	}
	rs[best+1].n += rs[best].n
	copy(rs[best:], rs[best+1:])
	return rs[:len(rs)-1]
}

// appendRun adds cost at time t (no earlier than the newest run) to rs,
// within maxLogRuns, reusing the array of *log when it has room.
func appendRun(log *[]logRun, rs []logRun, t, cost int64) []logRun {
	if k := len(rs); k > 0 && rs[k-1].t >= t {
		rs[k-1].n += cost
		return rs
	}
	if len(rs) >= maxLogRuns {
		rs = mergeRuns(rs)
	}
	if len(rs) == cap(rs) && cap(*log) > len(rs) {
		rs = append((*log)[:0], rs...) // compact in place
	}
	return append(rs, logRun{t, cost})
}

func (l *Limit) takeLog(log *[]logRun, now, cost int64) Decision {
	rs := *log
	if k := len(rs); k > 0 && now < rs[k-1].t {
		now = rs[k-1].t
	}
	w := int64(l.per)
	// Drop what left the window: a run at t counts while t > now − w.
	i := 0
	for i < len(rs) && rs[i].t <= now-w {
		i++
	}
	rs = rs[i:]
	var n int64
	for _, r := range rs {
		n += r.n
	}
	d := Decision{Limit: l.limit}
	if n+cost > l.limit {
		// The (n+cost−limit)-th oldest unit must expire first.
		k := n + cost - l.limit
		for _, r := range rs {
			if k <= r.n {
				d.RetryAfter = roundUpMs(r.t + w - now)
				break
			}
			k -= r.n
		}
	} else {
		d.Allowed = true
		rs = appendRun(log, rs, now, cost)
		n += cost
	}
	*log = rs
	d.Remaining = l.limit - n
	if n > 0 {
		d.ResetAfter = roundUpMs(rs[len(rs)-1].t + w - now)
	}
	return d
}

// cmpMul compares a×b with c×d for non-negative operands, in 128 bits.
func cmpMul(a, b, c, d int64) int {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	switch {
	case h1 != h2:
		if h1 < h2 {
			return -1
		}
		return 1
	case l1 < l2:
		return -1
	case l1 > l2:
		return 1
	}
	return 0
}

// mulDivFloor returns ⌊a×b/c⌋ for non-negative a, b and positive c, with the
// result capped at b (every caller only needs values up to b).
func mulDivFloor(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return b
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > uint64(b) {
		return b
	}
	return int64(q)
}

// mulDivCeil returns ⌈a×b/c⌉ for non-negative a, b and positive c, capped at
// MaxCount (callers compare it with counts).
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return MaxCount
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > MaxCount {
		return MaxCount
	}
	return int64(q)
}
