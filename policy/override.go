package policy

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// Caps on incident overrides, enforced by Manager.AddOverride on every path
// an override arrives by (an HTTP request, another member's broadcast or
// push/pull sync).
const (
	// MaxOverrides is the most overrides in force on a member at once. An
	// override for a caller that already has one replaces it and does not
	// count twice.
	MaxOverrides = 10000
	// MaxOverrideTTL is the longest an override may last: Expires at most
	// this long after Created, and (with maxClockSkew for a member whose
	// clock is behind the one that took it) after this member's now.
	MaxOverrideTTL = 7 * 24 * time.Hour
	// maxClockSkew is how far ahead of this member's clock another member's
	// may be when it stamps an override.
	maxClockSkew = time.Minute
)

// Errors an override may be refused with; both wrap ErrRequest too.
var (
	// ErrTooManyOverrides: MaxOverrides are in force already.
	ErrTooManyOverrides = errors.New("policy: too many overrides in force")
	// ErrOverrideTooLong: the override would last beyond MaxOverrideTTL.
	ErrOverrideTooLong = errors.New("policy: override lasts too long")
	// ErrNoOverride: no override in force has the ID given to revoke.
	ErrNoOverride = errors.New("policy: no such override")
)

// Override is an incident override: for a bounded time, one caller (by API
// key or user) gets another tier, or an explicit limit, instead of its own.
// Actor is who installed it: the name of the admin token the request
// authenticated with (the API sets it; a caller cannot choose it).
type Override struct {
	ID      string    `json:"id"`
	Actor   string    `json:"actor"`
	Reason  string    `json:"reason"`
	Policy  string    `json:"policy,omitempty"`
	APIKey  string    `json:"api_key,omitempty"`
	User    string    `json:"user,omitempty"`
	Tier    string    `json:"tier,omitempty"`
	Limit   *LimitArg `json:"limit,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`

	layer *Layer
}

// LimitArg is a limit given in an override.
type LimitArg struct {
	Algorithm string `json:"algorithm,omitempty"`
	Limit     int64  `json:"limit"`
	Per       string `json:"per"`
	Burst     int64  `json:"burst,omitempty"`
	// A calendar window in place of Per (bucket.LimitSpec).
	Calendar  string `json:"calendar,omitempty"`
	Timezone  string `json:"timezone,omitempty"`
	WeekStart string `json:"week_start,omitempty"`
}

func overrideKey(policy, apiKey, user string) string {
	if apiKey != "" {
		return policy + "|key:" + apiKey
	}
	return policy + "|user:" + user
}

