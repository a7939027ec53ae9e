// Package api serves ringlimit's public surfaces: the HTTP JSON API
// (POST /v1/check, GET /healthz, GET /metrics), the forward-auth endpoint
// /v1/authz that gateways (nginx auth_request, Traefik ForwardAuth) call
// before each request, and the gRPC RateLimiter service, with the
// rate-limit headers, errors and Prometheus metrics.
//
// Every check surface (POST /v1/check, gRPC Check, /v1/authz, Envoy's
// ShouldRateLimit and POST /json) is a thin adapter over package decide:
// decode the request into a decide.Plan (validating the whole batch before
// any of it is applied: bad input changes no state), decide it, encode the
// answers. The same checks over HTTP and gRPC get the same decisions, and
// every surface gets the same combine rules, refunds, activity counts and
// metrics (api's metrics are the decide.Observer).
//
// docs/openapi.yaml describes the HTTP surface, every endpoint Handler
// serves with its exact requests and answers. The package's tests check
// every request they send, and its answer, against it, and
// TestOpenAPIRoutes fails when Handler serves a route it does not describe.
package api
