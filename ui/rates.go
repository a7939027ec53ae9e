package ui

import (
	"math"
	"sync"
	"time"
)

// Rates are a node's activity per second over Window, from two samples of
// its counts.
type Rates struct {
	WindowS        float64 `json:"window_s"`
	ChecksPerS     float64 `json:"checks_per_s"`
	RefusedPerS    float64 `json:"refused_per_s"`
	DegradedPerS   float64 `json:"degraded_per_s"`
	PeerChecksPerS float64 `json:"peer_checks_per_s"`
	// RefusalRate and ForwardedShare are the shares of the window's
	// checks that were refused and forwarded; 0 without checks.
	RefusalRate    float64 `json:"refusal_rate"`
	ForwardedShare float64 `json:"forwarded_share"`
}

// Sampling bounds of rateKeeper.
const (
	// minWindow is the shortest span a rate is computed over: samples
	// closer than that are too noisy.
	minWindow = time.Second
	// keepFor is how long a sample is kept; the newest is always kept.
	keepFor = 10 * time.Second
	// minGap is the least time between two samples kept: a page polled
	// more often gets rates, but adds no samples.
	minGap = minWindow / 10
	// maxSamples bounds the samples kept per node.
	maxSamples = 64
)

// sample is one node's counts at one uptime.
type sample struct {
	uptime time.Duration
	st     NodeStats
}

// rateKeeper turns successive samples of each node's counts into rates.
// It is safe for concurrent use.
type rateKeeper struct {
	mu   sync.Mutex
	seen map[string][]sample // by node, oldest first
}

func newRateKeeper() *rateKeeper { return &rateKeeper{seen: map[string][]sample{}} }

// add records st and returns the node's rates over the span since the
// newest earlier sample at least minWindow older, or nil when there is
// none. A node whose uptime or counts went back restarted: its earlier
// samples are dropped. A node that reports no uptime (a build from before
// it did) has no rates, and nothing of it is kept.
func (k *rateKeeper) add(st NodeStats) *Rates {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Duration(math.Round(st.UptimeS*1e3)) * time.Millisecond // nodes report whole milliseconds
	if now <= 0 {
		delete(k.seen, st.Name)
		return nil
	}
	h := k.seen[st.Name]
	if n := len(h); n > 0 {
		last := h[n-1]
		if now < last.uptime || st.Checks < last.st.Checks || st.Refused < last.st.Refused ||
			st.Forwarded < last.st.Forwarded || st.Degraded < last.st.Degraded || st.PeerChecks < last.st.PeerChecks {
			h = nil
		}
	}
	var r *Rates
	for i := len(h) - 1; i >= 0; i-- {
		if span := now - h[i].uptime; span >= minWindow {
			r = rates(&h[i].st, &st, span)
			break
		}
	}
	if n := len(h); n > 0 && now-h[n-1].uptime < minGap {
		return r // too close to the last sample kept to be worth keeping
	}
	drop := max(0, len(h)+1-maxSamples)
	for drop < len(h) && now-h[drop].uptime > keepFor {
		drop++
	}
	k.seen[st.Name] = append(h[drop:], sample{uptime: now, st: st})
	return r
}

// forget drops the samples of every node not in keep.
func (k *rateKeeper) forget(keep map[string]bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name := range k.seen {
		if !keep[name] {
			delete(k.seen, name)
		}
	}
}

// rates is the activity between samples a and b, span apart.
func rates(a, b *NodeStats, span time.Duration) *Rates {
	s := span.Seconds()
	checks := float64(b.Checks - a.Checks)
	r := &Rates{WindowS: s, ChecksPerS: checks / s, RefusedPerS: float64(b.Refused-a.Refused) / s,
		DegradedPerS: float64(b.Degraded-a.Degraded) / s, PeerChecksPerS: float64(b.PeerChecks-a.PeerChecks) / s}
	if checks > 0 {
		r.RefusalRate = float64(b.Refused-a.Refused) / checks
		r.ForwardedShare = float64(b.Forwarded-a.Forwarded) / checks
	}
	return r
}
