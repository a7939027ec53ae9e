package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/clock"
)

const syncTestPolicy = `version: sync
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 2, per: 1h }
      enterprise: { limit: 50, per: 1h }
`

// syncMember is one member's policy: a Manager on its own file and audit
// log, with its OverrideSync; what it broadcasts is kept in sent.
type syncMember struct {
	t     *testing.T
	name  string
	m     *Manager
	s     *OverrideSync
	audit *lockedBuffer
	logs  *lockedBuffer

	mu   sync.Mutex
	sent [][]byte
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newSyncMember starts a member on syncTestPolicy, on the system clock.
func newSyncMember(t *testing.T, name string) *syncMember {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(syncTestPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &syncMember{t: t, name: name, audit: &lockedBuffer{}, logs: &lockedBuffer{}}
	m, err := NewManager(ManagerConfig{Path: path, AuditLog: p.audit, Clock: clock.System(), Logger: slog.New(slog.NewTextHandler(p.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	p.m = m
	p.s = NewOverrideSync(m, func(b []byte) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.sent = append(p.sent, bytes.Clone(b))
	})
	return p
}

func (p *syncMember) broadcasts() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sent)
}

// overrideLines is how many "override" lines the audit log has.
func (p *syncMember) overrideLines() int {
	n := 0
	for line := range strings.Lines(p.audit.String()) {
		var e struct{ Action string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			p.t.Fatalf("%s: bad audit line %q", p.name, line)
		}
		if e.Action == "override" {
			n++
		}
	}
	return n
}

// add is Add that must succeed and broadcast once.
func (p *syncMember) add(o Override) (Override, []byte) {
	p.t.Helper()
	before := len(p.broadcasts())
	got, err := p.s.Add(o)
	if err != nil {
		p.t.Fatalf("%s: Add(%+v): %v", p.name, o, err)
	}
	sent := p.broadcasts()
	if len(sent) != before+1 {
		p.t.Fatalf("%s: Add broadcast %d messages, want 1", p.name, len(sent)-before)
	}
	return got, sent[len(sent)-1]
}

// wantOverrides checks that p holds exactly want (same fields, any order).
func (p *syncMember) wantOverrides(what string, want ...Override) {
	p.t.Helper()
	got := p.m.Overrides()
	byID := func(a, b Override) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(got, byID)
	want = slices.Clone(want)
	slices.SortFunc(want, byID)
	if !slices.EqualFunc(got, want, sameOverride) {
		p.t.Errorf("%s: %s holds %s, want %s", what, p.name, describe(got), describe(want))
	}
}

func sameOverride(a, b Override) bool {
	return a.ID == b.ID && a.Actor == b.Actor && a.Reason == b.Reason && a.Policy == b.Policy && a.APIKey == b.APIKey &&
		a.User == b.User && a.Tier == b.Tier && (a.Limit == nil) == (b.Limit == nil) && (a.Limit == nil || *a.Limit == *b.Limit) &&
		a.Created.Equal(b.Created) && a.Expires.Equal(b.Expires)
}

func describe(os []Override) string {
	var b strings.Builder
	b.WriteString("[")
	for i, o := range os {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(o.ID + ":" + o.summary() + " for " + overrideKey(o.Policy, o.APIKey, o.User))
	}
	return b.String() + "]"
}

// scope is the scope of the first check for a user's request on p.
func (p *syncMember) scope(user string) string {
	p.t.Helper()
	checks, err := p.m.Resolve(Request{User: user})
	if err != nil || len(checks) == 0 {
		p.t.Fatalf("%s: Resolve(user %s) = %v, %v", p.name, user, checks, err)
	}
	return checks[0].Scope
}

func enterprise(user string, d time.Duration) Override {
	return Override{Actor: "oncall", Reason: "incident 12", User: user, Tier: "enterprise", Expires: time.Now().Add(d)}
}

// TestOverrideSyncRoundTrip: an override added on a is installed on b by
// the broadcast, with the same ID, times and fields, and applies there;
// hearing it again (twice more, then in a's state) installs nothing more.
// Receive never broadcasts.
func TestOverrideSyncRoundTrip(t *testing.T) {
	a, b := newSyncMember(t, "a"), newSyncMember(t, "b")
	o, msg := a.add(enterprise("42", time.Hour))
	if o.ID == "" || o.Created.IsZero() || o.Policy != "api" {
		t.Fatalf("Add returned %+v, want an ID, Created and the default policy", o)
	}
	a.wantOverrides("after Add", o)

	b.s.Receive(msg)
	b.wantOverrides("after the broadcast", o)
	if got := b.scope("42"); got != "override:tier:enterprise" {
		t.Errorf("b: user 42 resolves to %s, want override:tier:enterprise", got)
	}
	if got := b.scope("43"); got != "tier:free" {
		t.Errorf("b: user 43 resolves to %s, want tier:free", got)
	}

	// Duplicate deliveries.
	b.s.Receive(msg)
	b.s.Receive(bytes.Clone(msg))
	b.s.MergeState(a.s.LocalState())
	a.s.MergeState(b.s.LocalState()) // and a hears its own back
	a.wantOverrides("after its own override came back", o)
	b.wantOverrides("after three more copies", o)
	if n, m := a.overrideLines(), b.overrideLines(); n != 1 || m != 1 {
		t.Errorf("override audit lines: a %d, b %d, want 1 each", n, m)
	}
	if n := len(b.broadcasts()); n != 0 {
		t.Errorf("b broadcast %d messages, want none (only Add broadcasts)", n)
	}
	if n := len(a.broadcasts()); n != 1 {
		t.Errorf("a broadcast %d messages, want 1", n)
	}
}

// TestOverrideSyncMergeState: a member that joins late gets every override
// in force from one sync: by user with a tier, by user with a limit, by API
// key, in another policy's name... and nothing more; an empty state is nil.
func TestOverrideSyncMergeState(t *testing.T) {
	a, c := newSyncMember(t, "a"), newSyncMember(t, "c")
	if s := a.s.LocalState(); s != nil {
		t.Errorf("LocalState without overrides = %q, want nil", s)
	}
	o1, _ := a.add(enterprise("1", time.Hour))
	o2, _ := a.add(Override{Actor: "oncall", Reason: "batch job", User: "2", Limit: &LimitArg{Limit: 7, Per: "1m", Burst: 9},
		Expires: time.Now().Add(time.Hour)})
	o3, _ := a.add(Override{Actor: "alice", Reason: "partner", APIKey: "k-3", Tier: "free", Expires: time.Now().Add(time.Minute)})
	if o1.ID == o2.ID || o2.ID == o3.ID {
		t.Fatalf("IDs not distinct: %s %s %s", o1.ID, o2.ID, o3.ID)
	}
	c.s.MergeState(a.s.LocalState())
	c.wantOverrides("after one sync", o1, o2, o3)
	if n := c.overrideLines(); n != 3 {
		t.Errorf("c: %d override audit lines, want 3", n)
	}
	checks, err := c.m.Resolve(Request{User: "2"})
	if err != nil || len(checks) == 0 || checks[0].Scope != "override" || checks[0].Limit.Count() != 7 || checks[0].Limit.Per() != time.Minute || checks[0].Limit.Burst() != 9 {
		t.Errorf("c: user 2 resolves to %+v, %v, want the override's 7 per minute, bursts of 9", checks, err)
	}
	// Syncing again changes nothing.
	c.s.MergeState(a.s.LocalState())
	if n := c.overrideLines(); n != 3 {
		t.Errorf("c: %d override audit lines after a second sync, want 3", n)
	}
}

// TestOverrideSyncMalformed: bytes that are not a valid override (wrong
// kind, bad JSON, missing fields, invalid values) change nothing, not even
// the audit log, and each is logged. In a state, a bad override is skipped
// and the good ones beside it are installed.
func TestOverrideSyncMalformed(t *testing.T) {
	a, b := newSyncMember(t, "a"), newSyncMember(t, "b")
	good, msg := a.add(enterprise("42", time.Hour))
	var valid map[string]any
	if err := json.Unmarshal(msg[1:], &valid); err != nil {
		t.Fatal(err)
	}
	// variant is the good override's message with fields changed (nil
	// deletes), under another ID so that it is not a duplicate.
	variant := func(kind byte, changes map[string]any) []byte {
		v := map[string]any{}
		for k, x := range valid {
			v[k] = x
		}
		v["id"] = "ovr-variant"
		for k, x := range changes {
			if x == nil {
				delete(v, k)
			} else {
				v[k] = x
			}
		}
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return append([]byte{kind}, j...)
	}
	badMsgs := map[string][]byte{
		"nil":              nil,
		"empty":            {},
		"kind only":        {syncOverride},
		"unknown kind":     append([]byte{'x'}, msg[1:]...),
		"a state":          append([]byte{syncState}, msg[1:]...),
		"not JSON":         append([]byte{syncOverride}, "not json"...),
		"truncated":        msg[:len(msg)/2],
		"JSON array":       append([]byte{syncOverride}, "[1,2]"...),
		"empty object":     append([]byte{syncOverride}, "{}"...),
		"no id":            variant(syncOverride, map[string]any{"id": nil}),
		"no created":       variant(syncOverride, map[string]any{"created": nil}),
		"no policy":        variant(syncOverride, map[string]any{"policy": nil}),
		"no actor":         variant(syncOverride, map[string]any{"actor": nil}),
		"no reason":        variant(syncOverride, map[string]any{"reason": ""}),
		"no caller":        variant(syncOverride, map[string]any{"user": nil}),
		"two callers":      variant(syncOverride, map[string]any{"api_key": "k"}),
		"unknown policy":   variant(syncOverride, map[string]any{"policy": "nope"}),
		"unknown tier":     variant(syncOverride, map[string]any{"tier": "gold"}),
		"tier and limit":   variant(syncOverride, map[string]any{"limit": map[string]any{"limit": 5, "per": "1s"}}),
		"bad limit per":    variant(syncOverride, map[string]any{"tier": nil, "limit": map[string]any{"limit": 5, "per": "-1s"}}),
		"zero limit":       variant(syncOverride, map[string]any{"tier": nil, "limit": map[string]any{"limit": 0, "per": "1s"}}),
		"bad algorithm":    variant(syncOverride, map[string]any{"tier": nil, "limit": map[string]any{"algorithm": "faucet", "limit": 5, "per": "1s"}}),
		"expired":          variant(syncOverride, map[string]any{"expires": time.Now().Add(-time.Second)}),
		"created as text":  variant(syncOverride, map[string]any{"created": "yesterday"}),
		"numbers for text": variant(syncOverride, map[string]any{"user": 42}),
	}
	badStates := map[string][]byte{
		"nil":                  nil,
		"empty":                {},
		"an override":          msg,
		"not JSON":             append([]byte{syncState}, "{"...),
		"overrides not a list": append([]byte{syncState}, `{"overrides":5}`...),
		"list of numbers":      append([]byte{syncState}, `{"overrides":[1,2]}`...),
		"expired":              append([]byte{syncState}, `{"overrides":[`+string(variant(syncOverride, map[string]any{"expires": time.Now().Add(-time.Hour), "created": time.Now().Add(-2 * time.Hour)})[1:])+`]}`...),
	}
	warnings := func() int { return strings.Count(b.logs.String(), "level=WARN") }
	for name, m := range badMsgs {
		before := warnings()
		b.s.Receive(m)
		if got := b.m.Overrides(); len(got) != 0 {
			t.Fatalf("Receive(%s) installed %s", name, describe(got))
		}
		if warnings() == before {
			t.Errorf("Receive(%s): nothing logged", name)
		}
	}
	for name, s := range badStates {
		before := warnings()
		b.s.MergeState(s)
		if got := b.m.Overrides(); len(got) != 0 {
			t.Fatalf("MergeState(%s) installed %s", name, describe(got))
		}
		if warnings() == before {
			t.Errorf("MergeState(%s): nothing logged", name)
		}
	}
	// Random bytes, half of them behind the right kind byte.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		junk := make([]byte, rng.IntN(64))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		if i%2 == 0 && len(junk) > 0 {
			junk[0] = syncOverride
		}
		b.s.Receive(junk)
		junk = bytes.Clone(junk)
		if len(junk) > 0 {
			junk[0] = syncState
		}
		b.s.MergeState(junk)
	}
	if got := b.m.Overrides(); len(got) != 0 {
		t.Fatalf("random bytes installed %s", describe(got))
	}
	if n := b.overrideLines(); n != 0 {
		t.Errorf("b: %d override audit lines after bad input, want 0", n)
	}
	if n := len(b.broadcasts()); n != 0 {
		t.Errorf("b broadcast %d messages", n)
	}

	// One bad override among good ones: the good ones are installed.
	state := []byte(`{"overrides":[` + string(msg[1:]) + `,{"id":7},` + string(variant(syncOverride, map[string]any{"tier": "gold"})[1:]) + `]}`)
	b.s.MergeState(append([]byte{syncState}, state...))
	b.wantOverrides("after a state with one good override and two bad", good)
}

// TestOverrideSyncExpiredNotReinstalled: an override that expired, in the
// state of a member that still lists it (or in a late copy of its
// broadcast), is not installed again; a valid one beside it is.
//
// It runs in a synctest bubble: the expiry is on the wall clock, which the
// bubble's fake time moves past at once and exactly.
func TestOverrideSyncExpiredNotReinstalled(t *testing.T) {
	synctest.Test(t, testOverrideSyncExpiredNotReinstalled)
}

func testOverrideSyncExpiredNotReinstalled(t *testing.T) {
	a, b := newSyncMember(t, "a"), newSyncMember(t, "b")
	short, shortMsg := a.add(enterprise("1", 300*time.Millisecond))
	long, _ := a.add(enterprise("2", time.Hour))
	// a's state as it was while both were in force, taken before the short
	// one expired (what a lagging member would still send).
	stale := a.s.LocalState()
	b.s.MergeState(stale)
	b.wantOverrides("before the expiry", short, long)
	time.Sleep(time.Until(short.Expires) + time.Millisecond) // fake time: exactly past the expiry
	b.wantOverrides("after the expiry", long)                // Overrides() drops it
	c := newSyncMember(t, "c")
	for _, m := range []*syncMember{b, c} {
		m.s.MergeState(stale)
		m.s.Receive(shortMsg)
		m.wantOverrides("after the stale state and a late copy", long)
	}
	if n := c.overrideLines(); n != 1 {
		t.Errorf("c: %d override audit lines, want 1 (the one in force)", n)
	}
}

// TestOverrideSyncNewestWins: two members that took an override for the
// same caller converge on the newer one, whichever way they sync; an older
// version heard after the newer one expired is not installed either.
// It runs in a synctest bubble, so that "later" is an exact 2ms of fake
// time.
func TestOverrideSyncNewestWins(t *testing.T) {
	synctest.Test(t, testOverrideSyncNewestWins)
}

func testOverrideSyncNewestWins(t *testing.T) {
	a, b := newSyncMember(t, "a"), newSyncMember(t, "b")
	older, olderMsg := a.add(enterprise("42", time.Hour))
	time.Sleep(2 * time.Millisecond) // fake time: a later Created
	newerO, newerMsg := b.add(Override{Actor: "oncall", Reason: "back to free", User: "42", Tier: "free", Expires: time.Now().Add(time.Hour)})
	if !newerO.Created.After(older.Created) {
		t.Fatalf("Created %v not after %v", newerO.Created, older.Created)
	}
	b.s.Receive(olderMsg)
	b.wantOverrides("b heard the older one", newerO)
	a.s.MergeState(b.s.LocalState())
	a.wantOverrides("a synced with b", newerO)
	b.s.MergeState(append([]byte{syncState}, `{"overrides":[`+string(olderMsg[1:])+`]}`...))
	b.s.Receive(newerMsg)
	a.s.Receive(olderMsg)
	for _, m := range []*syncMember{a, b} {
		m.wantOverrides("after every copy", newerO)
		if got := m.scope("42"); got != "override:tier:free" {
			t.Errorf("%s: user 42 resolves to %s, want override:tier:free", m.name, got)
		}
	}
}

// TestOverrideSyncAddTooLong: an override too long to broadcast is refused
// with ErrRequest before anything is installed; the longest that fits is
// installed and broadcast.
func TestOverrideSyncAddTooLong(t *testing.T) {
	a := newSyncMember(t, "a")
	o := enterprise("42", time.Hour)
	o.Reason = strings.Repeat("r", MaxOverrideMessageLen)
	if _, err := a.s.Add(o); !errors.Is(err, ErrRequest) {
		t.Errorf("Add with a %d-byte reason: %v, want ErrRequest", len(o.Reason), err)
	}
	if got := a.m.Overrides(); len(got) != 0 || len(a.broadcasts()) != 0 || a.overrideLines() != 0 {
		t.Fatalf("refused override: %s installed, %d broadcasts", describe(got), len(a.broadcasts()))
	}
	// Shorten the reason until the override fits.
	for len(o.Reason) > 0 {
		o.Reason = o.Reason[:len(o.Reason)-1]
		if a.s.encodedLen(o) <= MaxOverrideMessageLen {
			break
		}
	}
	got, msg := a.add(o)
	if len(msg) > MaxOverrideMessageLen {
		t.Errorf("broadcast %d bytes, more than %d", len(msg), MaxOverrideMessageLen)
	}
	if bound := a.s.encodedLen(o); len(msg) > bound {
		t.Errorf("encodedLen said %d, the message is %d", bound, len(msg))
	}
	a.wantOverrides("the longest that fits", got)
}

// FuzzOverrideSync: no input panics Receive or MergeState, and whatever
// they install is a complete, unexpired override.
func FuzzOverrideSync(f *testing.F) {
	o := enterprise("42", time.Hour)
	o.ID, o.Policy, o.Created = "ovr-1-1", "api", time.Now()
	msg, err := encodeOverride(o)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg)
	f.Add(append([]byte{syncState}, `{"overrides":[`+string(msg[1:])+`]}`...))
	f.Add([]byte{syncOverride, '{', '}'})
	f.Add([]byte{syncState})
	f.Fuzz(func(t *testing.T, in []byte) {
		p := newSyncMember(t, "p")
		p.s.Receive(in)
		p.s.MergeState(in)
		for _, o := range p.m.Overrides() {
			if o.ID == "" || o.Policy == "" || o.Actor == "" || o.Reason == "" || o.Created.IsZero() || !o.Expires.After(time.Now()) {
				t.Errorf("installed %+v", o)
			}
		}
	})
}

