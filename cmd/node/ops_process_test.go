package main

// Reset, reserve and settle with the real binary: the owner of
// a key is killed with SIGKILL, or every node is restarted in turn with
// SIGTERM, and what a reset or a settle did must survive it: a reset key
// stays reset on the node that takes it over, and a reservation settles
// exactly once on the owner's successor.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
)

// adminTokens writes an admin token file holding testAdminToken named
// "oncall" and returns the flags that give it to a node.
func adminTokens(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(path, []byte("oncall:"+testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--admin-token-file", path}
}

// startThreeWith is startThree with extra flags on every node.
func startThreeWith(t *testing.T, h *harness, bin string, extra []string) []*proc {
	t.Helper()
	p1 := startFaultProc(t, bin, nil, procSpec{name: "node-1", extra: extra})
	p2 := startFaultProc(t, bin, nil, procSpec{name: "node-2", join: []string{p1.gossip}, extra: extra})
	p3 := startFaultProc(t, bin, nil, procSpec{name: "node-3", join: []string{p1.gossip}, extra: extra})
	all := []*proc{p1, p2, p3}
	h.waitMembers(all, names3, 15*time.Second)
	return all
}

// resetKey posts POST /v1/reset of key under l through via with the admin
// token. It returns the status, the decoded answer of a 200 and the body.
func resetKey(h *harness, via *proc, key string, l inlineLimit) (int, api.ResetResponse, []byte, error) {
	body := fmt.Sprintf(`{"key":%q,"limit":{"limit":%d,"per":%q}}`, key, l.count, l.per)
	status, b, err := postJSON(h.client, "http://"+via.http+"/v1/reset", body)
	var res api.ResetResponse
	if err == nil && status == http.StatusOK {
		err = json.Unmarshal(b, &res)
	}
	return status, res, b, err
}

// spendOut spends all of l on every key through procs round robin, the
// last check of each key (through procs[0]) asking for replication: sync,
// so that the key's successor holds all of it; it fails the test unless
// every check is admitted by the key's owner, not degraded.
func spendOut(h *harness, procs []*proc, keys []string, l inlineLimit) {
	h.t.Helper()
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.http)
	}
	var jobs []job
	for _, k := range keys {
		for i := range int(l.count) - 1 {
			jobs = append(jobs, job{key: k, node: i % len(procs)})
		}
	}
	for _, r := range runJobs(h.client, addrs, jobs, l, 16, time.Now().Add(30*time.Second)) {
		if r.err != nil || r.status != http.StatusOK || r.body.Degraded {
			h.t.Fatalf("spending %s via %s: %d %+v %v, want 200 not degraded", r.key, procs[r.node].name, r.status, r.body, r.err)
		}
	}
	sync := l
	sync.sync = true
	for _, k := range keys {
		a, err := doCheck(h.client, procs[0].http, k, sync, 10*time.Second)
		if err != nil || a.status != http.StatusOK || a.body.Degraded || a.body.Remaining != 0 {
			h.t.Fatalf("last spend of %s via %s: %d %+v %v, want 200 not degraded, remaining 0", k, procs[0].name, a.status, a.body, err)
		}
	}
	if u := h.sumCounter(addrs, "ringlimit_replication_unconfirmed_total"); u != 0 {
		h.t.Fatalf("%v sync spends answered without their successor's acknowledgement, want 0", u)
	}
}

// admits sends n checks of key under l through procs round robin, one at
// a time, and returns how many were admitted; every answer must come from
// one owner, not degraded, and the admitted ones first: admitted i has
// l.count-1-i remaining, a refusal 0.
func admits(h *harness, procs []*proc, key string, l inlineLimit, n int) (int, string) {
	h.t.Helper()
	admitted, owner := 0, ""
	for i := range n {
		p := procs[i%len(procs)]
		a, err := doCheck(h.client, p.http, key, l, 10*time.Second)
		if err != nil || (a.status != http.StatusOK && a.status != http.StatusTooManyRequests) || a.body.Degraded {
			h.t.Fatalf("check %d of %s via %s: %d %+v %v, want 200 or 429 not degraded", i, key, p.name, a.status, a.body, err)
		}
		if owner == "" {
			owner = a.body.Owner
		} else if a.body.Owner != owner {
			h.t.Fatalf("check %d of %s via %s decided by %s, earlier ones by %s", i, key, p.name, a.body.Owner, owner)
		}
		if a.status == http.StatusOK {
			if admitted != i || a.body.Remaining != l.count-1-int64(i) {
				h.t.Fatalf("check %d of %s via %s: admitted with remaining %d after %d admitted, want remaining %d and no refusal before",
					i, key, p.name, a.body.Remaining, admitted, l.count-1-int64(i))
			}
			admitted++
		} else if a.body.Remaining != 0 {
			h.t.Fatalf("check %d of %s via %s: refused with remaining %d", i, key, p.name, a.body.Remaining)
		}
	}
	return admitted, owner
}

