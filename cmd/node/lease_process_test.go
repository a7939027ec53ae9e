package main

// Concurrency limits with the real binary: leases live by the owner's
// real clock, and a SIGKILL of a key's owner neither frees nor duplicates
// the slots its holders have (each acquire was acknowledged by the key's
// successor before it was answered).
//
// The tests call one at a time and keep a log of every lease: the span in
// which the owner granted it (from the call's send to its answer) and
// whether a later call released it. On a loaded machine a step may take
// long enough for leases to expire in between, so each answer is checked
// against what the log allows at the instant it was decided: a lease
// surely live then, surely expired, or either (its expiry fell within the
// call's span). Where nothing is in doubt the check is exact.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
)

// leaseRec is one granted lease of a leaseLog.
type leaseRec struct {
	id     string
	lo, hi time.Time     // the owner granted it within [lo, hi]
	slack  time.Duration // how much later than lo..hi + ttl it may expire (a replica's)
	gone   bool          // released (or found expired) by an earlier call
}

// leaseLog is the history of one key's leases, all of one limit and TTL,
// as a test calling one at a time sees it, and the checks of its answers.
type leaseLog struct {
	h      *harness
	key    string
	limit  int64
	ttl    time.Duration
	owner  string // the node deciding the key; "" until an answer names it
	recs   []*leaseRec
	maxRTT time.Duration // the longest call so far
	doubt  int           // answers decided while some lease may or may not have expired
}

// live bounds the leases live at an instant within [s, r]: those surely
// live, and those that may be.
func (g *leaseLog) live(s, r time.Time) (sure, maybe []*leaseRec) {
	for _, l := range g.recs {
		switch {
		case l.gone || !s.Before(l.hi.Add(g.ttl+l.slack)):
		case r.Before(l.lo.Add(g.ttl)):
			sure = append(sure, l)
			maybe = append(maybe, l)
		default:
			maybe = append(maybe, l)
		}
	}
	return sure, maybe
}

// post posts body to path through via, decoding a 200 or 429 answer into
// out with every field known to out's type; it returns the status and the
// call's span.
func (g *leaseLog) post(via *proc, path, body string, out any) (int, time.Time, time.Time) {
	g.h.t.Helper()
	s := time.Now()
	status, b, err := postJSON(g.h.client, "http://"+via.http+path, body)
	r := time.Now()
	if err != nil {
		g.h.t.Fatalf("%s via %s: %v", path, via.name, err)
	}
	g.maxRTT = max(g.maxRTT, r.Sub(s))
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if status != http.StatusOK && status != http.StatusTooManyRequests || dec.Decode(out) != nil {
		g.h.t.Fatalf("%s via %s: %d %s", path, via.name, status, b)
	}
	return status, s, r
}

// sameOwner checks that owner decided, setting g.owner from the first answer.
func (g *leaseLog) sameOwner(what, owner string) {
	g.h.t.Helper()
	if g.owner == "" {
		g.owner = owner
	}
	if owner != g.owner {
		g.h.t.Fatalf("%s decided by %q, want %q", what, owner, g.owner)
	}
}

