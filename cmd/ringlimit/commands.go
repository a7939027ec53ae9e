package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/bucket"
	"github.com/ringlimit/ringlimit/internal/buildinfo"
	"github.com/ringlimit/ringlimit/status"
)

const checkSynopsis = "check KEY --limit N --per DUR [--cost N] [--algorithm A] [--burst B] [--failure-mode M] [--lease]\n" +
	"         [--reserve [--reserve-ttl DUR]]\n" +
	"   or: ringlimit check [--policy P] [--api-key K | --user U | --ip IP] [--route R] [--tier T] [--cost N]"

// check runs POST /v1/check: exit 0 when allowed, 1 when refused.
func (e *env) check(args []string) error { return e.checkAs("check", checkSynopsis, args) }

// checkAs runs POST /v1/check as the command name (check, or peek: the
// same request with "peek": true).
func (e *env) checkAs(name, synopsis string, args []string) error {
	req, err := e.checkRequest(name, synopsis, args)
	if err != nil {
		return err
	}
	req.Peek = name == "peek"
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	status, data, err := c.do(context.Background(), http.MethodPost, "/v1/check", nil, req, http.StatusOK, http.StatusTooManyRequests)
	if err != nil {
		return err
	}
	var resp api.CheckResponse
	if err := c.decode("/v1/check", data, &resp); err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
	} else {
		e.printCheck(&resp)
	}
	if status == http.StatusTooManyRequests || !resp.Allowed {
		return &exitError{code: exitRefused}
	}
	return nil
}

// checkRequest parses the flags and arguments of a command that names a
// key as a check does (check, peek, reset; reset takes no --cost) into
// the request's key fields.
func (e *env) checkRequest(name, synopsis string, args []string) (*api.CheckRequest, error) {
	fs := newFlagSet(name, e.stderr)
	var (
		limit, burst, cost int64
		per, alg, mode     string
		cal, tz, week      string
		lease              bool
		req                api.CheckRequest
	)
	fs.Int64Var(&limit, "limit", 0, "inline limit: the count per --per")
	fs.StringVar(&per, "per", "", "inline limit: the period, a Go duration (1s, 1m)")
	fs.Int64Var(&burst, "burst", 0, "inline limit: bucket capacity / queue size (default --limit)")
	fs.StringVar(&alg, "algorithm", "", "inline limit: token_bucket (default), leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter")
	fs.StringVar(&mode, "failure-mode", "", "inline limit: local (default), fail_open or fail_closed")
	fs.BoolVar(&lease, "lease", false, "inline limit: let non-owners admit from leases (token_bucket)")
	fs.StringVar(&cal, "calendar", "", "inline limit, in place of --per: day, week, month or year of --timezone's calendar (a fixed window from local midnight)")
	fs.StringVar(&tz, "timezone", "", "with --calendar: an IANA zone such as Europe/Berlin (default UTC)")
	fs.StringVar(&week, "week-start", "", "with --calendar week: the first day of a week (default monday)")
	if name != "reset" {
		fs.Int64Var(&cost, "cost", 0, "tokens this check spends (default 1, or the route's cost)")
	}
	fs.StringVar(&req.Policy, "policy", "", "policy request: the policy (default: the file's default)")
	fs.StringVar(&req.APIKey, "api-key", "", "policy request: the caller's API key")
	fs.StringVar(&req.User, "user", "", "policy request: the caller's user")
	fs.StringVar(&req.IP, "ip", "", "policy request: the caller's IP")
	fs.StringVar(&req.Route, "route", "", "policy request: the route (path)")
	fs.StringVar(&req.Tier, "tier", "", "policy request: the tier (default: the policy's default or anonymous tier)")
	if name == "check" {
		fs.BoolVar(&req.Reserve, "reserve", false, "inline token_bucket limit: an admitted check prints a reservation to settle at the true cost (ringlimit settle)")
		fs.StringVar(&req.ReserveTTL, "reserve-ttl", "", "with --reserve: how long the reservation can be settled, 1s to 24h (default: 5m)")
	}
	pos, err := e.parse(fs, args, 0, 1, synopsis)
	if err != nil {
		return nil, err
	}
	if flagSet(fs, "cost") {
		req.Cost = &cost
	}
	inline := flagSet(fs, "limit") || flagSet(fs, "per") || flagSet(fs, "burst") || flagSet(fs, "algorithm") ||
		flagSet(fs, "failure-mode") || flagSet(fs, "lease") || cal != "" || tz != "" || week != ""
	policyForm := req.Policy != "" || req.APIKey != "" || req.User != "" || req.IP != "" || req.Route != "" || req.Tier != ""
	switch {
	case policyForm && (inline || len(pos) > 0):
		return nil, usagef("%s: give KEY with --limit and --per, or policy flags (--policy, --api-key, --user, --ip, --route, --tier), not both", name)
	case !policyForm && len(pos) == 0:
		return nil, usagef("usage: ringlimit %s", synopsis)
	case !policyForm && (!flagSet(fs, "limit") || (per == "" && cal == "")):
		return nil, usagef("%s %s: an inline check needs --limit and --per (or --calendar)", name, pos[0])
	case !policyForm:
		req.Key = pos[0]
		req.Limit = &api.LimitJSON{Algorithm: alg, Limit: limit, Per: per, Burst: burst, Lease: lease,
			Calendar: cal, Timezone: tz, WeekStart: week}
		if mode != "" {
			// Sent as the JSON string the node parses.
			if err := req.Limit.FailureMode.UnmarshalText([]byte(mode)); err != nil {
				if fe := (*bucket.FieldError)(nil); errors.As(err, &fe) {
					return nil, usagef("--failure-mode: %s", fe.Msg) // the spec's words, under the flag's name
				}
				return nil, usagef("--failure-mode: %v", err)
			}
		}
	}
	return &req, nil
}

