package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// target is what the load goes to. Check applies one request carrying
// len(keys) checks and counts the decisions: allowed + rejected ==
// len(keys) when err is nil, and degraded counts those of them that were
// decided by the failure mode because the owner was unreachable (they are
// also in allowed or rejected). Check is called from many goroutines at
// once and must not keep keys.
//
// A new backend (the Redis baseline of issue 6: --target redis://… with
// go-redis + redis_rate) is one more implementation and one more case in
// newTarget.
type target interface {
	Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error)
	// Describe names the target in the output, e.g. "grpc 127.0.0.1:9091,…".
	Describe() string
	Close() error
}

func newTarget(cfg *config) (target, error) {
	switch {
	case cfg.targetHealth:
		return newHealthTarget(cfg.targets)
	case cfg.redis != "":
		return newRedisTarget(cfg)
	case cfg.proto == "client":
		return newClientTarget(cfg)
	case cfg.proto == "http", cfg.proto == "authz":
		return newHTTPTarget(cfg)
	case cfg.proto == "rls":
		return newRLSTarget(cfg)
	default:
		return newGRPCTarget(cfg)
	}
}

// roundRobin hands out indexes 0..n-1 in turn, safely from many goroutines.
type roundRobin struct {
	next atomic.Uint64
	n    uint64
}

func (r *roundRobin) pick() int { return int((r.next.Add(1) - 1) % r.n) }

// dialAll opens one ClientConn per address, shared by every goroutine: what
// a service would do. Connections are made lazily; the warm-up absorbs it.
func dialAll(addrs []string) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, len(addrs))
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("target %s: %w", a, err)
		}
		cc.Connect()
		conns = append(conns, cc)
	}
	return conns, nil
}

