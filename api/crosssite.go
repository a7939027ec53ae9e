package api

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Codes of the answers crossSite refuses with.
const (
	CodeCrossOrigin          = "CROSS_ORIGIN"
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
)

// ParseOrigins validates the origins a browser page may call the API from
// (Config.CORSOrigins): each is scheme://host[:port], without a path, as
// browsers send it in the Origin header. It returns them lowercased.
func ParseOrigins(list []string) ([]string, error) {
	out := make([]string, 0, len(list))
	for i, o := range list {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("api: origin %d: %q is not an origin such as https://app.example or http://127.0.0.1:3000", i+1, o)
		}
		out = append(out, strings.ToLower(u.Scheme+"://"+u.Host))
	}
	return out, nil
}

// crossSite refuses, before next sees them, the requests a browser page of
// another origin makes to a state-changing endpoint (any method but GET,
// HEAD and OPTIONS): such a request carries an Origin header naming
// another host than the request's, or Sec-Fetch-Site cross-site or
// same-site. Unless the origin is one of allowed, it is answered 403
// CROSS_ORIGIN and changes nothing; a request from an allowed origin gets
// Access-Control-Allow-Origin, and its preflight (OPTIONS with
// Access-Control-Request-Method) is answered here. A request without
// Origin (curl, the Go client, a gateway) is not a browser's cross-site
// request and passes.
//
// A state-changing request must also carry its body as JSON: Content-Type
// absent, application/json (or any +json type) or
// application/x-www-form-urlencoded, which is what curl -d sends (the body
// is read as JSON whatever the header says). Anything else, such as the
// text/plain and multipart/form-data a page's form may send without a
// preflight, is refused 415 UNSUPPORTED_MEDIA_TYPE.
//
// /v1/authz is left alone: gateways (nginx auth_request, Traefik
// ForwardAuth) copy their client's headers, Origin included, onto it, and
// a browser cannot call it on its own without the X-Original-URI or
// X-Forwarded-Uri header it needs, which takes a preflight this function
// never approves for an origin that is not allowed.
func crossSite(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/authz" {
			next.ServeHTTP(w, r)
			return
		}
		origin := r.Header.Get("Origin")
		ok := origin != "" && slices.Contains(allowed, strings.ToLower(origin))
		if ok {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, RateLimit-Policy, RateLimit")
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			next.ServeHTTP(w, r)
			return
		case http.MethodOptions:
			if origin == "" || r.Header.Get("Access-Control-Request-Method") == "" {
				next.ServeHTTP(w, r)
				return
			}
			if !ok {
				writeError(w, http.StatusForbidden, CodeCrossOrigin, fmt.Sprintf("origin %q may not call this API (--cors-origins)", origin))
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if !ok && crossRequest(r, origin) {
			writeError(w, http.StatusForbidden, CodeCrossOrigin,
				fmt.Sprintf("a browser request from another site (origin %q) may not call this API; allow its origin with --cors-origins", origin))
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" && !jsonBody(ct) {
			writeError(w, http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
				fmt.Sprintf("Content-Type: %q; send the body as application/json", ct))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossRequest reports whether a browser says r comes from a page of
// another site or origin.
func crossRequest(r *http.Request, origin string) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	}
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) // "null" too
}

// jsonBody reports whether the Content-Type ct may carry a JSON body.
func jsonBody(ct string) bool {
	if ct == "application/json" { // what clients send: no parsing, no allocation
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded"
}
