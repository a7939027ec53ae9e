package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// The operations of --op: what each request of the loop does.
//
//   - check: a plain check of the workload's keys (the default).
//   - peek: the same checks with peek set: the owner answers what the
//     check would answer now and spends nothing.
//   - reserve-settle: a reserve of --reserve-cost on the key (a check with
//     reserve set, --reserve-ttl) then, once it is admitted, a settle of its
//     reservation at a true cost drawn uniformly from 0 to --reserve-cost.
//     One request of the loop (one "operation" in the figures) is the pair:
//     its latency is the pair's, and calls counts both calls.
const (
	opCheck         = "check"
	opPeek          = "peek"
	opReserveSettle = "reserve-settle"
)

// multiCallTarget is a target whose request is more than one call (a
// reserve and its settle): CheckCalls is Check that also says how many
// calls the request made (reserves and settles).
type multiCallTarget interface {
	target
	CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error)
}

// validateOp checks --op and the flags it goes with.
func (c *config) validateOp() error {
	switch c.op {
	case opCheck:
		return nil
	case opAcquireRelease:
		return c.validateAcquire()
	case opPeek, opReserveSettle:
	default:
		return fmt.Errorf("--op: check, peek, reserve-settle or acquire-release, got %q", c.op)
	}
	switch {
	case c.targetHealth || c.redis != "":
		return fmt.Errorf("--op %s: ringlimit targets only (not --target-health or --target)", c.op)
	case c.proto != "grpc" && c.proto != "client" && c.proto != "http":
		return fmt.Errorf("--op %s: --proto grpc, client or http, got %q", c.op, c.proto)
	case c.lease:
		return fmt.Errorf("--op %s: --lease is for checks (a peek and a reserve go to the owner)", c.op)
	}
	if c.op != opReserveSettle {
		return nil
	}
	switch {
	case c.batch != 1:
		return fmt.Errorf("--batch: --op reserve-settle sends one reserve per request, got %d", c.batch)
	case !isTokenBucket(c.algorithm):
		return fmt.Errorf("--algorithm: --op reserve-settle needs token_bucket (reserve is for token buckets), got %q", c.algorithm)
	case c.reserveCost < 1:
		return fmt.Errorf("--reserve-cost: at least 1, got %d", c.reserveCost)
	case c.reserveTTL != 0 && (c.reserveTTL < time.Second || c.reserveTTL > 24*time.Hour || c.reserveTTL%time.Millisecond != 0):
		return fmt.Errorf("--reserve-ttl: 0 (the cluster's default) or whole milliseconds from 1s to 24h, got %v", c.reserveTTL)
	}
	burst := c.burst
	if burst == 0 {
		burst = c.limit
	}
	if c.reserveCost > burst {
		return fmt.Errorf("--reserve-cost: at most the burst (%d), got %d", burst, c.reserveCost)
	}
	return nil
}

func isTokenBucket(name string) bool {
	alg, err := algorithmFromName(name)
	return err == nil && alg == pb.Algorithm_TOKEN_BUCKET
}

// trueCost draws the settled cost of a reservation of reserved: uniform
// over 0..reserved. Safe from many goroutines.
func trueCost(reserved int64) int64 { return rand.Int64N(reserved + 1) }

// reserveCheck is the check a reserve sends: cost on key with a
// reservation settleable for ttl (0: the cluster's default).
func reserveCheck(key string, limit *pb.Limit, cost *int64, ttl time.Duration) *pb.Check {
	return &pb.Check{Key: key, Cost: cost, Limit: limit, Reserve: true, ReserveTtlMs: ttl.Milliseconds()}
}

// settleRequest is the settle of reservation id at cost.
func settleRequest(id string, cost int64) *pb.SettleRequest {
	return &pb.SettleRequest{Reservation: id, Cost: cost}
}

// reserveAnswer reads a reserve's decision: whether it was admitted and
// the reservation to settle ("" when refused). An admitted reserve without
// a reservation is an error unless degraded (the owner was unreachable and
// the failure mode decided: nothing to settle): a node that does not know
// reserve answers a plain check, which this workload must not measure.
func reserveAnswer(d *pb.Decision) (id string, err error) {
	switch {
	case !d.GetAllowed() || d.GetDegraded():
		return "", nil
	case d.GetReservation() == "":
		return "", errors.New("an admitted reserve without a reservation (does the node know reserve?)")
	}
	return d.GetReservation(), nil
}

// tally is the decision counts of one reserve, and its calls (1, or 2
// with the settle).
func tally(d *pb.Decision, settled bool) (allowed, rejected, degraded, calls int) {
	allowed, rejected, degraded = countDecisions([]*pb.Decision{d})
	calls = 1
	if settled {
		calls = 2
	}
	return allowed, rejected, degraded, calls
}