// killAndDrop kills p with SIGKILL, waits for it to exit and for the
// survivors to agree on a ring without it, and returns how long the ring
// took.
func killAndDrop(h *harness, p *proc, survivors []*proc) time.Duration {
	h.t.Helper()
	if err := p.kill(); err != nil {
		h.t.Fatal(err)
	}
	var names []string
	for _, s := range survivors {
		names = append(names, s.name)
	}
	return h.waitMembers(survivors, names, 15*time.Second)
}

// TestProcessResetThenKillOwner: a key owned by node-2, limit 10 an hour,
// is spent to 0 (its successor's replica too), then reset through node-1;
// node-2 is killed with SIGKILL. Once the survivors' rings have dropped
// it, the new owner answers from its replica, which the reset emptied:
// exactly 10 admitted through node-1 and node-3, then refused.
func TestProcessResetThenKillOwner(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	all := startThreeWith(t, h, bin, adminTokens(t))
	p1, p2, p3 := all[0], all[1], all[2]
	l := inlineLimit{count: 10, per: "1h"} // a token back every 6 min: none during the test
	key := ownedBy(h, p1, "node-2", "reset-kill", 1)[0]
	spendOut(h, all, []string{key}, l)

	status, res, body, err := resetKey(h, p1, key, l)
	if err != nil || status != http.StatusOK || !res.Reset || res.PreviousRemaining != 0 || res.Owner != "node-2" || len(res.Unconfirmed) != 0 {
		t.Fatalf("reset through node-1: %d %s %v; want 200 from node-2 with previous_remaining 0 and every member confirmed", status, body, err)
	}
	if n := h.metric(p1.http, "ringlimit_resets_total", `{result="reset"}`); n != 1 {
		t.Fatalf("node-1: ringlimit_resets_total{result=\"reset\"} = %v, want 1", n)
	}

	survivors := []*proc{p1, p3}
	took := killAndDrop(h, p2, survivors)
	admitted, owner := admits(h, survivors, key, l, 15)
	t.Logf("reset, then SIGKILL of owner node-2: the survivors' rings dropped it after %v; the new owner %s admitted %d of 15 checks through node-1 and node-3",
		took.Round(time.Millisecond), owner, admitted)
	if owner != "node-1" && owner != "node-3" {
		t.Fatalf("decided by %q, want a survivor", owner)
	}
	if admitted != 10 {
		t.Fatalf("%d of 15 admitted after the reset and the kill, want exactly 10 (the reset held on the replica)", admitted)
	}
	for _, p := range survivors {
		var o api.OwnerResponse
		if err := getJSON(h.client, "http://"+p.http+"/v1/owner?key="+key, &o); err != nil {
			t.Fatal(err)
		}
		if o.Owner != owner {
			t.Errorf("%s: /v1/owner says %s, the answers came from %s", p.name, o.Owner, owner)
		}
	}
}