// acquire acquires one slot through via, checks the answer against the
// log and returns whether it was granted.
func (g *leaseLog) acquire(via *proc, what string) bool {
	g.h.t.Helper()
	t := g.h.t
	var a api.CheckResponse
	status, s, r := g.post(via, "/v1/acquire", fmt.Sprintf(`{"key":%q,"limit":{"algorithm":"concurrency","limit":%d},"ttl":%q}`,
		g.key, g.limit, g.ttl.String()), &a)
	what = fmt.Sprintf("%s via %s (%v)", what, via.name, r.Sub(s).Round(time.Millisecond))
	sure, maybe := g.live(s, r)
	if len(sure) != len(maybe) {
		g.doubt++
	}
	g.sameOwner(what, a.Owner)
	want := api.CheckResponse{Limit: g.limit, Scope: "inline", Owner: g.owner}
	if status == http.StatusOK {
		// Granted: fewer than limit were live when the owner decided, the
		// new lease among those it counts.
		if len(sure) >= int(g.limit) {
			t.Fatalf("%s: granted %+v while %d leases surely lived (limit %d)", what, a, len(sure), g.limit)
		}
		lo, hi := int64(len(sure))+1, min(int64(len(maybe)), g.limit-1)+1
		if a.InFlight < lo || a.InFlight > hi {
			t.Fatalf("%s: granted with in_flight %d, want %d..%d", what, a.InFlight, lo, hi)
		}
		if k, err := bucket.ParseLeaseID(a.Lease); err != nil || k != bucket.NamespaceConcurrency+g.key || slices.ContainsFunc(g.recs, func(l *leaseRec) bool { return l.id == a.Lease }) {
			t.Fatalf("%s: lease %q (key %q, %v): want a new lease of %s", what, a.Lease, k, err, g.key)
		}
		want.Allowed, want.Remaining, want.Lease, want.InFlight, want.ExpiresInMs = true, g.limit-a.InFlight, a.Lease, a.InFlight, g.ttl.Milliseconds()
		g.recs = append(g.recs, &leaseRec{id: a.Lease, lo: s, hi: r})
	} else {
		// Refused: limit were live, the earliest of them (by its
		// expiry) expiring retry_after_ms later.
		if len(maybe) < int(g.limit) {
			t.Fatalf("%s: refused %+v while at most %d leases lived (limit %d)", what, a, len(maybe), g.limit)
		}
		lo, hi := max(int64(len(sure)), g.limit), int64(len(maybe))
		if a.InFlight < lo || a.InFlight > hi {
			t.Fatalf("%s: refused with in_flight %d, want %d..%d", what, a.InFlight, lo, hi)
		}
		if !slices.ContainsFunc(maybe, func(l *leaseRec) bool {
			return a.RetryAfterMs >= max(l.lo.Add(g.ttl).Sub(r).Milliseconds(), 1) &&
				a.RetryAfterMs <= l.hi.Add(g.ttl+l.slack).Sub(s).Milliseconds()+1
		}) {
			t.Fatalf("%s: refused with retry_after_ms %d: no live lease expires then", what, a.RetryAfterMs)
		}
		want.RetryAfterMs, want.InFlight, want.Code = a.RetryAfterMs, a.InFlight, api.CodeRateLimited
	}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("%s: %d %+v, want %+v", what, status, a, want)
	}
	return status == http.StatusOK
}

// release releases l through via and checks the answer against the log:
// released when l surely lived, not when it surely expired, and the
// key's live leases after it.
func (g *leaseLog) release(via *proc, l *leaseRec, what string) {
	g.h.t.Helper()
	t := g.h.t
	var a api.ReleaseResponse
	status, s, r := g.post(via, "/v1/release", fmt.Sprintf(`{"lease":%q,"outcome":"ok","latency_ms":5}`, l.id), &a)
	what = fmt.Sprintf("%s via %s (%v)", what, via.name, r.Sub(s).Round(time.Millisecond))
	if l.gone {
		t.Fatalf("%s: the log releases %s twice", what, l.id)
	}
	sure, maybe := g.live(s, r)
	if len(sure) != len(maybe) {
		g.doubt++
	}
	wasLive := slices.Contains(sure, l)
	if status != http.StatusOK || (wasLive && !a.Released) || (!slices.Contains(maybe, l) && a.Released) {
		t.Fatalf("%s: %d %+v; the lease surely lived: %v, maybe: %v", what, status, a, wasLive, slices.Contains(maybe, l))
	}
	l.gone = true
	sure, maybe = g.live(s, r)
	if a.InFlight < int64(len(sure)) || a.InFlight > int64(len(maybe)) {
		t.Fatalf("%s: in_flight %d after it, want %d..%d", what, a.InFlight, len(sure), len(maybe))
	}
	g.sameOwner(what, a.Owner)
	want := api.ReleaseResponse{Released: a.Released, InFlight: a.InFlight, Limit: g.limit, Owner: g.owner}
	if !a.Released && a.InFlight == 0 {
		want.Limit = 0 // nothing held: the owner knows no limit
	}
	if a != want {
		t.Fatalf("%s: %+v, want %+v", what, a, want)
	}
}

// waitExpired waits until every lease of the log not released has surely
// expired, and returns how long that was.
func (g *leaseLog) waitExpired() time.Duration {
	var until time.Time
	for _, l := range g.recs {
		if e := l.hi.Add(g.ttl + l.slack); !l.gone && e.After(until) {
			until = e
		}
	}
	d := time.Until(until)
	time.Sleep(d) // the owner's clock is this machine's: nothing to poll
	return max(d, 0)
}