// CheckCalls of --proto grpc, --op reserve-settle: RateLimiter/Check with
// one reserving check, then RateLimiter/Settle of its id, each to the next
// entry node in turn.
func (t *grpcTarget) CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error) {
	if len(keys) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("reserve-settle: %d keys in a request, want 1", len(keys))
	}
	resp, err := t.clients[t.rr.pick()].Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{reserveCheck(keys[0], t.limit, &t.reserveCost, t.reserveTTL)}})
	if err != nil {
		return 0, 0, 0, 0, err
	}
	ds := resp.GetDecisions()
	if len(ds) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("%d decisions for 1 check", len(ds))
	}
	id, err := reserveAnswer(ds[0])
	if err != nil || id == "" {
		a, r, d, n := tally(ds[0], false)
		return a, r, d, n, err
	}
	s, err := t.clients[t.rr.pick()].Settle(ctx, settleRequest(id, t.trueCost(t.reserveCost)))
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("settle: %w", err)
	}
	if !s.GetSettled() {
		return 0, 0, 0, 0, fmt.Errorf("settle: not settled: %v", s)
	}
	a, r, d, n := tally(ds[0], true)
	return a, r, d, n, nil
}

// CheckCalls of --proto client, --op reserve-settle: Client.Check of one
// reserving check (coalesced with the other goroutines' as any check),
// then Client.Settle of its id.
func (t *clientTarget) CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error) {
	if len(keys) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("reserve-settle: %d keys in a request, want 1", len(keys))
	}
	ds, err := t.c.Check(ctx, reserveCheck(keys[0], t.limit, &t.reserveCost, t.reserveTTL))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if len(ds) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("%d decisions for 1 check", len(ds))
	}
	id, err := reserveAnswer(ds[0])
	if err != nil || id == "" {
		a, r, d, n := tally(ds[0], false)
		return a, r, d, n, err
	}
	if _, err := t.c.Settle(ctx, id, t.trueCost(t.reserveCost)); err != nil {
		return 0, 0, 0, 0, fmt.Errorf("settle: %w", err)
	}
	a, r, d, n := tally(ds[0], true)
	return a, r, d, n, nil
}

// httpReserveBody is the POST /v1/check body of a reserve: the key, the
// cost, reserve and (when not 0) reserve_ttl, then limitJSON (`,"limit":{…}}`).
func httpReserveBody(buf *bytes.Buffer, key string, cost int64, ttl time.Duration, limitJSON []byte) error {
	k, err := json.Marshal(key)
	if err != nil {
		return err
	}
	buf.WriteString(`{"key":`)
	buf.Write(k)
	fmt.Fprintf(buf, `,"cost":%d,"reserve":true`, cost)
	if ttl != 0 {
		fmt.Fprintf(buf, `,"reserve_ttl":%q`, ttl.String())
	}
	buf.Write(limitJSON)
	return nil
}

// httpSettleBody is the POST /v1/settle body.
func httpSettleBody(id string, cost int64) ([]byte, error) {
	return json.Marshal(struct {
		Reservation string `json:"reservation"`
		Cost        int64  `json:"cost"`
	}{id, cost})
}

// CheckCalls of --proto http, --op reserve-settle: POST /v1/check with
// reserve, then POST /v1/settle of its id, each to the next node in turn.
func (t *httpTarget) CheckCalls(ctx context.Context, keys []string) (allowed, rejected, degraded, calls int, err error) {
	if len(keys) != 1 {
		return 0, 0, 0, 0, fmt.Errorf("reserve-settle: %d keys in a request, want 1", len(keys))
	}
	var body bytes.Buffer
	if err := httpReserveBody(&body, keys[0], t.reserveCost, t.reserveTTL, t.limitJSON); err != nil {
		return 0, 0, 0, 0, err
	}
	var d struct {
		Allowed     bool   `json:"allowed"`
		Degraded    bool   `json:"degraded"`
		Reservation string `json:"reservation"`
	}
	code, err := t.post(ctx, t.urls[t.rr.pick()], body.Bytes(), &d)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if code != http.StatusOK && code != http.StatusTooManyRequests {
		return 0, 0, 0, 0, fmt.Errorf("reserve: status %d", code)
	}
	dec := &pb.Decision{Allowed: code == http.StatusOK, Degraded: d.Degraded, Reservation: d.Reservation}
	id, err := reserveAnswer(dec)
	if err != nil || id == "" {
		a, r, dg, n := tally(dec, false)
		return a, r, dg, n, err
	}
	sb, err := httpSettleBody(id, t.trueCost(t.reserveCost))
	if err != nil {
		return 0, 0, 0, 0, err
	}
	var s struct {
		Settled bool `json:"settled"`
	}
	code, err = t.post(ctx, t.settleURLs[t.rr.pick()], sb, &s)
	if err != nil {
		return 0, 0, 0, 0, fmt.Errorf("settle: %w", err)
	}
	if code != http.StatusOK || !s.Settled {
		return 0, 0, 0, 0, fmt.Errorf("settle: status %d, settled %v", code, s.Settled)
	}
	a, r, dg, n := tally(dec, true)
	return a, r, dg, n, nil
}

// post POSTs body as JSON to url and decodes the answer into v when it is
// 200 or 429; other answers are an error naming their body.
func (t *httpTarget) post(ctx context.Context, url string, body []byte, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return 0, fmt.Errorf("%s: status %d: %s", req.URL.Host, resp.StatusCode, bytes.TrimSpace(b))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", req.URL.Host, err, bytes.TrimSpace(b))
	}
	return resp.StatusCode, nil
}