// TestProcessResetDuringRollingRestart: three nodes, 12 keys (4 owned by
// each) spent to 0 with the limit 20 a day. Each node in turn is stopped
// with SIGTERM (it leaves the ring, then hands its keys off) and started
// again under its name and addresses. Of the 4 keys of the node, one is
// reset through another node as soon as the signal is sent (while it
// drains and leaves), one as soon as the other nodes' rings have dropped
// it (by its successor, while its handoff is on its way or just done),
// one once the node has started again and before the cluster agrees
// (while it rejoins); the fourth is never reset. At the end each of the 9
// reset keys admits exactly 20 through the three nodes and then refuses;
// each of the 3 others admits nothing.
func TestProcessResetDuringRollingRestart(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	tokens := adminTokens(t)
	procs := startThreeWith(t, h, bin, tokens)
	l := inlineLimit{count: 20, per: "24h"} // a token back every 72 min: none during the test
	leaving := map[string]string{}          // node -> its key reset once it was signalled
	left := map[string]string{}             // node -> its key reset once it is off the ring
	rejoining := map[string]string{}        // node -> its key reset while it rejoins
	kept := map[string]string{}             // node -> its key never reset
	var keys []string
	for _, n := range names3 {
		ks := ownedBy(h, procs[0], n, "roll-reset-"+n, 4)
		leaving[n], left[n], rejoining[n], kept[n] = ks[0], ks[1], ks[2], ks[3]
		keys = append(keys, ks...)
	}
	spendOut(h, procs, keys, l)

	// reset resets key through via until it answers 200 (a reset that
	// finds its owner unreachable changes nothing and answers 503).
	reset := func(via *proc, key, when string) api.ResetResponse {
		var res api.ResetResponse
		var last string
		testkit.WaitFor(t, 15*time.Second, "reset of "+key+" "+when, func() error {
			status, r, body, err := resetKey(h, via, key, l)
			if err != nil || status != http.StatusOK {
				last = fmt.Sprintf("%d %s %v", status, body, err)
				if status != 0 && status != http.StatusServiceUnavailable {
					t.Fatalf("reset of %s through %s %s: %s, want 200 or 503", key, via.name, when, last)
				}
				return errors.New(last)
			}
			res = r
			return nil
		})
		return res
	}
	// refused counts, per process, the states from before a reset it
	// refused (ringlimit_states_before_reset_total, read whenever a phase
	// ends; a restarted process starts again from 0).
	refused := map[*proc]float64{}
	var refusedBy []string
	tally := func(phase string, ps ...*proc) {
		for _, p := range ps {
			if n := h.metric(p.http, "ringlimit_states_before_reset_total", ""); n > refused[p] {
				refusedBy = append(refusedBy, fmt.Sprintf("%v by %s %s", n-refused[p], p.name, phase))
				refused[p] = n
			}
		}
	}
	var log []string
	for i, old := range procs {
		others := slices.Delete(slices.Clone(procs), i, i+1)
		tally("before "+old.name+" restarts", procs...)
		if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		res := reset(others[0], leaving[old.name], "while "+old.name+" leaves")
		log = append(log, fmt.Sprintf("%s leaving: %s reset by %s (previous %d, unconfirmed %v)", old.name, leaving[old.name], res.Owner, res.PreviousRemaining, res.Unconfirmed))
		if res.PreviousRemaining != 0 {
			t.Errorf("reset of %s while %s leaves: previous_remaining %d, want 0 (it was spent)", leaving[old.name], old.name, res.PreviousRemaining)
		}
		// As soon as the other nodes' rings have dropped the leaving node,
		// the key's successor owns it and resets it, telling the members
		// on its ring (no longer the leaving node, whose copy still holds
		// the 20 spent until its handoff).
		testkit.WaitFor(t, 15*time.Second, "the rings of the others to drop "+old.name, func() error {
			for _, p := range others {
				on, _, err := h.onRing(p)
				if err != nil {
					return err
				}
				if on[old.name] != "" {
					return fmt.Errorf("%s still on %s's ring: %v", old.name, p.name, on)
				}
			}
			return nil
		})
		exited := "running"
		select {
		case <-old.exited:
			exited = "exited"
		default:
		}
		res = reset(others[1], left[old.name], "once "+old.name+" is off the ring")
		log = append(log, fmt.Sprintf("%s off the ring (%s): %s reset by %s (previous %d, unconfirmed %v)", old.name, exited, left[old.name], res.Owner, res.PreviousRemaining, res.Unconfirmed))
		if res.PreviousRemaining != 0 || res.Owner == old.name {
			t.Errorf("reset of %s once %s is off the ring: previous_remaining %d by %s, want 0 (it was spent) by another node", left[old.name], old.name, res.PreviousRemaining, res.Owner)
		}
		select {
		case <-old.exited:
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not exit within 15s of SIGTERM", old.name)
		}
		if old.err != nil {
			t.Errorf("%s after SIGTERM: %v, want exit status 0", old.name, old.err)
		}
		tally("while "+old.name+" left", others...)
		spec := restartSpec(old, others[0].gossip)
		spec.extra = tokens
		procs[i] = startFaultProc(t, bin, nil, spec)
		res = reset(others[1], rejoining[old.name], "while "+old.name+" rejoins")
		log = append(log, fmt.Sprintf("%s rejoining: %s reset by %s (previous %d, unconfirmed %v)", old.name, rejoining[old.name], res.Owner, res.PreviousRemaining, res.Unconfirmed))
		if res.PreviousRemaining != 0 {
			t.Errorf("reset of %s while %s rejoins: previous_remaining %d, want 0 (it was spent)", rejoining[old.name], old.name, res.PreviousRemaining)
		}
		h.waitMembers(procs, names3, 15*time.Second)
		tally("while "+old.name+" rejoined", procs...)
	}
	t.Logf("rolling restart with resets: %s; states from before a reset refused: %v",
		strings.Join(log, "; "), refusedBy)
	// The leaving node was not told of the reset made once it was off the
	// ring; its handoff, which follows its leave at once, usually reaches
	// the successor after that reset, and is refused there. How many of
	// the three leaves race it so depends on timing, so it is logged, not
	// asserted: the end state below fails if any handoff brought its spend
	// back, and the in-process TestResetNotUndoneByHandoff makes that race
	// happen every time.
	var total float64
	for _, n := range refused {
		total += n
	}
	t.Logf("states from before a reset refused during the three restarts: %v", total)

	for _, n := range names3 {
		for _, k := range []string{leaving[n], left[n], rejoining[n]} {
			if got, owner := admits(h, procs, k, l, 25); got != 20 {
				t.Errorf("%s (owned by %s at first, by %s now), reset during the restarts: %d of 25 admitted, want exactly 20", k, n, owner, got)
			}
		}
		if got, owner := admits(h, procs, kept[n], l, 6); got != 0 {
			t.Errorf("%s (owned by %s at first, by %s now), never reset: %d of 6 admitted, want 0 (it was spent)", kept[n], n, owner, got)
		}
	}
}