// wave acquires n times through procs in turn and returns how many were
// granted, and whether any answer of the wave was decided in doubt.
func (g *leaseLog) wave(name string, procs []*proc, n int) (granted int, doubt bool) {
	g.h.t.Helper()
	before := g.doubt
	for i := range n {
		if g.acquire(procs[i%len(procs)], fmt.Sprintf("%s, acquire %d", name, i)) {
			granted++
		}
	}
	return granted, g.doubt > before
}

// TestProcessLeaseTTL: limit 5 with a 2 s TTL, 8 acquires through the
// three nodes in turn and never released: exactly 5 granted (more only as
// far as the log shows leases old enough to have expired when the owner
// decided); once every lease is 2 s old on the owner's clock, all 5 slots
// are free again: 5 of 8 granted again.
func TestProcessLeaseTTL(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	all := startThreeWith(t, h, bin, nil)
	g := &leaseLog{h: h, key: "proc-lease-ttl", limit: 5, ttl: 2 * time.Second}
	for w := 1; w <= 2; w++ {
		if w == 2 {
			t.Logf("waited %v for every lease of the first wave to expire", g.waitExpired().Round(time.Millisecond))
		}
		n, doubt := g.wave(fmt.Sprintf("wave %d", w), all, 8)
		t.Logf("wave %d: %d of 8 granted by %s, an answer in doubt: %v, longest call %v", w, n, g.owner, doubt, g.maxRTT.Round(time.Millisecond))
		if n < 5 || (!doubt && n != 5) {
			t.Fatalf("wave %d: %d of 8 granted, want exactly 5", w, n)
		}
	}
}

// TestProcessLeasesSurviveKillOfOwner: limit 5, TTL 15 s, 5 slots held
// through the three nodes; the key's owner is killed with SIGKILL. Once
// the survivors' rings have dropped it, the new owner (its successor)
// refuses a 6th through either survivor (not degraded: it holds the 5
// leases); two holders release through the survivors and exactly two more
// are granted, then one refused; those two released again, the three
// never released are free after their TTL: exactly 5 of 8 granted.
func TestProcessLeasesSurviveKillOfOwner(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	all := startThreeWith(t, h, bin, nil)
	g := &leaseLog{h: h, key: "proc-lease-kill", limit: 5, ttl: 15 * time.Second}
	if n, _ := g.wave("before the kill", all, 5); n != 5 {
		t.Fatalf("before the kill: %d of 5 granted", n)
	}
	var victim *proc
	var survivors []*proc
	for _, p := range all {
		if p.name == g.owner {
			victim = p
		} else {
			survivors = append(survivors, p)
		}
	}
	if victim == nil {
		t.Fatalf("owner %q is not one of the nodes", g.owner)
	}
	// The new owner's copies were sent as time left, within calls that
	// awaited them: each expires at most the longest call later.
	for _, l := range g.recs {
		l.slack = g.maxRTT
	}
	killed := g.owner
	took := killAndDrop(h, victim, survivors)
	t.Logf("SIGKILL of owner %s: the survivors' rings dropped it after %v", killed, took.Round(time.Millisecond))
	g.owner = ""
	if n, doubt := g.wave("after the kill", survivors, 2); n != 0 && !doubt {
		t.Fatalf("after the kill: %d of 2 granted, want both refused by the new owner", n)
	}
	if g.owner == killed {
		t.Fatalf("after the kill, the killed %s still decides", killed)
	}
	for i, l := range g.recs[:2] {
		g.release(survivors[i], l, fmt.Sprintf("release %d of the holders", i))
	}
	n, doubt := g.wave("after 2 releases", survivors, 3)
	if n != 2 && !doubt {
		t.Fatalf("after 2 releases: %d of 3 granted, want exactly 2", n)
	}
	for i, l := range g.recs[5:] {
		g.release(survivors[i%2], l, fmt.Sprintf("release %d of the new leases", i))
	}
	t.Logf("waited %v for the leases never released to expire (longest call %v)", g.waitExpired().Round(time.Millisecond), g.maxRTT.Round(time.Millisecond))
	n, doubt = g.wave("after the TTL", survivors, 8)
	if n < 5 || (!doubt && n != 5) {
		t.Fatalf("after the TTL of the unreleased leases: %d of 8 granted, want exactly 5", n)
	}
	t.Logf("%d answers decided while a lease may or may not have expired", g.doubt)
}
