package main

// Concurrency limits with the real binary: leases live by the owner's
// real clock; a SIGKILL of a key's owner neither frees nor duplicates the
// slots held; a cut-off node grants none. The tests log each lease's
// grant span (a call's send to its answer) and release, and check each
// answer against what the log allows when it was decided (on a loaded
// machine a lease may expire within a call): exact where nothing is in doubt.

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

// leaseLog is the history of one key's leases (one limit and TTL) as a
// test calling one at a time sees it, and the checks of its answers.
type leaseLog struct {
	h      *harness
	key    string
	limit  int64
	ttl    time.Duration
	owner  string // the node deciding the key; "" until an answer names it
	recs   []*leaseRec
	maxRTT time.Duration // the longest call so far
	doubt  int           // answers degraded, or decided while a lease may or may not have expired
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

// post posts body to path through via and decodes a 200 or 429 answer
// into out, every field known; it returns the status and the call's span.
func (g *leaseLog) post(via *proc, path, body string, out any) (int, time.Time, time.Time) {
	g.h.t.Helper()
	s := time.Now()
	status, b, err := postJSON(g.h.client, "http://"+via.http+path, body)
	r := time.Now()
	g.maxRTT = max(g.maxRTT, r.Sub(s))
	dec := json.NewDecoder(bytes.NewReader(b))
	if dec.DisallowUnknownFields(); err != nil || status != http.StatusOK && status != http.StatusTooManyRequests || dec.Decode(out) != nil {
		g.h.t.Fatalf("%s via %s: %d %s %v", path, via.name, status, b, err)
	}
	return status, s, r
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
	if len(sure) != len(maybe) || a.Degraded {
		g.doubt++
	}
	if a.Degraded { // the owner did not answer within the peer timeout (500 ms; 250 ms for a takeover's wait)
		deg := api.CheckResponse{Limit: g.limit, Remaining: g.limit, RetryAfterMs: 1000, Scope: "inline", Owner: via.name, Degraded: true, Code: api.CodeRateLimited}
		if r.Sub(s) < 250*time.Millisecond || status != http.StatusTooManyRequests || !reflect.DeepEqual(a, deg) {
			t.Fatalf("%s: %d %+v, want a refusal of fail_closed after at least 250ms: %+v", what, status, a, deg)
		}
		return false
	}
	if g.owner == "" {
		g.owner = a.Owner // the first answer names the owner; the others must agree
	}
	want := api.CheckResponse{Limit: g.limit, Scope: "inline", Owner: g.owner}
	var lo, hi int64 // the bounds of in_flight
	if status == http.StatusOK {
		// Granted: fewer than limit lived; in_flight counts the new lease.
		if len(sure) >= int(g.limit) {
			t.Fatalf("%s: granted %+v while %d leases surely lived (limit %d)", what, a, len(sure), g.limit)
		}
		lo, hi = int64(len(sure))+1, min(int64(len(maybe)), g.limit-1)+1
		if k, err := bucket.ParseLeaseID(a.Lease); err != nil || k != bucket.NamespaceConcurrency+g.key || slices.ContainsFunc(g.recs, func(l *leaseRec) bool { return l.id == a.Lease }) {
			t.Fatalf("%s: lease %q (key %q, %v): want a new lease of %s", what, a.Lease, k, err, g.key)
		}
		want.Allowed, want.Remaining, want.Lease, want.InFlight, want.ExpiresInMs = true, g.limit-a.InFlight, a.Lease, a.InFlight, g.ttl.Milliseconds()
		g.recs = append(g.recs, &leaseRec{id: a.Lease, lo: s, hi: r})
	} else {
		// Refused: limit lived, the earliest expiring retry_after_ms later.
		if len(maybe) < int(g.limit) {
			t.Fatalf("%s: refused %+v while at most %d leases lived (limit %d)", what, a, len(maybe), g.limit)
		}
		lo, hi = max(int64(len(sure)), g.limit), int64(len(maybe))
		if !slices.ContainsFunc(maybe, func(l *leaseRec) bool {
			return a.RetryAfterMs >= max(l.lo.Add(g.ttl).Sub(r).Milliseconds(), 1) &&
				a.RetryAfterMs <= l.hi.Add(g.ttl+l.slack).Sub(s).Milliseconds()+1
		}) {
			t.Fatalf("%s: refused with retry_after_ms %d: no live lease expires then", what, a.RetryAfterMs)
		}
		want.RetryAfterMs, want.InFlight, want.Code = a.RetryAfterMs, a.InFlight, api.CodeRateLimited
	}
	if a.InFlight < lo || a.InFlight > hi || !reflect.DeepEqual(a, want) {
		t.Fatalf("%s: %d %+v, want %+v with in_flight %d..%d", what, status, a, want, lo, hi)
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
	want := api.ReleaseResponse{Released: a.Released, InFlight: a.InFlight, Limit: g.limit, Owner: g.owner}
	if !a.Released && a.InFlight == 0 {
		want.Limit = 0 // nothing held: the owner knows no limit
	}
	if a != want || a.InFlight < int64(len(sure)) || a.InFlight > int64(len(maybe)) {
		t.Fatalf("%s: %+v, want %+v with in_flight %d..%d", what, a, want, len(sure), len(maybe))
	}
}

// waitExpired waits until every unreleased lease surely expired: how long.
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
// granted, and whether any answer was degraded or decided in doubt.
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

// TestProcessLeaseTTL: limit 5, TTL 2 s, 8 acquires through the three
// nodes in turn, never released: exactly 5 granted (more only as far as
// the log shows leases old enough to have expired); once every lease is
// 2 s old on the owner's clock, 5 of 8 granted again.
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
		if !doubt && n != 5 {
			t.Fatalf("wave %d: %d of 8 granted, want exactly 5", w, n)
		}
	}
}

