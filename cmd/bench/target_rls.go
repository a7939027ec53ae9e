package main

import (
	"context"
	"fmt"
	"sync"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// rlsTarget calls envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// (--proto rls), as Envoy's rate limit filter does: one request per check,
// in domain --rls-domain, carrying one descriptor of one entry
// {--rls-key: the workload's key}, round robin over --targets. Any server
// of that service answers it: ringlimit's nodes (--rls-config) or
// envoyproxy/ratelimit itself. OK counts as allowed, OVER_LIMIT as
// rejected; any other overall code is an error.
type rlsTarget struct {
	addrs   []string
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
	rr      roundRobin
	domain  string
	key     string
	reqs    sync.Pool // *rlsReq
}

// rlsReq is one request and the messages it points to, reused from call
// to call (a call has marshalled its request by the time it returns).
type rlsReq struct {
	req   rlsv3.RateLimitRequest
	desc  rlcommon.RateLimitDescriptor
	entry rlcommon.RateLimitDescriptor_Entry
	descs [1]*rlcommon.RateLimitDescriptor
	ents  [1]*rlcommon.RateLimitDescriptor_Entry
}

func newRLSTarget(cfg *config) (*rlsTarget, error) {
	conns, err := dialAll(cfg.targets)
	if err != nil {
		return nil, err
	}
	t := &rlsTarget{addrs: cfg.targets, conns: conns, rr: roundRobin{n: uint64(len(conns))},
		domain: cfg.rlsDomain, key: cfg.rlsKey}
	for _, cc := range conns {
		t.clients = append(t.clients, rlsv3.NewRateLimitServiceClient(cc))
	}
	return t, nil
}

func (t *rlsTarget) Check(ctx context.Context, keys []string) (allowed, rejected, degraded int, err error) {
	r, _ := t.reqs.Get().(*rlsReq)
	if r == nil {
		r = new(rlsReq)
		r.ents[0] = &r.entry
		r.desc.Entries = r.ents[:]
		r.descs[0] = &r.desc
		r.req.Descriptors = r.descs[:]
		r.req.Domain = t.domain
		r.entry.Key = t.key
	}
	defer t.reqs.Put(r)
	for _, k := range keys {
		r.entry.Value = k
		resp, err := t.clients[t.rr.pick()].ShouldRateLimit(ctx, &r.req)
		if err != nil {
			return 0, 0, 0, err
		}
		switch c := resp.GetOverallCode(); c {
		case rlsv3.RateLimitResponse_OK:
			allowed++
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			rejected++
		default:
			return 0, 0, 0, fmt.Errorf("overall code %v", c)
		}
	}
	return allowed, rejected, 0, nil
}

func (t *rlsTarget) Describe() string {
	return fmt.Sprintf("rls ShouldRateLimit domain %q descriptor %s=<key> %v", t.domain, t.key, t.addrs)
}
func (t *rlsTarget) Close() error { return closeAll(t.conns) }