func closeAll(conns []*grpc.ClientConn) error {
	var first error
	for _, cc := range conns {
		if err := cc.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// grpcTarget calls RateLimiter/Check, one batch of checks per call.
type grpcTarget struct {
	addrs   []string
	conns   []*grpc.ClientConn
	clients []pb.RateLimiterClient
	rr      roundRobin
	limit   *pb.Limit // shared read-only by every request (concurrent Marshal is safe)
	reqs    sync.Pool // *grpcReq
	peek    bool      // --op peek: every check peeks
	// --op reserve-settle (op.go): the reserve's cost (shared read-only) and
	// TTL, and the draw of each settle's true cost.
	reserveCost int64
	reserveTTL  time.Duration
	trueCost    func(reserved int64) int64
}

type grpcReq struct {
	req    pb.CheckRequest
	checks []pb.Check
}

func newGRPCTarget(cfg *config) (*grpcTarget, error) {
	alg, err := algorithmFromName(cfg.algorithm)
	if err != nil {
		return nil, err
	}
	conns, err := dialAll(cfg.targets)
	if err != nil {
		return nil, err
	}
	t := &grpcTarget{
		addrs: cfg.targets,
		conns: conns,
		rr:    roundRobin{n: uint64(len(conns))},
		limit: &pb.Limit{
			Algorithm: alg,
			Limit:     cfg.limit,
			PerMs:     cfg.per.Milliseconds(),
			Burst:     cfg.burst,
			Lease:     cfg.lease,
		},
		peek:        cfg.op == opPeek,
		reserveCost: cfg.reserveCost,
		reserveTTL:  cfg.reserveTTL,
		trueCost:    trueCost,
	}
	for _, cc := range conns {
		t.clients = append(t.clients, pb.NewRateLimiterClient(cc))
	}
	return t, nil
}

func (t *grpcTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	r, _ := t.reqs.Get().(*grpcReq)
	if r == nil {
		r = new(grpcReq)
	}
	defer t.reqs.Put(r)
	if cap(r.checks) < len(keys) {
		r.checks = make([]pb.Check, len(keys))
		r.req.Checks = make([]*pb.Check, len(keys))
		for i := range r.checks {
			r.req.Checks[i] = &r.checks[i]
		}
	}
	r.req.Checks = r.req.Checks[:len(keys)]
	for i, k := range keys {
		r.checks[i].Key = k
		r.checks[i].Limit = t.limit
		r.checks[i].Peek = t.peek
	}
	resp, err := t.clients[t.rr.pick()].Check(ctx, &r.req)
	if err != nil {
		return 0, 0, 0, err
	}
	ds := resp.GetDecisions()
	if len(ds) != len(keys) {
		return 0, 0, 0, fmt.Errorf("%d decisions for %d checks", len(ds), len(keys))
	}
	allowed, rejected, degraded = countDecisions(ds)
	return allowed, rejected, degraded, nil
}

// countDecisions counts the admitted, rejected and degraded decisions.
func countDecisions(ds []*pb.Decision) (allowed, rejected, degraded int) {
	for _, d := range ds {
		if d.GetAllowed() {
			allowed++
		} else {
			rejected++
		}
		if d.GetDegraded() {
			degraded++
		}
	}
	return allowed, rejected, degraded
}

func (t *grpcTarget) Describe() string { return fmt.Sprintf("grpc %v", t.addrs) }
func (t *grpcTarget) Close() error     { return closeAll(t.conns) }

func algorithmFromName(name string) (pb.Algorithm, error) {
	switch name {
	case "token_bucket", "":
		return pb.Algorithm_TOKEN_BUCKET, nil
	case "leaky_bucket":
		return pb.Algorithm_LEAKY_BUCKET, nil
	case "fixed_window":
		return pb.Algorithm_FIXED_WINDOW, nil
	case "sliding_window_log":
		return pb.Algorithm_SLIDING_WINDOW_LOG, nil
	case "sliding_window_counter":
		return pb.Algorithm_SLIDING_WINDOW_COUNTER, nil
	}
	return 0, fmt.Errorf("--algorithm: unknown %q", name)
}

// httpTarget POSTs /v1/check (--proto http) or sends GET /v1/authz with
// the key as X-API-Key and no body (--proto authz: a forward-auth call, as
// a proxy makes it), one check per request, over keep-alive connections
// (as many per node as there are goroutines, so none is closed for lack
// of an idle slot). 200 counts as allowed, 429 as rejected, any other
// status as an error.
type httpTarget struct {
	urls      []string
	authz     bool
	client    *http.Client
	transport *http.Transport
	rr        roundRobin
	limitJSON []byte // `,"limit":{…}}`, after `,"peek":true` with --op peek
	bufs      sync.Pool
	// --op reserve-settle (op.go): POST /v1/settle of each node, the
	// reserve's cost and TTL, and the draw of each settle's true cost.
	settleURLs  []string
	reserveCost int64
	reserveTTL  time.Duration
	trueCost    func(reserved int64) int64
}

func newHTTPTarget(cfg *config) (*httpTarget, error) {
	lim, err := json.Marshal(map[string]any{
		"algorithm": cfg.algorithm,
		"limit":     cfg.limit,
		"per":       cfg.per.String(),
		"burst":     cfg.burst,
	})
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.concurrency * len(cfg.httpTargets),
		MaxIdleConnsPerHost: cfg.concurrency,
		IdleConnTimeout:     90 * time.Second,
	}
	t := &httpTarget{
		client:    &http.Client{Transport: tr},
		transport: tr,
		rr:        roundRobin{n: uint64(len(cfg.httpTargets))},
		limitJSON: append(append([]byte(`,"limit":`), lim...), '}'),
		authz:     cfg.proto == "authz",

		reserveCost: cfg.reserveCost,
		reserveTTL:  cfg.reserveTTL,
		trueCost:    trueCost,
	}
	if cfg.op == opPeek {
		t.limitJSON = append([]byte(`,"peek":true`), t.limitJSON...)
	}
	path := "/v1/check"
	if t.authz {
		path = "/v1/authz"
	}
	for _, a := range cfg.httpTargets {
		t.urls = append(t.urls, "http://"+a+path)
		t.settleURLs = append(t.settleURLs, "http://"+a+"/v1/settle")
	}
	return t, nil
}

var degradedTrue = []byte(`"degraded":true`)

func (t *httpTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	for _, k := range keys {
		a, d, err := t.checkOne(ctx, k)
		if err != nil {
			return 0, 0, 0, err
		}
		if a {
			allowed++
		} else {
			rejected++
		}
		if d {
			degraded++
		}
	}
	return allowed, rejected, degraded, nil
}

func (t *httpTarget) checkOne(ctx context.Context, key string) (allowed, degraded bool, err error) {
	bp, _ := t.bufs.Get().(*bytes.Buffer)
	if bp == nil {
		bp = new(bytes.Buffer)
	}
	defer t.bufs.Put(bp)
	bp.Reset()
	var req *http.Request
	if t.authz {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, t.urls[t.rr.pick()], nil)
		if err != nil {
			return false, false, err
		}
		// What nginx's auth_request sends: the client's key, and the
		// request's URI and method.
		req.Header.Set("X-API-Key", key)
		req.Header.Set("X-Original-URI", "/items")
		req.Header.Set("X-Original-Method", "GET")
	} else {
		bp.WriteString(`{"key":`)
		k, err := json.Marshal(key)
		if err != nil {
			return false, false, err
		}
		bp.Write(k)
		bp.Write(t.limitJSON)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, t.urls[t.rr.pick()], bytes.NewReader(bp.Bytes()))
		if err != nil {
			return false, false, err
		}
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return false, false, err
	}
	// Read the body in full so that the connection is reused.
	bp.Reset()
	_, err = io.Copy(bp, resp.Body)
	resp.Body.Close()
	if err != nil {
		return false, false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		allowed = true
	case http.StatusTooManyRequests:
	default:
		return false, false, fmt.Errorf("%s: status %d: %s", req.URL.Host, resp.StatusCode, bytes.TrimSpace(bp.Bytes()))
	}
	return allowed, bytes.Contains(bp.Bytes(), degradedTrue), nil
}

func (t *httpTarget) Describe() string {
	if t.authz {
		return fmt.Sprintf("http GET, X-API-Key: <key>, X-Original-URI: /items %v", t.urls)
	}
	return fmt.Sprintf("http %v", t.urls)
}
func (t *httpTarget) Close() error {
	t.transport.CloseIdleConnections()
	return nil
}
