package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/policy"
)

// The override subcommands: add, list and revoke incident overrides through
// a node's /v1/overrides (an admin token needed for add and revoke).

const overrideAddSynopsis = "override add --reason TEXT (--user U | --api-key K) (--tier T | --limit N --per DUR [--algorithm A] [--burst B]) --expires-in DUR [--policy P]"

// overrideAdd runs POST /v1/overrides.
func (e *env) overrideAdd(args []string) error {
	fs := newFlagSet("override add", e.stderr)
	var req api.OverrideRequest
	var lim policy.LimitArg
	fs.StringVar(&req.Reason, "reason", "", "why (required; in the audit log)")
	fs.StringVar(&req.User, "user", "", "the caller, by user")
	fs.StringVar(&req.APIKey, "api-key", "", "the caller, by API key")
	fs.StringVar(&req.Policy, "policy", "", "the policy (default: the file's default)")
	fs.StringVar(&req.Tier, "tier", "", "the tier the caller gets")
	fs.Int64Var(&lim.Limit, "limit", 0, "or an explicit limit: the count per --per")
	fs.StringVar(&lim.Per, "per", "", "the explicit limit's period (Go duration)")
	fs.StringVar(&lim.Algorithm, "algorithm", "", "the explicit limit's algorithm (default token_bucket)")
	fs.Int64Var(&lim.Burst, "burst", 0, "the explicit limit's burst (default --limit)")
	fs.StringVar(&req.ExpiresIn, "expires-in", "", "how long it lasts, a Go duration: 1s to 168h (required)")
	if _, err := e.parse(fs, args, 0, 0, overrideAddSynopsis); err != nil {
		return err
	}
	switch {
	case req.Reason == "":
		return usagef("override add: --reason is required")
	case (req.User == "") == (req.APIKey == ""):
		return usagef("override add: give one of --user and --api-key")
	case req.ExpiresIn == "":
		return usagef("override add: --expires-in is required")
	}
	if flagSet(fs, "limit") || lim.Per != "" || lim.Algorithm != "" || lim.Burst != 0 {
		req.Limit = &lim
	}
	if (req.Tier == "") == (req.Limit == nil) {
		return usagef("override add: give --tier, or --limit and --per, not both")
	}
	o, data, err := e.sendOverride(http.MethodPost, "/v1/overrides", &req)
	if err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil
	}
	fmt.Fprintf(e.stdout, "added %s: %s gets %s in policy %s until %s\n", o.ID, caller(&o), grant(&o), o.Policy, o.Expires.UTC().Format(time.RFC3339))
	return nil
}

func caller(o *policy.Override) string {
	if o.APIKey != "" {
		return "api_key " + o.APIKey
	}
	return "user " + o.User
}

func grant(o *policy.Override) string {
	if o.Limit != nil {
		s := fmt.Sprintf("%d per %s", o.Limit.Limit, o.Limit.Per)
		if o.Limit.Burst > 0 {
			s += fmt.Sprintf(" burst %d", o.Limit.Burst)
		}
		if o.Limit.Algorithm != "" {
			s += " " + o.Limit.Algorithm
		}
		return s
	}
	return "tier " + o.Tier
}

// overrideList runs GET /v1/overrides.
func (e *env) overrideList(args []string) error {
	if _, err := e.parse(newFlagSet("override list", e.stderr), args, 0, 0, "override list"); err != nil {
		return err
	}
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	var list []policy.Override
	data, err := c.getJSON(context.Background(), "/v1/overrides", nil, &list)
	if err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stdout, "no override in force")
		return nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCALLER\tPOLICY\tGETS\tEXPIRES\tACTOR\tREASON")
	for i := range list {
		o := &list[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.ID, caller(o), o.Policy, grant(o), o.Expires.UTC().Format(time.RFC3339), o.Actor, o.Reason)
	}
	tw.Flush()
	e.stdout.Write([]byte(trimLines(b.String())))
	return nil
}

// overrideRevoke runs DELETE /v1/overrides/{id}.
func (e *env) overrideRevoke(args []string) error {
	pos, err := e.parse(newFlagSet("override revoke", e.stderr), args, 1, 1, "override revoke ID")
	if err != nil {
		return err
	}
	o, data, err := e.sendOverride(http.MethodDelete, "/v1/overrides/"+url.PathEscape(pos[0]), nil)
	if err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil
	}
	fmt.Fprintf(e.stdout, "revoked %s: %s had %s in policy %s\n", o.ID, caller(&o), grant(&o), o.Policy)
	return nil
}

// sendOverride makes one request that answers an override (POST
// /v1/overrides, DELETE /v1/overrides/{id}) and returns the override and
// the answer's JSON.
func (e *env) sendOverride(method, path string, body any) (policy.Override, []byte, error) {
	var o policy.Override
	c, err := e.newClient()
	if err != nil {
		return o, nil, err
	}
	defer c.close()
	_, data, err := c.do(context.Background(), method, path, nil, body, http.StatusOK)
	if err != nil {
		return o, nil, err
	}
	err = c.decode("/v1/overrides", data, &o)
	return o, data, err
}
