package bucket

import "math"

// A key's state belongs to the limit it was built under. When a check names
// different parameters for a key that already has state, the store converts
// the state instead of resetting it: the cost already spent (rounded up, so
// the conversion never grants a fraction of a token) carries over into the
// new limit, capped at its capacity. Nothing is refilled by changing a limit,
// and a client cannot empty its own history by alternating limits.

// used returns the cost spent (or queued) under l at time now, rounded up.
func (l *Limit) used(st *state, log []logRun, now int64) int64 {
	switch l.alg {
	case TokenBucket:
		level := st.a + l.elapsedUnits(st.b, now, l.capUnits-st.a)
		return ceilDiv(l.capUnits-level, l.den)
	case LeakyBucket:
		level := st.a - l.elapsedUnits(st.b, now, st.a)
		return ceilDiv(level, l.den)
	case FixedWindow:
		// A state in a later window (a clock behind the one that wrote it)
		// holds its spend there, where takeFixed counts it.
		if start, _ := l.window(now); st.a >= start {
			return st.b
		}
		return 0
	case SlidingWindowCounter:
		w := int64(l.per)
		start := windowStart(now, w)
		curr, prev := st.b>>32, st.b&(1<<32-1)
		switch st.a {
		case start:
			return curr + mulDivCeil(prev, w-(now-start), w)
		case start - w:
			return mulDivCeil(curr, w-(now-start), w)
		}
		return 0
	default:
		var n int64
		for _, r := range log {
			if r.t > now-int64(l.per) {
				n += r.n
			}
		}
		return n
	}
}

// setUsed makes st (and *log) the state of a key under l that has spent used
// at time now.
func (l *Limit) setUsed(st *state, log *[]logRun, now, used int64) {
	used = min(max(used, 0), l.maxUsed()) // a token bucket may carry a debt (settle.go)
	switch l.alg {
	case TokenBucket:
		st.a, st.b = (l.burst-used)*l.den, now
	case LeakyBucket:
		st.a, st.b = used*l.den, now
	case FixedWindow:
		st.a, _ = l.window(now)
		st.b = used
	case SlidingWindowCounter:
		st.a, st.b = windowStart(now, int64(l.per)), used<<32
	default:
		// Keep the newest units still in the new window, then add the rest
		// as one run at now (or at the newest run, if the clock is behind
		// it): at most one run more than the log held, within maxLogRuns.
		rs := (*log)[:0]
		var have int64
		for _, r := range *log {
			if r.t > now-int64(l.per) {
				rs = append(rs, r)
				have += r.n
			}
		}
		for have > used {
			if drop := have - used; rs[0].n > drop {
				rs[0].n -= drop
				have = used
			} else {
				have -= rs[0].n
				rs = rs[1:]
			}
		}
		if have < used {
			rs = appendRun(log, rs, now, used-have)
		}
		*log = rs
	}
}

// refund gives cost back to st at time now (see Store.Refund).
func (l *Limit) refund(st *state, now, cost int64) {
	switch l.alg {
	case TokenBucket:
		level := st.a + l.elapsedUnits(st.b, now, l.capUnits-st.a)
		st.a, st.b = min(level+cost*l.den, l.capUnits), max(now, st.b)
	case LeakyBucket:
		level := st.a - l.elapsedUnits(st.b, now, st.a)
		st.a, st.b = max(level-cost*l.den, 0), max(now, st.b)
	case FixedWindow:
		if start, _ := l.window(now); st.a >= start {
			st.b = max(st.b-cost, 0)
		}
	case SlidingWindowCounter:
		if st.a == windowStart(now, int64(l.per)) {
			curr, prev := st.b>>32, st.b&(1<<32-1)
			st.b = max(curr-cost, 0)<<32 | prev
		}
	}
}

// refundLog drops the cost newest units: the ones the refunded check added.
func (l *Limit) refundLog(log *[]logRun, cost int64) {
	rs := *log
	for cost > 0 && len(rs) > 0 {
		last := &rs[len(rs)-1]
		if last.n > cost {
			last.n -= cost
			break
		}
		cost -= last.n
		rs = rs[:len(rs)-1]
	}
	*log = rs
}

// idleAt returns the instant from which st (and log) hold nothing under l:
// a bucket full again, a window passed. 0 for a state that holds nothing
// whatever the time. A state whose clock is behind its own is not taken
// as idle earlier than its last check.
func (l *Limit) idleAt(st *state, log []logRun) int64 {
	switch l.alg {
	case TokenBucket:
		missing := l.capUnits - st.a
		if missing <= 0 {
			return 0
		}
		return satAdd(st.b, ceilDiv(missing, l.num))
	case LeakyBucket:
		if st.a <= 0 {
			return 0
		}
		return satAdd(st.b, ceilDiv(st.a, l.num))
	case FixedWindow:
		if st.b <= 0 {
			return 0
		}
		return l.windowEnd(st.a)
	case SlidingWindowCounter:
		w := int64(l.per)
		switch curr, prev := st.b>>32, st.b&(1<<32-1); {
		case curr > 0:
			return satAdd(st.a, 2*w)
		case prev > 0:
			return satAdd(st.a, w)
		}
		return 0
	default:
		if len(log) == 0 {
			return 0
		}
		return satAdd(log[len(log)-1].t, int64(l.per))
	}
}

// satAdd returns a+b for b ≥ 0, saturated at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
