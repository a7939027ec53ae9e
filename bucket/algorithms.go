package bucket

import "math/bits"

// state is the per-key state of every algorithm but the log's timestamps.
// Its meaning depends on the algorithm:
//
//	TokenBucket          a = tokens in units of 1/den, b = time of last check
//	LeakyBucket          a = queued cost in units of 1/den, b = time of last check
//	FixedWindow          a = window start, b = count in that window
//	SlidingWindowCounter a = window start, b = curr<<32 | prev
//	SlidingWindowLog     a = 1 once the key has been seen (timestamps live apart)
//
// The zero state with seen == false means "never seen": full.
type state struct {
	a, b int64
}

// take applies one check to st (and, for the log, to *log). It assumes l is
// valid and 1 ≤ cost ≤ l.Capacity(); callers check both.
func (l *Limit) take(st *state, log *[]int64, fresh bool, now, cost int64) Decision {
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
	if e >= l.fillNs { // e×num could overflow; it is at least capUnits ≥ limit
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
	d.Remaining = level / l.den
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
	w := int64(l.per)
	start := windowStart(now, w)
	if start < st.a { // time went backwards into an earlier window
		start = st.a
	}
	if st.a != start {
		st.a, st.b = start, 0
	}
	d := Decision{Limit: l.limit}
	end := start + w - now
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

func (l *Limit) takeLog(log *[]int64, now, cost int64) Decision {
	ts := *log
	if n := len(ts); n > 0 && now < ts[n-1] {
		now = ts[n-1]
	}
	w := int64(l.per)
	// Drop what left the window: a timestamp t counts while t > now − w.
	i := 0
	for i < len(ts) && ts[i] <= now-w {
		i++
	}
	ts = ts[i:]
	n := int64(len(ts))
	d := Decision{Limit: l.limit}
	if n+cost > l.limit {
		// The (n+cost−limit)-th oldest entry must expire first.
		d.RetryAfter = roundUpMs(ts[n+cost-l.limit-1] + w - now)
	} else {
		d.Allowed = true
		if int64(cap(ts)) < n+cost && cap(*log) >= len(ts)+int(cost) {
			ts = append((*log)[:0], ts...) // compact in place
		}
		for range cost {
			ts = append(ts, now)
		}
		n += cost
	}
	*log = ts
	d.Remaining = l.limit - n
	if n > 0 {
		d.ResetAfter = roundUpMs(ts[n-1] + w - now)
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