// AddOverride validates o against the running policy, installs it
// (replacing an earlier override for the same caller) and audits it. It
// fills ID and Created when empty. Installing an override received from
// another node keeps its ID, so every node holds the same one.
func (m *Manager) AddOverride(o Override) (Override, error) {
	now := m.wallNow()
	if o.Actor == "" || o.Reason == "" {
		return o, fmt.Errorf("%w: actor and reason are required", ErrRequest)
	}
	if (o.APIKey == "") == (o.User == "") {
		return o, fmt.Errorf("%w: exactly one of api_key and user names the caller", ErrRequest)
	}
	if !o.Expires.After(now) {
		return o, fmt.Errorf("%w: expires: must be in the future", ErrRequest)
	}
	created := o.Created
	if created.IsZero() {
		created = now
	}
	if o.Expires.Sub(created) > MaxOverrideTTL || o.Expires.Sub(now) > MaxOverrideTTL+maxClockSkew {
		return o, fmt.Errorf("%w: %w: expires: at most %v after it is created, got %v after",
			ErrRequest, ErrOverrideTooLong, MaxOverrideTTL, o.Expires.Sub(created).Round(time.Second))
	}
	set := m.Current()
	if o.Policy == "" {
		o.Policy = set.Default
	}
	p := set.Policies[o.Policy]
	if p == nil {
		return o, fmt.Errorf("%w: policy: no policy named %q", ErrRequest, o.Policy)
	}
	switch {
	case (o.Tier == "") == (o.Limit == nil):
		return o, fmt.Errorf("%w: give exactly one of tier and limit", ErrRequest)
	case o.Tier != "":
		t := p.Tiers[o.Tier]
		if t == nil {
			return o, fmt.Errorf("%w: tier: policy %s has no tier %q", ErrRequest, p.Name, o.Tier)
		}
		l := *t
		l.Scope = "override:tier:" + o.Tier
		o.layer = &l
	default:
		spec := bucket.LimitSpec{Algorithm: o.Limit.Algorithm, Limit: o.Limit.Limit, Per: o.Limit.Per, Burst: o.Limit.Burst,
			Calendar: o.Limit.Calendar, Timezone: o.Limit.Timezone, WeekStart: o.Limit.WeekStart}
		set, err := spec.Parse("limit")
		if err != nil {
			return o, fmt.Errorf("%w: %w", ErrRequest, err)
		}
		o.layer = &Layer{Scope: "override", Limit: set.Limit, KeyBy: ByIdentity}
		concurrencyOverride(o.layer, set)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o.ID == "" {
		m.nextID++
		o.ID = fmt.Sprintf("ovr-%d-%d", now.UnixMilli(), m.nextID)
	}
	if o.Created.IsZero() {
		o.Created = now
	}
	k := overrideKey(o.Policy, o.APIKey, o.User)
	old := m.overrides[k]
	if old != nil && old.ID == o.ID {
		return *old, nil // already installed (a broadcast seen twice)
	}
	if old == nil && len(m.overrides) >= MaxOverrides {
		m.expireLocked(now)
		if len(m.overrides) >= MaxOverrides {
			return o, fmt.Errorf("%w: %w: %d are in force, at most %d; revoke one (DELETE /v1/overrides/{id}) or wait for one to expire",
				ErrRequest, ErrTooManyOverrides, len(m.overrides), MaxOverrides)
		}
	}
	m.overrides[k] = &o
	entry := auditEntry{Actor: o.Actor, Action: "override", What: k, Reason: o.Reason, New: o.summary(), Expires: &o.Expires}
	if old != nil {
		entry.Old = old.summary()
	}
	m.auditLocked(entry)
	return o, nil
}

func (o *Override) summary() string {
	if o.Tier != "" {
		return "tier " + o.Tier
	}
	if o.layer != nil && o.layer.Limit.Calendar().Unit != bucket.NoCalendar {
		return "limit " + o.layer.Limit.String()
	}
	return fmt.Sprintf("limit %d per %s burst %d", o.Limit.Limit, o.Limit.Per, o.Limit.Burst)
}

// Overrides returns the active overrides, dropping (and auditing) the ones
// that expired.
func (m *Manager) Overrides() []Override {
	m.Expire()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Override, 0, len(m.overrides))
	for _, o := range m.overrides {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b Override) int { return a.Created.Compare(b.Created) })
	return out
}

// RevokeOverride removes the override in force with the given ID before
// its expiry, audits it as revoked by actor, and returns it. It returns an
// error wrapping ErrNoOverride when no override in force has that ID.
func (m *Manager) RevokeOverride(id, actor string) (Override, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, o := range m.overrides {
		if o.ID == id {
			delete(m.overrides, k)
			m.auditLocked(auditEntry{Actor: actor, Action: "override_revoked", What: k, Old: o.summary(), Reason: o.Reason})
			return *o, nil
		}
	}
	return Override{}, fmt.Errorf("%w: %q", ErrNoOverride, id)
}

// revokeUpTo removes the override for caller k if it is the one with the
// given ID and Created or an older one (which that one replaced where it
// was taken), and audits it as revoked by actor.
func (m *Manager) revokeUpTo(k, id string, created time.Time, actor string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.overrides[k]
	if o == nil || (o.ID != id && newer(*o, stamp{id: id, created: created})) {
		return
	}
	delete(m.overrides, k)
	m.auditLocked(auditEntry{Actor: actor, Action: "override_revoked", What: k, Old: o.summary(), Reason: o.Reason})
}

// Expire drops the overrides whose time is up and audits each.
func (m *Manager) Expire() {
	now := m.wallNow()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked(now)
}

func (m *Manager) expireLocked(now time.Time) {
	for k, o := range m.overrides {
		if !now.Before(o.Expires) {
			delete(m.overrides, k)
			m.auditLocked(auditEntry{Actor: "system", Action: "override_expired", What: k, Old: o.summary(), Reason: o.Reason})
		}
	}
}