// ms formats a number of milliseconds as a duration.
func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }

func (e *env) printCheck(r *api.CheckResponse) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("allowed", r.Allowed)
	row("limit", r.Limit)
	row("remaining", r.Remaining)
	if !r.Allowed {
		row("retry after", ms(r.RetryAfterMs))
	}
	row("reset after", ms(r.ResetAfterMs))
	if r.DelayMs > 0 {
		row("delay", ms(r.DelayMs))
	}
	row("scope", r.Scope)
	row("owner", r.Owner)
	if r.Degraded {
		row("degraded", "true (the owner could not be reached: the failure mode decided)")
	}
	if len(r.WouldReject) > 0 {
		row("would reject", strings.Join(r.WouldReject, ", ")+" (dry run)")
	}
	if r.PolicyVersion != "" {
		row("policy", r.PolicyVersion)
	}
	if r.Reservation != "" {
		row("reservation", r.Reservation)
	}
	tw.Flush()
}

// owner runs GET /v1/owner.
func (e *env) owner(args []string) error {
	pos, err := e.parse(newFlagSet("owner", e.stderr), args, 1, 1, "owner KEY")
	if err != nil {
		return err
	}
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	var o api.OwnerResponse
	data, err := c.getJSON(context.Background(), "/v1/owner", url.Values{"key": {pos[0]}}, &o)
	if err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\nowner\t%s\nring version\t%d\n", o.Key, o.Owner, o.RingVersion)
	return tw.Flush()
}

// Status is what `ringlimit status --json` prints: the node's answers to
// GET /v1/cluster and GET /v1/ring, as they came.
type Status struct {
	// Node is the URL asked.
	Node    string         `json:"node"`
	Cluster status.Cluster `json:"cluster"`
	// Ring is nil when the node has no GET /v1/ring (404: a node older
	// than it).
	Ring *status.Ring `json:"ring,omitempty"`
}

// status runs GET /v1/cluster and GET /v1/ring.
func (e *env) status(args []string) error {
	if _, err := e.parse(newFlagSet("status", e.stderr), args, 0, 0, "status"); err != nil {
		return err
	}
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	st := Status{Node: c.base.Redacted()}
	ctx := context.Background()
	if _, err := c.getJSON(ctx, "/v1/cluster", nil, &st.Cluster); err != nil {
		return err
	}
	var ring status.Ring
	var ae *apiError
	switch _, err := c.getJSON(ctx, "/v1/ring", nil, &ring); {
	case err == nil:
		st.Ring = &ring
	case errors.As(err, &ae) && ae.status == http.StatusNotFound:
	default:
		return err
	}
	if e.g.json {
		enc := json.NewEncoder(e.stdout)
		return enc.Encode(&st)
	}
	e.printStatus(&st)
	return nil
}