// TestOverrideSyncRevoke: a revocation on a reaches b by broadcast and c by
// sync; none of them installs the override again when an old copy (the
// broadcast, or a state taken before the revocation) comes later, and a
// member that hears the revocation before the override never installs it.
func TestOverrideSyncRevoke(t *testing.T) {
	a, b, c, d := newSyncMember(t, "a"), newSyncMember(t, "b"), newSyncMember(t, "c"), newSyncMember(t, "d")
	o, msg := a.add(enterprise("42", time.Hour))
	keep, _ := a.add(enterprise("43", time.Hour))
	stale := a.s.LocalState()
	b.s.Receive(msg)
	c.s.MergeState(stale)
	b.wantOverrides("before the revocation", o)

	if _, err := a.s.Revoke(o.ID, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.s.Revoke(o.ID, "bob"); !errors.Is(err, ErrNoOverride) {
		t.Errorf("a second Revoke: %v, want ErrNoOverride", err)
	}
	sent := a.broadcasts()
	revokeMsg := sent[len(sent)-1]
	if len(sent) != 3 || revokeMsg[0] != syncRevoke {
		t.Fatalf("a broadcast %d messages, the last %q; want the two overrides and one revocation", len(sent), revokeMsg)
	}
	a.wantOverrides("after Revoke", keep)

	b.s.Receive(revokeMsg)
	b.wantOverrides("after the revocation's broadcast")
	c.s.MergeState(a.s.LocalState())
	c.wantOverrides("after a sync with a", keep)
	d.s.Receive(revokeMsg) // before it heard of the override
	for _, m := range []*syncMember{b, c, d} {
		m.s.Receive(msg)
		m.s.MergeState(stale)
		want := []Override{keep}
		if m == b {
			b.s.Receive(sent[1])
		}
		m.wantOverrides("after old copies of the revoked override", want...)
		if got := m.scope("42"); got != "tier:free" {
			t.Errorf("%s: user 42 resolves to %s after the revocation, want tier:free", m.name, got)
		}
	}
	for _, m := range []*syncMember{a, b, c} {
		if n := strings.Count(m.audit.String(), `"action":"override_revoked"`); n != 1 {
			t.Errorf("%s: %d override_revoked audit lines, want 1:\n%s", m.name, n, m.audit.String())
		}
		if !strings.Contains(m.audit.String(), `"actor":"bob","action":"override_revoked"`) {
			t.Errorf("%s: revocation not audited as bob's:\n%s", m.name, m.audit.String())
		}
	}
	// A newer override for the same caller is installed over the revocation.
	again, againMsg := a.add(enterprise("42", time.Hour))
	b.s.Receive(againMsg)
	b.wantOverrides("after a new override for the caller", keep, again)
}

// TestOverrideSyncRefusesBeyondCaps: an override from another member that
// would last beyond MaxOverrideTTL is refused and counted by reason.
func TestOverrideSyncRefusesBeyondCaps(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := newSyncMember(t, "b")
	if err := reg.Register(b.m.refused); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o := Override{ID: "ovr-1", Actor: "mallory", Reason: "forever", Policy: "api", User: "42", Tier: "enterprise",
		Created: now, Expires: now.Add(MaxOverrideTTL + time.Hour)}
	msg, err := encodeOverride(o)
	if err != nil {
		t.Fatal(err)
	}
	b.s.Receive(msg)
	b.wantOverrides("after an override beyond the cap")
	if got := metricValue(t, reg, "ringlimit_policy_overrides_refused_total", "reason", "too_long"); got != 1 {
		t.Errorf("refused too_long = %v, want 1", got)
	}
	if !strings.Contains(b.logs.String(), "too_long") {
		t.Errorf("refusal not logged with its reason:\n%s", b.logs.String())
	}
}
