package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ringlimit/ringlimit/decide"
	"github.com/ringlimit/ringlimit/internal/clientip"
	"github.com/ringlimit/ringlimit/internal/route"
	"github.com/ringlimit/ringlimit/policy"
)

// The forward-auth endpoint, /v1/authz, answers the subrequest a gateway
// sends before it proxies a request: nginx's auth_request and Traefik's
// ForwardAuth. It is a policy check, decided as POST /v1/check decides one,
// with its inputs taken from the headers the gateway sets:
//
//   - identity: X-API-Key (else the client IP alone: the anonymous tier);
//   - route: X-Original-URI (nginx) or X-Forwarded-Uri (Traefik), the query
//     string stripped, percent-decoded and cleaned (/a/../login is /login);
//   - method: X-Original-Method or X-Forwarded-Method, checked to be an
//     HTTP token (policies do not match on methods);
//   - client IP: X-Forwarded-For, walked from the right past the trusted
//     proxies, or X-Real-IP when there is no X-Forwarded-For, both only
//     when the connection comes from a trusted proxy; else the connection's
//     address.
//
// A header given in both its nginx and its Traefik spelling must say the
// same thing both times, and no header may be given twice: a client behind
// a gateway that copies its headers could otherwise name another route.
//
// Query parameters: policy (the policy to apply; default the file's only
// or default one) and deny_status (the status of a refusal, 401 to 499;
// default 429). Any other parameter is bad input.
//
// Answers: 200 with the rate-limit headers when admitted; deny_status with
// Retry-After and the rate-limit headers when refused (both with the body
// of POST /v1/check); 400 INVALID_ARGUMENT for bad input, which spends
// nothing; 501 UNIMPLEMENTED when the node runs no policy file.
//
// A policy layer with algorithm concurrency is acquired as for POST
// /v1/check, and the answer's body names the lease. A gateway has no hook
// after the proxied request to release it: the slot is held for the
// layer's whole lease_ttl, so such a layer caps the requests started per
// lease_ttl rather than those in flight.

// CodeUnimplemented is the error code of /v1/authz on a node without a
// policy file.
const CodeUnimplemented = "UNIMPLEMENTED"

// DefaultDenyStatus is the status of a /v1/authz refusal when the request
// names none.
const DefaultDenyStatus = http.StatusTooManyRequests

// Headers /v1/authz reads, in canonical form.
const (
	HeaderAPIKey          = "X-Api-Key"
	HeaderOriginalURI     = "X-Original-Uri"
	HeaderForwardedURI    = "X-Forwarded-Uri"
	HeaderOriginalMethod  = "X-Original-Method"
	HeaderForwardedMethod = "X-Forwarded-Method"
	HeaderForwardedFor    = "X-Forwarded-For"
	HeaderRealIP          = "X-Real-Ip"
)

func (a *API) handleAuthz(w http.ResponseWriter, r *http.Request) {
	if a.policy == nil {
		// Not the caller's fault, and not transient: a server-side
		// misconfiguration, which the gateway must not take for a refusal
		// (a 4xx) nor retry (a 503).
		writeError(w, http.StatusNotImplemented, CodeUnimplemented,
			"authz: this node runs no policy file (start it with --policy), so /v1/authz has no limits to apply")
		return
	}
	p := decide.GetPlan(decide.OpCheck)
	defer p.Release()
	priv := a.private(r.Header.Get("Authorization"))
	req, deny, err := a.parseAuthz(r)
	if err == nil {
		err = a.d.AddPolicy(p, "", req)
	}
	if err != nil {
		a.m.invalid.WithLabelValues("authz").Inc()
		writeError(w, http.StatusBadRequest, CodeInvalidArgument, a.message(err, priv))
		return
	}
	answers, err := a.d.Decide(r.Context(), "authz", p)
	if err != nil {
		a.writeCheckError(w, err, priv)
		return
	}
	if priv {
		hide(&answers[0])
	}
	writeAnswer(w, &answers[0], deny, priv)
}

