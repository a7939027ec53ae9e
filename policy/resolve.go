package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/bucket"
)

// Request is what a caller says about one request.
type Request struct {
	// Policy names the policy; "" means the set's default.
	Policy string
	// APIKey, User and IP identify the caller: the first one set is its
	// identity. IP alone is a pre-login caller.
	APIKey string
	User   string
	IP     string
	// Route is the request path, matched against the policy's routes once
	// normalised (route.Normalize).
	Route string
	// Tier is the caller's plan; "" means the policy's default tier (or its
	// anonymous tier for a caller known only by IP).
	Tier string
	// Cost is what the request spends when no route says otherwise; 0 means 1.
	Cost int64
}

// Check is one layer's limit check for a request.
type Check struct {
	Key         string
	Limit       bucket.Limit
	Cost        int64
	Scope       string
	FailureMode bucket.FailureMode
	DryRun      bool
	Prelimit    float64
	Lease       bool
	Sync        bool
	// LeaseTTL and MaxLeaseTTL are a concurrency layer's (Layer's).
	LeaseTTL, MaxLeaseTTL time.Duration
	// Adaptive is the layer's adaptive limit (Layer.Adaptive), nil for none.
	Adaptive *adaptive.Spec
}

// ErrRequest wraps every error caused by a bad request; callers map it to
// 400 / INVALID_ARGUMENT.
var ErrRequest = errors.New("policy: invalid request")

// maxField bounds each identifying field, so that derived keys stay within
// bucket.MaxKeyLen.
const maxField = 256

// Resolve lists the checks that apply to req, in order: the route override,
// the tier, the global ceiling. override, if not nil, replaces the tier
// layer (an incident override for this caller).
func (p *Policy) Resolve(req Request, override *Layer) ([]Check, error) {
	for _, f := range []struct{ name, v string }{{"api_key", req.APIKey}, {"user", req.User}, {"ip", req.IP}, {"route", req.Route}, {"tier", req.Tier}} {
		if len(f.v) > maxField {
			return nil, fmt.Errorf("%w: %s: longer than %d bytes", ErrRequest, f.name, maxField)
		}
		if strings.Contains(f.v, "|") {
			return nil, fmt.Errorf("%w: %s: must not contain '|'", ErrRequest, f.name)
		}
	}
	identity := ""
	switch {
	case req.APIKey != "":
		identity = "key:" + req.APIKey
	case req.User != "":
		identity = "user:" + req.User
	case req.IP != "":
		identity = "ip:" + req.IP
	default:
		return nil, fmt.Errorf("%w: api_key, user or ip: the caller must be identified", ErrRequest)
	}
	if req.Cost < 0 {
		return nil, fmt.Errorf("%w: cost: must be at least 1, got %d", ErrRequest, req.Cost)
	}
	cost := max(req.Cost, 1)
	var route *Route
	if req.Route != "" {
		// One spelling per path: /login/, //login, /login;x=1 and
		// /%6Cogin are all /login.
		req.Route = normalizeRoute(req.Route)
		for i := range p.Routes {
			if p.Routes[i].matches(req.Route) {
				route = &p.Routes[i]
				break
			}
		}
	}
	if route != nil && route.Cost > 0 {
		cost = route.Cost
	}
	var layers []*Layer
	if route != nil && route.Layer != nil {
		layers = append(layers, route.Layer)
	}
	tierName := req.Tier
	if tierName == "" {
		tierName = p.DefaultTier
		if req.APIKey == "" && req.User == "" && p.AnonymousTier != "" {
			tierName = p.AnonymousTier
		}
	}
	switch {
	case override != nil:
		layers = append(layers, override)
	case tierName == "" && len(p.Tiers) > 0:
		return nil, fmt.Errorf("%w: tier: policy %s has no default tier; name one", ErrRequest, p.Name)
	case tierName != "":
		t := p.Tiers[tierName]
		if t == nil {
			return nil, fmt.Errorf("%w: tier: policy %s has no tier %q", ErrRequest, p.Name, tierName)
		}
		layers = append(layers, t)
	}
	if p.Global != nil {
		layers = append(layers, p.Global)
	}
	if len(layers) == 0 {
		return nil, fmt.Errorf("%w: tier: policy %s has no default tier; name one", ErrRequest, p.Name)
	}
	checks := make([]Check, 0, len(layers))
	for _, l := range layers {
		key, err := l.key(p.Name, identity, req)
		if err != nil {
			return nil, err
		}
		if cost > l.Limit.Capacity() {
			return nil, fmt.Errorf("%w: cost: %d exceeds the capacity %d of %s", ErrRequest, cost, l.Limit.Capacity(), l.Scope)
		}
		checks = append(checks, Check{Key: key, Limit: l.Limit, Cost: cost, Scope: l.Scope,
			FailureMode: l.FailureMode, DryRun: l.DryRun, Prelimit: l.Prelimit, Lease: l.Lease, Sync: l.Sync,
			LeaseTTL: l.LeaseTTL, MaxLeaseTTL: l.MaxLeaseTTL, Adaptive: l.Adaptive})
	}
	return checks, nil
}

