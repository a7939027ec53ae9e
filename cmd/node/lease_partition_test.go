package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
)

// TestProcessLeasePartition: limit 5, TTL 3 s, on a key of node-1's and
// one of node-3's; 8 holders (4 a key) acquire through the nodes in turn,
// hold 50 ms and release (each fourth lease left to expire), before,
// during and after a cut of node-3 from the others (gossip, public and
// peer gRPC). From the log: never more than 5 slots of a key surely held
// at once, before, during or after the cut; node-3 never grants node-1's
// key; during the cut the majority grants both keys.
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
		key, owner, via, lease, end string
		from, to                    time.Time
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
				hold := leaseHold{key: key, owner: a.Owner, via: via.name, lease: a.Lease, end: "expired", from: r, to: s.Add(ttl)}
				if kind == "granted" && i%4 != 3 {
					time.Sleep(50 * time.Millisecond) // the work the slot covers
					hold.to = slices.MinFunc([]time.Time{hold.to, time.Now()}, time.Time.Compare)
					rel := all[(w+i+1)%3]
					hold.end = "released through " + rel.name
					if st, _, err := postJSON(h.client, "http://"+rel.http+"/v1/release", fmt.Sprintf(`{"lease":%q}`, a.Lease)); err != nil || st != http.StatusOK {
						kind = fmt.Sprintf("granted, release answered %d %v", st, err)
						hold.end = fmt.Sprintf("release through %s answered %d %v", rel.name, st, err)
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
		t.Logf("%s: at most %d slots surely held at once (first %v after the cut); %d granted during the cut",
			key, most, time.Duration(at), during[key])
		if most > limit {
			t.Errorf("%s: %d slots surely held at once, limit %d", key, most, limit)
			for _, l := range holds { // the leases held then, for the cause
				if l.key == key && l.from.Sub(cutAt) <= time.Duration(at) && l.to.Sub(cutAt) > time.Duration(at) {
					t.Logf("  %s: granted by %s through %s at %v, held to %v, %s", l.lease, l.owner, l.via,
						l.from.Sub(cutAt).Round(time.Millisecond), l.to.Sub(cutAt).Round(time.Millisecond), l.end)
				}
			}
		}
	}
	if during[keys[0]] == 0 || during[keys[1]] == 0 {
		t.Errorf("granted during the cut: %v, want some of each key", during)
	}
}
