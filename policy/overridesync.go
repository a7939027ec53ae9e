package policy

import (
	"encoding/json"
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
//	syncState     {"overrides": [Override, ...]}: the overrides in force, for a push/pull sync
//
// A member ignores (and logs) a message of a kind it does not know, so a
// new kind needs a new byte, not a new meaning for an old one.
const (
	syncOverride byte = 'o'
	syncState    byte = 's'
)

// syncStateBody is the JSON of a syncState message.
type syncStateBody struct {
	Overrides []json.RawMessage `json:"overrides"`
}

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
//     an expired one, one naming a tier this member's policy lacks, or bytes
//     that do not decode change nothing and are logged.
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
	until   time.Time // the latest Expires of any version heard
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

// LocalState returns every override in force here, for a member this one
// syncs with.
func (s *OverrideSync) LocalState() []byte {
	var body syncStateBody
	for _, o := range s.m.Overrides() {
		b, err := json.Marshal(o)
		if err != nil { // cannot happen
			continue
		}
		body.Overrides = append(body.Overrides, b)
	}
	if len(body.Overrides) == 0 {
		return nil
	}
	b, err := json.Marshal(body)
	if err != nil { // cannot happen
		return nil
	}
	return append([]byte{syncState}, b...)
}

// MergeState installs the overrides of another member's LocalState (see
// the rules on OverrideSync). An override in it that does not decode is
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
		s.log.Warn("policy: override from another member not installed", "via", way, "id", o.ID, "caller", k, "err", err)
		return
	}
	s.rememberLocked(installed)
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
	if o.Created.After(s.horizon) {
		s.horizon = o.Created
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
