package main

// Concurrency limits with the real binary: leases live by the owner's
// real clock; a SIGKILL of a key's owner neither frees nor duplicates the
// slots held; a cut-off node grants none. The tests log each lease's
// grant span (a call's send to its answer) and release, and check each
// answer against what the log allows when it was decided (on a loaded
// machine a lease may expire within a call): exact where nothing is in doubt.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
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

// TestProcessLeasePartition: limit 5, TTL 3 s, on a key of node-1's and
// one of node-3's; 8 holders (4 a key) acquire through the nodes in turn,
// hold 50 ms and release (each fourth lease left to expire), before,
// during and after a cut of node-3 from the others (gossip, public and
// peer gRPC). From the log: never more than 5 slots of a key surely held
// at once; node-3 never grants node-1's key; during the cut the majority
// grants both keys.
func TestProcessLeasePartition(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	f := newNetFault(t)
	all := startThree(t, h, bin, f)
	p1, p2, p3 := all[0], all[1], all[2]
	keys := []string{leaseKeyOf(h, p1, "node-1"), leaseKeyOf(h, p1, "node-3")}
	const limit, ttl = 5, 3 * time.Second
	// A lease's slot is surely held from the acquire's answer to the
	// earlier of the release's sending and the TTL from the acquire's.
	type leaseHold struct {
		key, owner string
		from, to   time.Time
	}
	var mu sync.Mutex
	var holds []leaseHold
	answers := map[string]int{}
	var done atomic.Bool
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := keys[w%2]
			for i := 0; !done.Load(); i++ {
				via, s := all[(w+i)%3], time.Now()
				status, b, err := postJSON(h.client, "http://"+via.http+"/v1/acquire",
					fmt.Sprintf(`{"key":%q,"limit":{"algorithm":"concurrency","limit":%d},"ttl":"3s"}`, key, limit))
				r := time.Now()
				var a api.CheckResponse
				if err == nil {
					err = json.Unmarshal(b, &a)
				}
				kind := map[bool]string{true: "granted", false: "refused"}[status == http.StatusOK]
				if err != nil || (status != http.StatusOK && status != http.StatusTooManyRequests) || a.Allowed != (status == http.StatusOK) {
					kind = fmt.Sprintf("failed: %d %v", status, err)
				} else if a.Degraded {
					kind = "degraded"
				}
				hold := leaseHold{key: key, owner: a.Owner, from: r, to: s.Add(ttl)}
				if kind == "granted" && i%4 != 3 {
					time.Sleep(50 * time.Millisecond) // the work the slot covers
					hold.to = slices.MinFunc([]time.Time{hold.to, time.Now()}, time.Time.Compare)
					if st, _, err := postJSON(h.client, "http://"+all[(w+i+1)%3].http+"/v1/release", fmt.Sprintf(`{"lease":%q}`, a.Lease)); err != nil || st != http.StatusOK {
						kind = fmt.Sprintf("granted, release answered %d %v", st, err)
					}
				}
				mu.Lock()
				answers[kind]++
				if a.Allowed && !a.Degraded {
					holds = append(holds, hold)
				}
				mu.Unlock()
				if kind != "granted" { // a holder waits its turn, at most 100 ms
					time.Sleep(min(time.Duration(a.RetryAfterMs)*time.Millisecond, 100*time.Millisecond))
				}
			}
		}()
	}
	phase := func(name string, d time.Duration) time.Time {
		time.Sleep(d) // the load runs meanwhile
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%s: %d leases granted so far; answers %v", name, len(holds), answers)
		return time.Now()
	}
	cutAt := phase("before the cut", 3*time.Second)
	f.cut(t, p3, p1, p2)
	for _, o := range []*proc{p1, p2} { // the peer ports too
		f.drop(t, p3, &proc{name: o.name, grpc: o.peer, gossip: o.gossip})
		f.drop(t, o, &proc{name: p3.name, grpc: p3.peer, gossip: p3.gossip})
	}
	if ok, err := f.connects(p3.name, p1.peer); ok || err != nil {
		t.Fatalf("node-3 connects to node-1's peer port through the cut: %v, %v", ok, err)
	}
	t.Logf("the majority dropped node-3 after %v", h.waitMembers([]*proc{p1, p2}, names3[:2], 15*time.Second).Round(time.Millisecond))
	healAt := phase("during the cut", 5*time.Second)
	f.heal(t)
	t.Logf("one cluster again after %v", h.waitMembers(all, names3, 15*time.Second).Round(time.Millisecond))
	phase("after the heal", 3*time.Second)
	done.Store(true)
	wg.Wait()

	during := map[string]int{}
	for k, key := range keys {
		var edges [][2]int64 // an offset from the cut, and +1 or -1 slot held
		for _, l := range holds {
			if l.key != key {
				continue
			} else if l.from.Before(l.to) {
				edges = append(edges, [2]int64{int64(l.from.Sub(cutAt)), 1}, [2]int64{int64(l.to.Sub(cutAt)), -1})
			}
			if l.from.After(cutAt) && l.from.Before(healAt) {
				during[key]++
			}
			if k == 0 && l.owner == "node-3" {
				t.Errorf("node-3 granted %s (node-1's) at %v", key, l.from)
			}
		}
		slices.SortFunc(edges, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
		held, most, at := int64(0), int64(0), int64(0)
		for _, e := range edges {
			if held += e[1]; held > most {
				most, at = held, e[0]
			}
		}
		t.Logf("%s: at most %d slots surely held at once (first %v after the cut); %d granted during the cut", key, most, time.Duration(at), during[key])
		if most > limit {
			t.Errorf("%s: %d slots surely held at once, limit %d", key, most, limit)
		}
	}
	if during[keys[0]] == 0 || during[keys[1]] == 0 {
		t.Errorf("granted during the cut: %v, want some of each key", during)
	}
}
