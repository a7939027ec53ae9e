package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/ringlimit/ringlimit/api"
)

const (
	peekSynopsis = "peek KEY --limit N --per DUR [--cost N] [--algorithm A] [--burst B] [--failure-mode M] [--lease]\n" +
		"   or: ringlimit peek [--policy P] [--api-key K | --user U | --ip IP] [--route R] [--tier T] [--cost N]"
	resetSynopsis = "reset KEY --limit N --per DUR [--algorithm A] [--burst B]\n" +
		"   or: ringlimit reset [--policy P] [--api-key K | --user U | --ip IP] [--route R] [--tier T]"
)

// peek runs POST /v1/check with "peek": true: what check would answer,
// nothing spent; exit 0 when it would be allowed, 1 when refused.
func (e *env) peek(args []string) error { return e.checkAs("peek", peekSynopsis, args) }

// reset runs POST /v1/reset (admin token).
func (e *env) reset(args []string) error {
	req, err := e.checkRequest("reset", resetSynopsis, args)
	if err != nil {
		return err
	}
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	_, data, err := c.do(context.Background(), http.MethodPost, "/v1/reset", nil, req, http.StatusOK)
	if err != nil {
		return err
	}
	var resp api.ResetResponse
	if err := c.decode("/v1/reset", data, &resp); err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("reset", resp.Reset)
	row("previous remaining", resp.PreviousRemaining)
	row("owner", resp.Owner)
	for _, l := range resp.Layers {
		row("layer "+l.Scope, fmt.Sprintf("previous remaining %d, owner %s", l.PreviousRemaining, l.Owner))
	}
	if len(resp.Unconfirmed) > 0 {
		row("unconfirmed", strings.Join(resp.Unconfirmed, ", ")+" (did not acknowledge before their peer deadline)")
	}
	return tw.Flush()
}