// parseAuthz reads a /v1/authz request: the policy request it makes and
// the status of a refusal. Every error names the header or parameter.
func (a *API) parseAuthz(r *http.Request) (policy.Request, int, error) {
	var req policy.Request
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return req, 0, fmt.Errorf("query: %v", err)
	}
	deny := DefaultDenyStatus
	for name, vs := range q {
		if len(vs) != 1 {
			return req, 0, fmt.Errorf("query %s: given %d times, want at most once", name, len(vs))
		}
		switch v := vs[0]; name {
		case "policy":
			req.Policy = v
		case "deny_status":
			if deny, err = parseDenyStatus(v); err != nil {
				return req, 0, err
			}
		default:
			return req, 0, fmt.Errorf("query %s: unknown parameter (want policy or deny_status)", name)
		}
	}
	if req.APIKey, err = oneHeader(r.Header, HeaderAPIKey); err != nil {
		return req, 0, err
	}
	uri, err := eitherHeader(r.Header, HeaderOriginalURI, HeaderForwardedURI)
	if err != nil {
		return req, 0, err
	}
	if req.Route, err = routeOf(uri); err != nil {
		return req, 0, err
	}
	method, err := eitherHeader(r.Header, HeaderOriginalMethod, HeaderForwardedMethod)
	if err != nil {
		return req, 0, err
	}
	if method != "" && !isToken(method) {
		return req, 0, fmt.Errorf("%s or %s: %q is not an HTTP method", HeaderOriginalMethod, HeaderForwardedMethod, method)
	}
	req.IP, err = a.authzIP(r)
	return req, deny, err
}

// parseDenyStatus parses deny_status: a 4xx other than 400, which means
// bad input.
func parseDenyStatus(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || len(v) != 3 || n < 401 || n > 499 {
		return 0, fmt.Errorf("query deny_status: want a status from 401 to 499 (nginx's auth_request needs 401 or 403), got %q", v)
	}
	return n, nil
}

// authzIP is the client IP of a /v1/authz request.
func (a *API) authzIP(r *http.Request) (string, error) {
	hops := clientip.Hops(r.Header, HeaderForwardedFor)
	if len(hops) == 0 {
		real, err := oneHeader(r.Header, HeaderRealIP)
		if err != nil {
			return "", err
		}
		if real != "" {
			hops = []string{real}
		}
	}
	return clientip.Resolve(r.RemoteAddr, hops, a.trusted), nil
}

// oneHeader is the value of a header given at most once, trimmed.
func oneHeader(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return strings.TrimSpace(vs[0]), nil
	}
	return "", fmt.Errorf("%s: given %d times, want at most once", name, len(vs))
}

// eitherHeader is the value of the header spelt nginx's way or Traefik's;
// when both are given they must agree.
func eitherHeader(h http.Header, nginx, traefik string) (string, error) {
	a, err := oneHeader(h, nginx)
	if err != nil {
		return "", err
	}
	b, err := oneHeader(h, traefik)
	if err != nil {
		return "", err
	}
	if a != "" && b != "" && a != b {
		return "", fmt.Errorf("%s %q and %s %q: both given and they differ", nginx, a, traefik, b)
	}
	if a == "" {
		return b, nil
	}
	return a, nil
}

// routeOf is the route of a request URI as the gateway saw it: its path,
// without query or fragment, normalised as every route is
// (route.Normalize: dot segments, repeated slashes, escaped unreserved
// characters, ';' parameters and a trailing slash resolved), so that a
// route limit cannot be skipped by spelling its path another way. An
// absolute URI (http://host/path) gives its path.
func routeOf(uri string) (string, error) {
	if uri == "" {
		return "", fmt.Errorf("%s or %s: required: the URI of the request being authorised", HeaderOriginalURI, HeaderForwardedURI)
	}
	raw := uri
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if !strings.HasPrefix(raw, "/") {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return "", fmt.Errorf("%s or %s: want a path such as /login, got %q", HeaderOriginalURI, HeaderForwardedURI, uri)
		}
		raw = u.EscapedPath()
	}
	if _, err := url.PathUnescape(raw); err != nil {
		return "", fmt.Errorf("%s or %s: %q: bad percent-encoding", HeaderOriginalURI, HeaderForwardedURI, uri)
	}
	return route.Normalize(raw), nil
}

// isToken reports whether s is an RFC 9110 token, as a method must be.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}