func (e *env) printStatus(st *Status) {
	cl, rg := &st.Cluster, st.Ring
	if rg == nil {
		rg = &status.Ring{}
		fmt.Fprintln(e.stdout, "(this node has no GET /v1/ring: no ring shares)")
	}
	share := map[string]status.RingMember{}
	for _, m := range rg.Members {
		share[m.Name] = m
	}
	alive := 0
	for _, m := range cl.Members {
		if m.State == "alive" {
			alive++
		}
	}
	fmt.Fprintf(e.stdout, "%s (%s) sees %d members, %d alive; ring version %d, %d partitions\n",
		cl.Self, st.Node, len(cl.Members), alive, rg.Version, len(rg.Owners))
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tON RING\tHTTP\tGRPC\tPEER\tGOSSIP\tKEYS\tPARTITIONS\tSHARE")
	for _, m := range cl.Members {
		name := m.Name
		if name == cl.Self {
			name += " *"
		}
		onRing := "no"
		if m.OnRing {
			onRing = "yes"
		}
		keys := "?"
		if m.Keys >= 0 {
			keys = strconv.FormatInt(m.Keys, 10)
		}
		parts, pct := "-", "-"
		if r, ok := share[m.Name]; ok {
			parts, pct = strconv.Itoa(r.Partitions), fmt.Sprintf("%.1f%%", 100*r.Share)
			delete(share, m.Name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, m.State, onRing, cmp.Or(m.HTTP, "-"), cmp.Or(m.GRPC, "-"),
			cmp.Or(m.Peer, "-"), cmp.Or(m.Gossip, "-"), keys, parts, pct)
	}
	for _, r := range rg.Members { // on the ring, not among the members: a ring behind
		if _, ok := share[r.Name]; ok {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t?\t%d\t%.1f%%\n", r.Name, "?", "yes", r.Partitions, 100*r.Share)
		}
	}
	tw.Flush()
	e.stdout.Write([]byte(trimLines(b.String())))
	q := cl.Quorum
	quorum := "majority"
	if q.Minority {
		quorum = "MINORITY: this node does not take over the keys of members it cannot see"
	}
	fmt.Fprintf(e.stdout, "quorum: %s (cluster size %d", quorum, q.ClusterSize)
	if len(q.Down) > 0 {
		fmt.Fprintf(e.stdout, ", down: %s", strings.Join(q.Down, ", "))
	}
	fmt.Fprintln(e.stdout, ")")
	r := cl.Replication
	if r.Factor == 0 {
		fmt.Fprintln(e.stdout, "replication: off")
	} else {
		fmt.Fprintf(e.stdout, "replication: factor %d, lag %.1f ms, %d pending, %d replicas held, successor for %d keys\n",
			r.Factor, r.LagMs, r.Pending, r.Replicas, r.SuccessorKeys)
	}
}

// version and commit are set at build time, -ldflags "-X main.version=v1.2.3
// -X main.commit=$(git rev-parse HEAD)"; otherwise they come from the
// binary's build information when it has them.
var version, commit string

// Version is what `ringlimit version --json` prints.
type Version struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
}

func (e *env) version(args []string) error {
	if _, err := e.parse(newFlagSet("version", e.stderr), args, 0, 0, "version"); err != nil {
		return err
	}
	v := buildInfo()
	if e.g.json {
		return json.NewEncoder(e.stdout).Encode(&v)
	}
	fmt.Fprintf(e.stdout, "ringlimit %s (commit %s, %s)\n", v.Version, v.Commit, v.GoVersion)
	return nil
}

// buildInfo returns the version, commit and Go version of this build, as
// ringlimit-node version does (buildinfo.Read).
func buildInfo() Version {
	v, rev, goVersion := buildinfo.Read(version, commit)
	return Version{Version: v, Commit: rev, GoVersion: goVersion}
}