// key derives the layer's bucket key in the policy namespace: policy,
// scope, and what the layer keys by, so that layers never share a bucket
// and no inline or RLS check can name one.
func (l *Layer) key(policy, identity string, req Request) (string, error) {
	var who string
	switch l.KeyBy {
	case ByAll:
		who = "all"
	case ByIP, ByIPRoute:
		if req.IP == "" {
			return "", fmt.Errorf("%w: ip: %s is keyed by client IP", ErrRequest, l.Scope)
		}
		who = "ip:" + req.IP
	default:
		who = identity
	}
	if l.KeyBy == ByIPRoute || l.KeyBy == ByIdentityRoute {
		// One bucket per caller for the route's pattern: varying the path
		// under a prefix must not multiply the limit.
		who += "|" + l.route
	}
	return bucket.NamespacePolicy + policy + "|" + l.Scope + "|" + who, nil
}

// Outcome is a request's answer, combined from its layers' decisions.
type Outcome struct {
	Allowed bool
	// Scope names the layer that rejected, or on admission the tightest
	// layer (least remaining).
	Scope      string
	Limit      int64
	Per        time.Duration
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
	// WouldReject lists the dry-run layers that would have rejected.
	WouldReject []string
	// Refund lists, on rejection, the indexes of the layers that admitted
	// and so spent (dry-run layers included): the caller gives their cost
	// back.
	Refund []int
}

// Combine folds the layers' decisions (in the order of checks) into one
// answer: any rejection by a layer that is not dry-run rejects; remaining is
// the smallest, retry-after the largest among rejections, reset-after the
// largest, delay the largest.
func Combine(checks []Check, decisions []bucket.Decision) Outcome {
	o := Outcome{Allowed: true, Remaining: -1}
	tight, rejecter := -1, -1
	for i := range checks {
		c, d := &checks[i], &decisions[i]
		if c.DryRun {
			if !d.Allowed {
				o.WouldReject = append(o.WouldReject, c.Scope)
			}
			continue
		}
		if !d.Allowed {
			o.Allowed = false
			if rejecter < 0 || d.RetryAfter > o.RetryAfter {
				rejecter = i
				o.RetryAfter = d.RetryAfter
			}
		}
		if o.Remaining < 0 || d.Remaining < o.Remaining {
			o.Remaining = d.Remaining
			tight = i
		}
		o.ResetAfter = max(o.ResetAfter, d.ResetAfter)
		o.Delay = max(o.Delay, d.Delay)
	}
	named := tight
	if rejecter >= 0 {
		named = rejecter
		// Give back what every admitting layer spent, dry-run ones too: a
		// shadow bucket must see what it would see if it were enforced.
		for i := range checks {
			if decisions[i].Allowed {
				o.Refund = append(o.Refund, i)
			}
		}
		o.Delay = 0
	}
	if named < 0 { // every layer is dry-run
		o.Remaining = 0
		if len(checks) > 0 {
			named = 0
			o.Remaining = decisions[0].Remaining
		}
	}
	if named >= 0 {
		o.Scope = checks[named].Scope
		o.Limit = checks[named].Limit.Count()
		if checks[named].Adaptive != nil && decisions[named].Limit > 0 {
			o.Limit = decisions[named].Limit // the adaptive limit the owner decided under
		}
		o.Per = checks[named].Limit.Window()
	}
	return o
}
