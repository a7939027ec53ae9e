package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// MaxOverrideMessageLen is the longest message OverrideSync broadcasts, in
// bytes: one override, encoded. It is cluster.MaxBroadcastLen (what one
// gossip packet carries; cmd/node's tests check that the two agree). Add
// refuses an override that would not fit.
const MaxOverrideMessageLen = 1024

// The messages OverrideSync sends, each a kind byte then JSON:
//
//	syncOverride  one Override (as POST /v1/overrides answers it): a broadcast
//	syncRevoke    one revocation: a broadcast
//	syncState     {"overrides": [Override, ...], "revoked": [revocation, ...]}:
//	              the overrides in force and the revocations of overrides
//	              that would still be, for a push/pull sync
//
// A member ignores (and logs) a message of a kind it does not know, so a
// new kind needs a new byte, not a new meaning for an old one. syncRevoke
// and the "revoked" field were added after the others: a member that
// predates them logs and ignores the first and skips the second (JSON
// decoding ignores fields it does not know), so it keeps a revoked
// override until it expires; the members that know revocations do not
// take it back from it.
const (
	syncOverride byte = 'o'
	syncRevoke   byte = 'r'
	syncState    byte = 's'
)

// syncStateBody is the JSON of a syncState message.
type syncStateBody struct {
	Overrides []json.RawMessage `json:"overrides"`
	Revoked   []revocation      `json:"revoked,omitempty"`
}

