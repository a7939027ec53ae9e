// Package openapitest checks HTTP traffic against the OpenAPI description
// of the node's API (docs/openapi.yaml), for tests: a Spec validates each
// request and its answer with kin-openapi's openapi3filter, either as an
// http.Handler wrapping the server (Handler) or as an http.RoundTripper
// wrapping a client (Transport), and fails the test on any mismatch.
//
// An exchange is consistent when:
//   - the answer validates against the operation's responses (every status
//     must be documented), whether or not the request did;
//   - a request that does not validate (or names no operation) is answered
//     with a 4xx;
//   - a request that validates is not answered 400, unless the answer's
//     message names one of the rules the schema cannot say (Semantic400).
//
// With OPENAPITEST_DEBUG set in the environment, every request that did
// not validate, and every valid one answered 400, is printed to stderr.
//
// It is for tests only. A Spec is safe for concurrent use.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The status page answers HTML, which kin-openapi has no decoder for: its
// body is checked as a string.
func init() {
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
}

// Semantic400 are fragments of the messages of 400 answers to requests a
// schema cannot tell from valid ones: rules across fields, on bytes rather
// than JSON values, or on the running policy file. docs/openapi.yaml says
// each of them in words.
var Semantic400 = []string{
	"bytes, the maximum is",                    // a key of at most 1024 characters but more bytes
	"longer than 256 bytes",                    // a policy field of at most 256 characters but more bytes
	"exceeds the capacity",                     // cost above the limit's capacity
	"limit.per: must be between",               // per outside 1ms to 366 days, or beyond a time.Duration
	"limit.per: required",                      // neither per nor calendar
	"give either per or calendar",              // both per and calendar
	"limit.calendar: ",                         // timezone or week_start without calendar; calendar on another algorithm
	"is not an IANA zone",                      // a timezone the tzdata does not have
	"depends on the host",                      // timezone Local
	"only a week has a first day",              // week_start with another calendar
	"limit.limit: must be at most 100000 with", // a log's limit above 100000
	"cannot be represented exactly",            // burst × period beyond 2^62
	"only the token bucket can lease",          // lease with another algorithm
	"sync cannot be leased",                    // replication sync with lease
	"body: larger than",                        // a body over 64 KiB
	"body: more than one JSON value",           // a second JSON value after the first
	"no policy named",                          // a policy the file does not have
	"has no tier",                              // a tier the file does not have
	"has no default tier",                      // a policy that needs a tier named
	"several policies and no \"default\"",      // a file that needs a policy named
	"runs no policy file",                      // a policy request to a node without --policy
	"is keyed by client IP",                    // a policy request without ip for a layer keyed by it
	"given 2 times",                            // a header or query parameter given twice
	"both given and they differ",               // nginx's and Traefik's header disagree
	"X-Forwarded-Uri: required",                // neither route header
	"want a path such as",                      // a route header that is no path or URI
	"bad percent-encoding",                     // a route header badly encoded
	"accepts no inline limits",                 // an inline limit on a node with --inline-limits=false
	"unknown parameter",                        // /v1/authz query parameter other than policy, deny_status
	"query deny_status: want a status",         // deny_status not exactly three digits (0429)
	"query: invalid",                           // a query string that does not parse
	"expires_in: a Go duration between",        // an override lasting under 1s or over 7 days
	"too many overrides",                       // the cap of overrides in force
	"bytes to send to the other members",       // an override beyond one gossip packet
	"reserve_ttl: must be between",             // a reservation TTL outside 1s to 24h
	"reserve_ttl: needs",                       // reserve_ttl without reserve
	"reserve needs a token_bucket limit",       // reserve with another algorithm
	"reserve is for inline limits",             // reserve on a policy request
	"malformed reservation id",                 // a settle of an id that is not one
	"ttl: must be between",                     // a lease TTL outside 1s to 1h
	"malformed lease id",                       // a renew or release of an id that is not one
	"ids joined by",                            // a joined lease of more than 4 ids
	"no concurrency layer applies",             // an acquire of a policy request without one
}

// Spec is a loaded, validated OpenAPI description and the counts of what
// it checked.
type Spec struct {
	doc    *openapi3.T
	router routers.Router

	mu     sync.Mutex
	counts Counts
}

// Counts are what a Spec checked.
type Counts struct {
	// Pairs are the requests and answers validated.
	Pairs int
	// Invalid are the requests that did not validate (or named no
	// operation), answered with a 4xx as they should be.
	Invalid int
	// Semantic are the valid requests answered 400 for a rule in
	// Semantic400.
	Semantic int
	// ByOperation counts Pairs by operation ID ("" for none) and status:
	// "check 200".
	ByOperation map[string]int
}

// Load reads the description at path and validates it.
func Load(path string) (*Spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("openapitest: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapitest: %s: %w", path, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapitest: %w", err)
	}
	return &Spec{doc: doc, router: router, counts: Counts{ByOperation: map[string]int{}}}, nil
}

