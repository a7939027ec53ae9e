package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit/api"
)

const (
	acquireSynopsis = "acquire KEY --limit N [--ttl DUR] [--request-id ID]\n" +
		"   or: ringlimit acquire [--policy P] [--api-key K | --user U | --ip IP] [--route R] [--tier T] [--ttl DUR] [--request-id ID]"
	renewSynopsis   = "renew LEASE [--ttl DUR]"
	releaseSynopsis = "release LEASE [--outcome ok|error|dropped] [--latency DUR]"
	reportSynopsis  = "report [--policy P] [--api-key K | --user U | --ip IP] [--route R] [--tier T] [--outcome ok|error|dropped] [--latency DUR]"
)

// policyFlags are a policy request's flags, as check takes them.
type policyFlags struct{ policy, apiKey, user, ip, route, tier string }

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.policy, "policy", "", "policy request: the policy (default: the file's default)")
	fs.StringVar(&p.apiKey, "api-key", "", "policy request: the caller's API key")
	fs.StringVar(&p.user, "user", "", "policy request: the caller's user")
	fs.StringVar(&p.ip, "ip", "", "policy request: the caller's IP")
	fs.StringVar(&p.route, "route", "", "policy request: the route (path)")
	fs.StringVar(&p.tier, "tier", "", "policy request: the tier (default: the policy's default or anonymous tier)")
}

func (p *policyFlags) given() bool {
	return p.policy != "" || p.apiKey != "" || p.user != "" || p.ip != "" || p.route != "" || p.tier != ""
}

// outcomeFlags are the --outcome and --latency of release and report.
type outcomeFlags struct {
	outcome string
	latency time.Duration
}

func (o *outcomeFlags) register(fs *flag.FlagSet, what string) {
	fs.StringVar(&o.outcome, "outcome", api.OutcomeOK, "how the "+what+" ended: ok, error (the backend failed or was too slow) or dropped (abandoned before the backend)")
	fs.DurationVar(&o.latency, "latency", 0, "how long the "+what+" took, a Go duration such as 120ms")
}

// check validates the flags for command name.
func (o *outcomeFlags) check(name string) error {
	switch o.outcome {
	case api.OutcomeOK, api.OutcomeError, api.OutcomeDropped:
	default:
		return usagef("%s: --outcome: %q is not ok, error or dropped", name, o.outcome)
	}
	if o.latency < 0 {
		return usagef("%s: --latency: must be 0 or more, got %v", name, o.latency)
	}
	return nil
}

// acquire runs POST /v1/acquire: exit 0 when a slot is held, 1 when full.
func (e *env) acquire(args []string) error {
	fs := newFlagSet("acquire", e.stderr)
	var (
		limit int64
		pf    policyFlags
		req   api.AcquireRequest
	)
	fs.Int64Var(&limit, "limit", 0, "inline limit: at most N leases of KEY at once")
	pf.register(fs)
	fs.StringVar(&req.TTL, "ttl", "", "how long the lease lives unless renewed, 1s to 1h (default: 30s inline, the layer's lease_ttl for policy)")
	fs.StringVar(&req.RequestID, "request-id", "", "makes the acquire idempotent: repeated while its lease lives, it answers that lease (default: none)")
	pos, err := e.parse(fs, args, 0, 1, acquireSynopsis)
	if err != nil {
		return err
	}
	switch {
	case pf.given() && (flagSet(fs, "limit") || len(pos) > 0):
		return usagef("acquire: give KEY with --limit, or policy flags (--policy, --api-key, --user, --ip, --route, --tier), not both")
	case !pf.given() && len(pos) == 0:
		return usagef("usage: ringlimit %s", acquireSynopsis)
	case !pf.given() && !flagSet(fs, "limit"):
		return usagef("acquire %s: an inline acquire needs --limit", pos[0])
	case !pf.given():
		req.Key, req.Limit = pos[0], &api.ConcurrencyLimitJSON{Algorithm: "concurrency", Limit: limit}
	}
	req.Policy, req.APIKey, req.User, req.IP, req.Route, req.Tier = pf.policy, pf.apiKey, pf.user, pf.ip, pf.route, pf.tier
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	status, data, err := c.do(context.Background(), http.MethodPost, "/v1/acquire", nil, &req, http.StatusOK, http.StatusTooManyRequests)
	if err != nil {
		return err
	}
	var resp api.CheckResponse
	if err := c.decode("/v1/acquire", data, &resp); err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
		row("allowed", resp.Allowed)
		if resp.Lease != "" {
			row("lease", resp.Lease)
		}
		row("in flight", resp.InFlight)
		row("limit", resp.Limit)
		if resp.Allowed {
			row("expires in", ms(resp.ExpiresInMs))
		} else {
			row("retry after", ms(resp.RetryAfterMs))
		}
		row("scope", resp.Scope)
		row("owner", resp.Owner)
		if resp.Degraded {
			row("degraded", "true (the owner could not be reached: the failure mode decided; no slot is held)")
		}
		tw.Flush()
	}
	if status == http.StatusTooManyRequests || !resp.Allowed {
		return &exitError{code: exitRefused}
	}
	return nil
}