// TestProcessLeasesSurviveKillOfOwner: limit 5, TTL 15 s, 5 slots held;
// the key's owner is killed with SIGKILL. Once the survivors' rings drop
// it, the new owner refuses a 6th through either survivor (it holds the 5
// leases); two released, exactly two more granted, then one refused; once
// the three never released are 15 s old, exactly 5 of 8 granted.
func TestProcessLeasesSurviveKillOfOwner(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	all := startThreeWith(t, h, bin, nil)
	g := &leaseLog{h: h, key: "proc-lease-kill", limit: 5, ttl: 15 * time.Second}
	for i := 0; len(g.recs) < 5; i++ { // a degraded answer holds no slot: try again
		if i == 20 {
			t.Fatalf("before the kill: %d of 20 granted", len(g.recs))
		}
		g.acquire(all[i%3], fmt.Sprintf("before the kill, acquire %d", i))
	}
	i := slices.IndexFunc(all, func(p *proc) bool { return p.name == g.owner })
	if i < 0 {
		t.Fatalf("owner %q is not one of the nodes", g.owner)
	}
	victim, survivors := all[i], slices.Delete(slices.Clone(all), i, i+1)
	// The new owner's copies were sent as time left, within calls that
	// awaited them: each expires at most the longest call later.
	for _, l := range g.recs {
		l.slack = g.maxRTT
	}
	killed, took := g.owner, killAndDrop(h, victim, survivors)
	t.Logf("SIGKILL of owner %s: the survivors' rings dropped it after %v", killed, took.Round(time.Millisecond))
	g.owner = "" // the next answer names the new owner
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
	if !doubt && n != 5 {
		t.Fatalf("after the TTL of the unreleased leases: %d of 8 granted, want exactly 5", n)
	}
	t.Logf("%d answers degraded or decided while a lease may or may not have expired", g.doubt)
}

// leaseKeyOf returns the first key lp:i whose acquire through via names
// owner (/v1/owner places a check's key, not a lease's), releasing each.
func leaseKeyOf(h *harness, via *proc, owner string) string {
	for i := range 100 {
		g := &leaseLog{h: h, key: fmt.Sprintf("lp:%d", i), limit: 5, ttl: time.Second}
		g.acquire(via, "finding a key of "+owner)
		g.release(via, g.recs[0], "its release")
		if g.owner == owner {
			return g.key
		}
	}
	h.t.Fatalf("no key of lp:0..99 decided by %s", owner)
	return ""
}