// Doc returns the description.
func (s *Spec) Doc() *openapi3.T { return s.doc }

// Counts returns what s checked so far.
func (s *Spec) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	c.ByOperation = maps.Clone(c.ByOperation)
	return c
}

func (c Counts) String() string {
	ops := slices.Sorted(maps.Keys(c.ByOperation))
	var b strings.Builder
	for _, op := range ops {
		name := op
		if strings.HasPrefix(name, " ") {
			name = "(none)" + name
		}
		fmt.Fprintf(&b, " %s=%d", strings.Replace(name, " ", ":", 1), c.ByOperation[op])
	}
	return fmt.Sprintf("%d pairs validated (%d requests invalid and answered 4xx, %d valid and answered 400 for a rule the schema cannot say):%s",
		c.Pairs, c.Invalid, c.Semantic, b.String())
}

var options = &openapi3filter.Options{
	IncludeResponseStatus: true,
	MultiError:            true,
	SkipSettingDefaults:   true,
	AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		if in.SecuritySchemeName != "adminToken" {
			return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
		}
		scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return errors.New("no bearer token")
		}
		return nil
	},
}

// Check validates one exchange: req (whose body is reqBody; req.Body is
// not read) and the answer status, header and body. It returns an error
// describing a mismatch, nil when the exchange is consistent.
func (s *Spec) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	ctx := context.Background()
	// A copy to validate: the server ignores the Content-Type of a body,
	// the description says application/json.
	vreq := req.Clone(ctx)
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	vreq.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	vreq.ContentLength = int64(len(reqBody))
	if vreq.URL.Host == "" {
		vreq.URL.Host = req.Host
	}
	if vreq.URL.Scheme == "" {
		vreq.URL.Scheme = "http"
	}
	what := fmt.Sprintf("%s %s -> %d %s", req.Method, req.URL.RequestURI(), status, shorten(body))

	route, params, err := s.router.FindRoute(vreq)
	if err != nil {
		if status >= 400 && status < 500 {
			s.count("", status, true, false)
			return nil
		}
		return fmt.Errorf("%s: not described (%v) yet not answered 4xx", what, err)
	}
	if route.Operation.RequestBody != nil && len(reqBody) > 0 {
		vreq.Header.Set("Content-Type", "application/json")
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: options}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	respErr := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Options: options})
	op := route.Operation.OperationID
	var errs []error
	if respErr != nil {
		errs = append(errs, fmt.Errorf("answer does not validate: %w", respErr))
	}
	semantic := false
	switch {
	case reqErr != nil && (status < 400 || status >= 500):
		errs = append(errs, fmt.Errorf("request does not validate (%w) yet was answered %d", reqErr, status))
	case reqErr == nil && status == http.StatusBadRequest:
		if !isSemantic(body) {
			errs = append(errs, errors.New("request validates yet was answered 400 for a rule the description does not list"))
		}
		semantic = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", what, errors.Join(errs...))
	}
	if os.Getenv("OPENAPITEST_DEBUG") != "" && (reqErr != nil || semantic) {
		fmt.Fprintf(os.Stderr, "openapitest: %s: semantic=%v %v\n", what, semantic, reqErr)
	}
	s.count(op, status, reqErr != nil, semantic)
	return nil
}

func (s *Spec) count(op string, status int, invalid, semantic bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts.Pairs++
	s.counts.ByOperation[fmt.Sprintf("%s %d", op, status)]++
	if invalid {
		s.counts.Invalid++
	}
	if semantic {
		s.counts.Semantic++
	}
}

// isSemantic reports whether a 400 body's message names a rule in
// Semantic400.
func isSemantic(body []byte) bool {
	var e struct{ Message string }
	if json.Unmarshal(body, &e) != nil {
		return false
	}
	for _, f := range Semantic400 {
		if strings.Contains(e.Message, f) {
			return true
		}
	}
	return false
}

func shorten(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// Handler returns h with every exchange checked by s: the answer is
// buffered, checked, and then written, so that a mismatch fails t before
// the client sees the answer.
func (s *Spec) Handler(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("openapitest: reading the request body: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := s.Check(r, body, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Errorf("openapitest: %v", err)
		}
		maps.Copy(w.Header(), rec.Header())
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// Transport returns rt (nil: http.DefaultTransport) with every exchange
// checked by s. An exchange that fails on the way (no answer) is not
// checked.
func (s *Spec) Transport(t testing.TB, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return roundTripper{s: s, t: t, next: rt}
}

type roundTripper struct {
	s    *Spec
	t    testing.TB
	next http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := rt.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	if err != nil {
		return resp, nil // the caller reads the error's effect: a short body
	}
	if err := rt.s.Check(req, body, resp.StatusCode, resp.Header, answer); err != nil {
		rt.t.Errorf("openapitest: %v", err)
	}
	return resp, nil
}