// renew runs POST /v1/renew.
func (e *env) renew(args []string) error {
	fs := newFlagSet("renew", e.stderr)
	var req api.RenewRequest
	fs.StringVar(&req.TTL, "ttl", "", "extend the lease to this long from now, 1s to 1h (default: as acquire)")
	pos, err := e.parse(fs, args, 1, 1, renewSynopsis)
	if err != nil {
		return err
	}
	req.Lease = pos[0]
	var resp api.RenewResponse
	data, err := e.post("/v1/renew", &req, &resp)
	if err != nil || data == nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "renewed\t%v\nexpires in\t%s\nin flight\t%d\nlimit\t%d\nowner\t%s\n", resp.Renewed, ms(resp.ExpiresInMs), resp.InFlight, resp.Limit, resp.Owner)
	return tw.Flush()
}

// release runs POST /v1/release.
func (e *env) release(args []string) error {
	fs := newFlagSet("release", e.stderr)
	var of outcomeFlags
	of.register(fs, "work the lease covered")
	pos, err := e.parse(fs, args, 1, 1, releaseSynopsis)
	if err != nil {
		return err
	}
	if err := of.check("release"); err != nil {
		return err
	}
	req := api.ReleaseRequest{Lease: pos[0], Outcome: of.outcome, LatencyMs: of.latency.Milliseconds()}
	var resp api.ReleaseResponse
	data, err := e.post("/v1/release", &req, &resp)
	if err != nil || data == nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "released\t%v\nin flight\t%d\nlimit\t%d\nowner\t%s\n", resp.Released, resp.InFlight, resp.Limit, resp.Owner)
	return tw.Flush()
}

// reportOutcome runs POST /v1/report (report is the tool's error printer).
func (e *env) reportOutcome(args []string) error {
	fs := newFlagSet("report", e.stderr)
	var (
		pf policyFlags
		of outcomeFlags
	)
	pf.register(fs)
	of.register(fs, "request")
	if _, err := e.parse(fs, args, 0, 0, reportSynopsis); err != nil {
		return err
	}
	if !pf.given() {
		return usagef("report: name the request with policy flags (--policy, --api-key, --user, --ip, --route, --tier)")
	}
	if err := of.check("report"); err != nil {
		return err
	}
	req := api.ReportRequest{Policy: pf.policy, APIKey: pf.apiKey, User: pf.user, IP: pf.ip, Route: pf.route, Tier: pf.tier,
		Outcome: of.outcome, LatencyMs: of.latency.Milliseconds()}
	var resp api.ReportResponse
	data, err := e.post("/v1/report", &req, &resp)
	if err != nil || data == nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "reported\t%d\nlimit\t%d\nowner\t%s\n", resp.Reported, resp.Limit, resp.Owner)
	return tw.Flush()
}

// post POSTs req to path, expecting 200, and decodes the answer into
// resp. With --json it prints the answer as it came and returns nil data:
// the caller prints nothing more.
func (e *env) post(path string, req, resp any) ([]byte, error) {
	c, err := e.newClient()
	if err != nil {
		return nil, err
	}
	defer c.close()
	_, data, err := c.do(context.Background(), http.MethodPost, path, nil, req, http.StatusOK)
	if err != nil {
		return nil, err
	}
	if err := c.decode(path, data, resp); err != nil {
		return nil, err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil, nil
	}
	return data, nil
}
