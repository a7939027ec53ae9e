package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"text/tabwriter"

	"github.com/ringlimit/ringlimit/api"
)

// settle runs POST /v1/settle.
func (e *env) settle(args []string) error {
	pos, err := e.parse(newFlagSet("settle", e.stderr), args, 2, 2, "settle ID COST")
	if err != nil {
		return err
	}
	cost, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || cost < 0 {
		return usagef("settle: COST must be a whole number of tokens, 0 or more, got %q", pos[1])
	}
	c, err := e.newClient()
	if err != nil {
		return err
	}
	defer c.close()
	_, data, err := c.do(context.Background(), http.MethodPost, "/v1/settle", nil, &api.SettleRequest{Reservation: pos[0], Cost: &cost}, http.StatusOK)
	if err != nil {
		return err
	}
	var resp api.SettleResponse
	if err := c.decode("/v1/settle", data, &resp); err != nil {
		return err
	}
	if e.g.json {
		e.stdout.Write(data)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "settled\t%v\ncost\t%d\nremaining\t%d\nlimit\t%d\nowner\t%s\n", resp.Settled, resp.Cost, resp.Remaining, resp.Limit, resp.Owner)
	return tw.Flush()
}
