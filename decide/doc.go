// Package decide is the transport-free decide path every public surface
// shares (HTTP and gRPC checks, forward-auth, Envoy RLS): a request
// becomes layer checks (an inline limit, a policy request's layers, an
// RLS descriptor's rule), a Checker (the router) decides them, and each
// request's layers are combined into one Answer.
//
// Invariants:
//   - A plan is validated whole before any of it is applied: every Add
//     that fails leaves nothing decided, and bad input changes no state.
//   - A policy request is combined by policy.Combine: any rejection
//     rejects, the rejecting layer names the scope, and the layers that
//     admitted it are refunded. An inline check and an RLS descriptor are
//     their own answer; no RLS descriptor refunds another.
//   - Every batch the Checker decides is counted in Activity and told to
//     the Observer, whatever the surface; refunds are not.
//   - The dry-run side effect is explicit: Config.CountDryRun.
//
// Usage:
//
//	d, _ := decide.New(decide.Config{Checker: router, Policy: mgr})
//	p := decide.GetPlan(decide.OpCheck)
//	defer p.Release()
//	if err := d.AddPolicy(p, "", policy.Request{APIKey: "k1"}); err != nil { ... }
//	answers, err := d.Decide(ctx, "http", p)
//
// OpPeek plans with the same Add methods and answers what OpCheck would,
// spending nothing (Plan.PeekLast makes one unit of a mixed batch a peek).
// OpAcquire plans an inline acquire with AddAcquire and a policy request
// with AddPolicy: a policy request's concurrency layers (of any Op but a
// peek) are acquired once its rate layers admitted it, and any refusal
// refuses all: the rate layers are refunded and the leases taken released
// (acquire.go). A plan that fails part-way changes no state.
//
// The package knows no transport: it imports no HTTP, gRPC or protobuf.
package decide