// TestProcessSettleAfterOwnerKill: a reservation of 100 of a 1,000 token
// budget owned by node-2, made through node-1 with replication: sync (the
// successor holds the spend and the record when it is answered); node-2
// is killed with SIGKILL. The successor settles 30 through node-3: 970
// remain; the same settle through node-1 is ALREADY_SETTLED; a check then
// leaves 969.
func TestProcessSettleAfterOwnerKill(t *testing.T) {
	bin := buildNode(t)
	h := newHarness(t)
	all := startThree(t, h, bin, nil)
	p1, p2, p3 := all[0], all[1], all[2]
	// 1,000 a day: a token back every 86.4 s, none during the test (with
	// 1,000 an hour one would come back every 3.6 s, and the SIGKILL's
	// detection can take that long).
	l := inlineLimit{count: 1000, per: "24h"}
	key := ownedBy(h, p1, "node-2", "settle-kill", 1)[0]

	body := fmt.Sprintf(`{"key":%q,"cost":100,"limit":{"limit":1000,"per":"24h","replication":"sync"},"reserve":true,"reserve_ttl":"10m"}`, key)
	status, b, err := send(h.client, http.MethodPost, "http://"+p1.http+"/v1/check", body, "")
	var r api.CheckResponse
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil || status != http.StatusOK || !r.Allowed || r.Remaining != 900 || r.Owner != "node-2" || r.Reservation == "" || r.Degraded {
		t.Fatalf("reserve 100 through node-1: %d %s %v; want 200 from node-2 with remaining 900 and a reservation", status, b, err)
	}
	if n := h.metric(p2.http, "ringlimit_replication_unconfirmed_total", ""); n != 0 {
		t.Fatalf("node-2 answered %v sync checks unacknowledged, want 0", n)
	}

	survivors := []*proc{p1, p3}
	took := killAndDrop(h, p2, survivors)

	settle := fmt.Sprintf(`{"reservation":%q,"cost":30}`, r.Reservation)
	status, b, err = send(h.client, http.MethodPost, "http://"+p3.http+"/v1/settle", settle, "")
	var s api.SettleResponse
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil || status != http.StatusOK || !s.Settled || s.Cost != 30 || s.Remaining != 970 || s.Limit != 1000 || (s.Owner != "node-1" && s.Owner != "node-3") {
		t.Fatalf("settle 30 through node-3 after node-2's SIGKILL: %d %s %v; want 200 from a survivor with remaining 970", status, b, err)
	}
	status, b, err = send(h.client, http.MethodPost, "http://"+p1.http+"/v1/settle", settle, "")
	var e api.ErrorResponse
	if err == nil {
		err = json.Unmarshal(b, &e)
	}
	if err != nil || status != http.StatusConflict || e.Code != api.CodeAlreadySettled {
		t.Fatalf("the same settle through node-1: %d %s %v; want 409 %s", status, b, err, api.CodeAlreadySettled)
	}
	a, err := doCheck(h.client, p1.http, key, l, 10*time.Second)
	if err != nil || a.status != http.StatusOK || a.body.Degraded || a.body.Owner != s.Owner || a.body.Remaining != 969 {
		t.Fatalf("check of 1 through node-1 after the settle: %d %+v %v; want 200 from %s with remaining 969", a.status, a.body, err, s.Owner)
	}
	for _, m := range []struct {
		p      *proc
		result string
	}{{p3, "ok"}, {p1, "already_settled"}} {
		if n := h.metric(m.p.http, "ringlimit_settles_total", fmt.Sprintf(`{result=%q}`, m.result)); n != 1 {
			t.Errorf("%s: ringlimit_settles_total{result=%q} = %v, want 1", m.p.name, m.result, n)
		}
	}
	t.Logf("reserve 100 through node-1, SIGKILL of owner node-2 (rings dropped it after %v): settle 30 through node-3 applied by %s (remaining 970), the same through node-1 409 %s, a check then remaining 969",
		took.Round(time.Millisecond), s.Owner, api.CodeAlreadySettled)
}