// revocation says that an override was revoked before its expiry: its ID,
// its caller and its times (so that a member that has not heard of it yet
// does not install it later), and who revoked it.
type revocation struct {
	ID      string    `json:"id"`
	Actor   string    `json:"actor"`
	Policy  string    `json:"policy"`
	APIKey  string    `json:"api_key,omitempty"`
	User    string    `json:"user,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
}

func (r *revocation) key() string { return overrideKey(r.Policy, r.APIKey, r.User) }

// OverrideSync replicates a Manager's incident overrides to every member of
// a cluster. It is what cluster.Config.Messages wants (Receive, LocalState,
// MergeState), without this package importing cluster: Add installs an
// override here and broadcasts it; Receive installs the ones other members
// broadcast; LocalState and MergeState exchange every override in force
// when two members sync, which is how a member that joins late, or missed a
// broadcast, catches up.
//
// The rules, the same on every member:
//
//   - An override keeps the ID and Created it got on the member that took
//     it, so a member that hears it twice installs it once.
//   - For one caller (policy and API key or user), the newest override wins:
//     the latest Created, then the greater ID. An older one heard later (a
//     late copy, or a member that missed the newer one) is not installed, so
//     two members that hold different versions converge on the newer one.
//   - An override is validated again on each member (Manager.AddOverride):
//     an expired one, one naming a tier this member's policy lacks, one
//     beyond the caps (MaxOverrideTTL, MaxOverrides), or bytes that do not
//     decode change nothing, are logged and counted in
//     ringlimit_policy_overrides_refused_total.
//   - A revocation (Revoke) removes the override it names, and any older
//     one for the same caller, and is remembered until that override would
//     have expired: the override, heard again later from a member that
//     missed the revocation, is not installed again.
//
// Concurrency: safe for concurrent use; installs are serialised. Receive,
// LocalState and MergeState never call broadcast, so they may run before the
// cluster that broadcast sends to exists.
type OverrideSync struct {
	m         *Manager
	broadcast func([]byte)
	log       *slog.Logger

	mu sync.Mutex // serialises installs; guards latest and horizon
	// latest is, per caller (overrideKey), the newest override installed
	// here, kept after it expires or is replaced so that an older version
	// heard later is not installed again.
	latest map[string]stamp
	// horizon is the latest Created installed here: a clock-free lower
	// bound of the time, to forget entries of latest whose every version
	// has expired.
	horizon time.Time
}

// stamp is what OverrideSync remembers of a caller's newest override.
type stamp struct {
	id      string
	created time.Time
	until   time.Time   // the latest Expires of any version heard
	revoked *revocation // not nil when the newest override was revoked
}

// NewOverrideSync returns an OverrideSync for m that sends its broadcasts
// with broadcast (cluster.Cluster.Broadcast), which it calls only from Add.
// It logs with the Manager's logger.
func NewOverrideSync(m *Manager, broadcast func([]byte)) *OverrideSync {
	return &OverrideSync{m: m, broadcast: broadcast, log: m.log, latest: map[string]stamp{}}
}

// Add installs o here (Manager.AddOverride: validated, given its ID and
// Created, audited), then broadcasts it to every member. It returns the
// installed override. An override whose message would be longer than
// MaxOverrideMessageLen (a long reason, say) is refused with ErrRequest
// before anything is installed.
func (s *OverrideSync) Add(o Override) (Override, error) {
	if n := s.encodedLen(o); n > MaxOverrideMessageLen {
		return o, fmt.Errorf("%w: the override takes %d bytes to send to the other members, at most %d fit: shorten reason, actor or the caller's name",
			ErrRequest, n, MaxOverrideMessageLen)
	}
	s.mu.Lock()
	installed, err := s.m.AddOverride(o)
	if err == nil {
		s.rememberLocked(installed)
	}
	s.mu.Unlock()
	if err != nil {
		return installed, err
	}
	msg, err := encodeOverride(installed)
	if err != nil { // cannot happen: an Override always encodes
		return installed, fmt.Errorf("policy: override %s installed here, not sent to the other members: %w", installed.ID, err)
	}
	if len(msg) > MaxOverrideMessageLen { // encodedLen bounds it; defensive
		return installed, fmt.Errorf("policy: override %s installed here, not sent to the other members: %d bytes, at most %d",
			installed.ID, len(msg), MaxOverrideMessageLen)
	}
	s.broadcast(msg)
	return installed, nil
}

// encodedLen bounds the length of o's message once installed: the fields
// Manager.AddOverride fills are given their longest values.
func (s *OverrideSync) encodedLen(o Override) int {
	if o.ID == "" {
		o.ID = strings.Repeat("x", maxIDLen)
	}
	if o.Created.IsZero() {
		o.Created = longestTime
	}
	if o.Policy == "" {
		o.Policy = s.m.Current().Default
	}
	msg, err := encodeOverride(o)
	if err != nil {
		return 0 // Add reports it
	}
	return len(msg)
}

// maxIDLen bounds the IDs Manager.AddOverride gives: "ovr-", milliseconds
// since 1970 and a counter, both decimal.
const maxIDLen = len("ovr-") + 20 + len("-") + 20

// longestTime is a time whose JSON is as long as any: nanoseconds and a
// zone offset.
var longestTime = time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(9*3600+30*60)))

func encodeOverride(o Override) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return append([]byte{syncOverride}, b...), nil
}

// Receive installs an override another member broadcast (see the rules on
// OverrideSync). msg is not kept.
func (s *OverrideSync) Receive(msg []byte) {
	if len(msg) > 0 && msg[0] == syncRevoke {
		var r revocation
		if err := json.Unmarshal(msg[1:], &r); err != nil {
			s.log.Warn("policy: ignoring a revocation that does not decode", "bytes", len(msg), "err", err)
			return
		}
		s.revoke(r, "broadcast")
		return
	}
	if len(msg) == 0 || msg[0] != syncOverride {
		s.log.Warn("policy: ignoring a cluster message that is not an override", "bytes", len(msg))
		return
	}
	var o Override
	if err := json.Unmarshal(msg[1:], &o); err != nil {
		s.log.Warn("policy: ignoring an override that does not decode", "bytes", len(msg), "err", err)
		return
	}
	s.install(o, "broadcast")
}

// LocalState returns every override in force here, and the revocations of
// overrides that would still be, for a member this one syncs with.
func (s *OverrideSync) LocalState() []byte {
	var body syncStateBody
	for _, o := range s.m.Overrides() {
		b, err := json.Marshal(o)
		if err != nil { // cannot happen
			continue
		}
		body.Overrides = append(body.Overrides, b)
	}
	now := s.m.wallNow()
	s.mu.Lock()
	for _, st := range s.latest {
		if st.revoked != nil && st.revoked.Expires.After(now) {
			body.Revoked = append(body.Revoked, *st.revoked)
		}
	}
	s.mu.Unlock()
	if len(body.Overrides) == 0 && len(body.Revoked) == 0 {
		return nil
	}
	b, err := json.Marshal(body)
	if err != nil { // cannot happen
		return nil
	}
	return append([]byte{syncState}, b...)
}

// MergeState applies the revocations, then installs the overrides, of
// another member's LocalState (see the rules on OverrideSync). An override in it that does not decode is
// skipped; the others are still installed. state is not kept.
func (s *OverrideSync) MergeState(state []byte) {
	if len(state) == 0 || state[0] != syncState {
		s.log.Warn("policy: ignoring a cluster state that is not overrides", "bytes", len(state))
		return
	}
	var body syncStateBody
	if err := json.Unmarshal(state[1:], &body); err != nil {
		s.log.Warn("policy: ignoring overrides that do not decode", "bytes", len(state), "err", err)
		return
	}
	for _, r := range body.Revoked {
		s.revoke(r, "sync")
	}
	for i, raw := range body.Overrides {
		var o Override
		if err := json.Unmarshal(raw, &o); err != nil {
			s.log.Warn("policy: ignoring an override that does not decode", "index", i, "err", err)
			continue
		}
		s.install(o, "sync")
	}
}

// install applies the rules on OverrideSync to o, heard from another member
// by way (broadcast or sync).
func (s *OverrideSync) install(o Override, way string) {
	if o.ID == "" || o.Created.IsZero() || o.Policy == "" {
		s.log.Warn("policy: ignoring an override without id, created or policy", "via", way, "id", o.ID)
		return
	}
	k := overrideKey(o.Policy, o.APIKey, o.User)
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.latest[k]; ok && !newer(o, st) {
		if o.Expires.After(st.until) {
			st.until = o.Expires
			s.latest[k] = st
		}
		if o.ID != st.id {
			s.log.Debug("policy: not installing an override older than the one heard", "via", way, "id", o.ID, "newer", st.id, "caller", k)
		}
		return
	}
	installed, err := s.m.AddOverride(o)
	if err != nil {
		reason := "invalid"
		switch {
		case errors.Is(err, ErrOverrideTooLong):
			reason = "too_long"
		case errors.Is(err, ErrTooManyOverrides):
			reason = "too_many"
		}
		s.m.refused.WithLabelValues(reason).Inc()
		s.log.Warn("policy: override from another member not installed", "via", way, "id", o.ID, "caller", k, "reason", reason, "err", err)
		return
	}
	s.rememberLocked(installed)
}

// Revoke removes the override in force with the given ID here
// (Manager.RevokeOverride, audited with actor), then broadcasts the
// revocation to every member. It returns the revoked override, or an error
// wrapping ErrNoOverride when none in force has that ID.
func (s *OverrideSync) Revoke(id, actor string) (Override, error) {
	s.mu.Lock()
	o, err := s.m.RevokeOverride(id, actor)
	r := revocation{ID: o.ID, Actor: actor, Policy: o.Policy, APIKey: o.APIKey, User: o.User, Created: o.Created, Expires: o.Expires}
	if err == nil {
		s.tombstoneLocked(r)
	}
	s.mu.Unlock()
	if err != nil {
		return o, err
	}
	b, err := json.Marshal(r)
	if err != nil { // cannot happen
		return o, fmt.Errorf("policy: override %s revoked here, not on the other members: %w", id, err)
	}
	msg := append([]byte{syncRevoke}, b...)
	if len(msg) > MaxOverrideMessageLen { // shorter than the override, which fit
		return o, fmt.Errorf("policy: override %s revoked here, not on the other members: %d bytes, at most %d", id, len(msg), MaxOverrideMessageLen)
	}
	s.broadcast(msg)
	return o, nil
}

// revoke applies a revocation heard from another member by way.
func (s *OverrideSync) revoke(r revocation, way string) {
	if r.ID == "" || r.Created.IsZero() || r.Policy == "" {
		s.log.Warn("policy: ignoring a revocation without id, created or policy", "via", way, "id", r.ID)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.tombstoneLocked(r) {
		s.log.Debug("policy: ignoring the revocation of an override older than the one heard", "via", way, "id", r.ID, "caller", r.key())
		return
	}
	s.m.revokeUpTo(r.key(), r.ID, r.Created, r.Actor)
}

// tombstoneLocked records r as the newest version of its caller's
// override, unless a newer override is known; it reports whether it did.
func (s *OverrideSync) tombstoneLocked(r revocation) bool {
	k := r.key()
	st, ok := s.latest[k]
	if ok && st.id != r.ID && !newer(Override{ID: r.ID, Created: r.Created}, st) {
		return false
	}
	s.latest[k] = stamp{id: r.ID, created: r.Created, until: latestOf(st.until, r.Expires), revoked: &r}
	s.advanceLocked(r.Created)
	return true
}

// newer reports whether o is newer than the override st describes.
func newer(o Override, st stamp) bool {
	if c := o.Created.Compare(st.created); c != 0 {
		return c > 0
	}
	return o.ID > st.id
}

// rememberLocked records that o is installed, and forgets the callers whose
// every version expired before the newest override's creation.
func (s *OverrideSync) rememberLocked(o Override) {
	k := overrideKey(o.Policy, o.APIKey, o.User)
	st := s.latest[k]
	s.latest[k] = stamp{id: o.ID, created: o.Created, until: latestOf(st.until, o.Expires)}
	s.advanceLocked(o.Created)
}

// advanceLocked moves the horizon to created if that is later, and forgets
// the callers whose every version expired before it.
func (s *OverrideSync) advanceLocked(created time.Time) {
	if created.After(s.horizon) {
		s.horizon = created
		for k, st := range s.latest {
			if st.until.Before(s.horizon) {
				delete(s.latest, k)
			}
		}
	}
}

func latestOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
