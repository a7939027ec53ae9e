package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// Limit is an inline limit: n per period, with a burst and an algorithm. It
// travels with every check, so the cluster needs no policy file for it.
// Build one in one expression:
//
//	client.PerSecond(5)                   // 5 per second, bursts of 5
//	client.PerMinute(100).WithBurst(20)   // 100 per minute, bursts of 20
//	client.Per(5, 10*time.Second)         // "5 per 10 s"
//	client.PerSecond(5).WithAlgorithm(bucket.LeakyBucket) // shaped: see Limiter.Reserve
//
// The algorithm is bucket.TokenBucket unless WithAlgorithm says otherwise,
// the cluster's default for inline limits; the burst is n unless WithBurst
// says otherwise. A Limit is checked when it is used (NewLimiter,
// Middleware), which return the error of a bad one (a zero or negative n
// or period, a period that is not a whole number of milliseconds); a
// constructor never fails or panics. The zero Limit means "no inline
// limit". A Limit is a value: its methods return a changed copy, and it is
// safe for concurrent use.
type Limit struct {
	set   bool // made by a constructor; the zero Limit is "none"
	n     int64
	per   time.Duration
	burst int64 // when burstSet; otherwise n
	// burstSet: WithBurst was called (its value is checked, 0 included)
	burstSet bool
	alg      bucket.Algorithm
	// A calendar window (PerCalendar): its unit, zone, and first weekday
	// when weekSet.
	cal     bucket.CalendarUnit
	zone    string
	week    time.Weekday
	weekSet bool
}

// Per returns a limit of n per period: Per(5, 10*time.Second) reads "5
// per 10 seconds". For the buckets n/period is the sustained rate; for the
// window algorithms n is the count per window of length period.
func Per(n int64, period time.Duration) Limit {
	return Limit{set: true, n: n, per: period}
}

// PerCalendar returns a limit of n per local day, week, month or year of
// zone (an IANA name such as "Europe/Berlin"; "" is UTC): a fixed window
// from local midnight of the period's first day, DST included, whatever
// the node's or the caller's zone. PerCalendar(10000, bucket.Month,
// "Europe/Berlin") is 10,000 a month, reset on the 1st at 00:00 in
// Berlin. Weeks start on Monday unless WithWeekStart says otherwise.
func PerCalendar(n int64, unit bucket.CalendarUnit, zone string) Limit {
	return Limit{set: true, n: n, alg: bucket.FixedWindow, cal: unit, zone: zone}
}

// WithWeekStart returns l, a weekly PerCalendar limit, with weeks starting
// on d.
func (l Limit) WithWeekStart(d time.Weekday) Limit {
	l.week, l.weekSet = d, true
	return l
}

// PerSecond returns a limit of n per second: Per(n, time.Second).
func PerSecond(n int64) Limit { return Per(n, time.Second) }

// PerMinute returns a limit of n per minute: Per(n, time.Minute).
func PerMinute(n int64) Limit { return Per(n, time.Minute) }

// PerHour returns a limit of n per hour: Per(n, time.Hour).
func PerHour(n int64) Limit { return Per(n, time.Hour) }

// WithBurst returns l with a bucket capacity (token bucket) or queue size
// (leaky bucket) of b; the window algorithms ignore it. Without it the
// burst is n.
func (l Limit) WithBurst(b int64) Limit {
	l.burst, l.burstSet = b, true
	return l
}

// WithAlgorithm returns l decided by a; see bucket.Algorithm for the five.
// bucket.LeakyBucket shapes instead of bursting: an admitted check holds a
// place in the key's queue and its Decision.Delay says when its turn comes.
func (l Limit) WithAlgorithm(a bucket.Algorithm) Limit {
	l.alg = a
	return l
}

// IsZero reports whether l is the zero Limit: no inline limit at all.
func (l Limit) IsZero() bool { return !l.set }

// Algorithm returns l's algorithm.
func (l Limit) Algorithm() bucket.Algorithm { return l.alg }

// Burst returns the most one check may cost: the burst of the bucket
// algorithms (n unless WithBurst says otherwise), n for the windows.
func (l Limit) Burst() int64 {
	if !l.burstSet || !l.bucketed() {
		return l.n
	}
	return l.burst
}

// String returns l as "5 per 10s", with the burst and algorithm when they
// are not the defaults: "100 per 1m0s, burst 20, leaky_bucket".
func (l Limit) String() string {
	if !l.set {
		return "no limit"
	}
	var b strings.Builder
	if l.cal != bucket.NoCalendar {
		fmt.Fprintf(&b, "%d per %v", l.n, l.cal)
		if l.weekSet {
			fmt.Fprintf(&b, " from %v", l.week)
		}
		zone := l.zone
		if zone == "" {
			zone = "UTC"
		}
		fmt.Fprintf(&b, " in %s", zone)
		return b.String()
	}
	fmt.Fprintf(&b, "%d per %v", l.n, l.per)
	if l.burstSet {
		fmt.Fprintf(&b, ", burst %d", l.burst)
	}
	if l.alg != bucket.TokenBucket {
		fmt.Fprintf(&b, ", %v", l.alg)
	}
	return b.String()
}

// Validate returns why l cannot be used, or nil: the zero Limit, a limit
// the cluster would refuse (bucket.LimitSpec, whose words the error uses, as
// the server's do), a period that is not a whole number of milliseconds
// (the wire carries milliseconds), an explicit burst below 1.
func (l Limit) Validate() error {
	if !l.set {
		return errors.New("client: no limit: build one with Per, PerSecond, PerMinute or PerHour")
	}
	if l.per%time.Millisecond != 0 {
		return fmt.Errorf("client: limit %v: per: must be a whole number of milliseconds, got %v", l, l.per)
	}
	if l.burstSet && l.bucketed() && l.burst == 0 {
		// On the wire, 0 is "no burst given": WithBurst(0) would mean n.
		return fmt.Errorf("client: limit %v: burst: must be at least 1, got 0", l)
	}
	spec := bucket.LimitSpec{Algorithm: l.alg.String(), Limit: l.n, PerDuration: l.per, Burst: l.wireBurst()}
	if l.cal != bucket.NoCalendar || l.weekSet {
		spec.Calendar, spec.Timezone, spec.WeekStart = l.cal.String(), l.zone, l.weekStart()
	}
	if _, err := spec.Parse(""); err != nil {
		return fmt.Errorf("client: limit %v: %w", l, err)
	}
	return nil
}

// proto returns l as the wire carries it. l must be valid.
func (l Limit) proto() *pb.Limit {
	p := &pb.Limit{
		Algorithm: pb.Algorithm(pb.Algorithm_value[strings.ToUpper(l.alg.String())]),
		Limit:     l.n,
		PerMs:     l.per.Milliseconds(),
		Burst:     l.wireBurst(),
	}
	if l.cal != bucket.NoCalendar {
		p.Calendar, p.Timezone, p.WeekStart = l.cal.String(), l.zone, l.weekStart()
	}
	return p
}

// weekStart is WithWeekStart's day as the wire spells it ("" unset).
func (l Limit) weekStart() string {
	if !l.weekSet {
		return ""
	}
	return strings.ToLower(l.week.String())
}

// wireBurst is the burst the wire carries: 0 (the limit) unless WithBurst
// set one on a bucket algorithm.
func (l Limit) wireBurst() int64 {
	if l.burstSet && l.bucketed() {
		return l.burst
	}
	return 0
}

// bucketed reports whether l's algorithm has a burst.
func (l Limit) bucketed() bool {
	return l.alg == bucket.TokenBucket || l.alg == bucket.LeakyBucket
}
