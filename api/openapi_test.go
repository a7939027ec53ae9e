package api

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/internal/testonly/openapitest"
)

// specPath is the OpenAPI description of the HTTP API.
const specPath = "../docs/openapi.yaml"

// loadSpec loads it once for the whole test binary: every HTTP test checks
// its traffic against it (validated) and TestMain reports the counts.
var loadSpec = sync.OnceValues(func() (*openapitest.Spec, error) { return openapitest.Load(specPath) })

func openapiSpec(t testing.TB) *openapitest.Spec {
	t.Helper()
	s, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validated returns h with every request and answer checked against
// docs/openapi.yaml (see package openapitest): a mismatch fails t.
func validated(t testing.TB, h http.Handler) http.Handler {
	return openapiSpec(t).Handler(t, h)
}

// countPairs runs the tests and then, with -v, says how many exchanges
// the description checked.
type countPairs struct{ m *testing.M }

func (c countPairs) Run() int {
	code := c.m.Run()
	if s, err := loadSpec(); err == nil && testing.Verbose() {
		fmt.Printf("openapi: %v\n", s.Counts())
	}
	return code
}

// TestOpenAPIDocument: the description loads and validates as OpenAPI
// 3.0.3, every operation has an ID, and every answer has a description.
func TestOpenAPIDocument(t *testing.T) {
	doc := openapiSpec(t).Doc()
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi: %q, want 3.0.3", doc.OpenAPI)
	}
	seen := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				t.Errorf("%s %s: no operationId", method, path)
			} else if other, dup := seen[op.OperationID]; dup {
				t.Errorf("%s %s: operationId %q is also %s's", method, path, op.OperationID, other)
			}
			seen[op.OperationID] = method + " " + path
		}
	}
}

// anyMethod are the methods the description lists for a route registered
// without one (/v1/authz): every method OpenAPI 3.0 can describe but TRACE.
var anyMethod = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// TestOpenAPIRoutes: every pattern Handler registers on its mux is in the
// description, and the description has no operation the mux does not
// serve, so that an endpoint cannot be added or removed without its
// description.
func TestOpenAPIRoutes(t *testing.T) {
	fset := token.NewFileSet()
	registered := map[string]bool{} // "GET /v1/ring"
	// The API's routes, and the status page's (package ui), which the node
	// serves for the paths the API leaves to it.
	for _, file := range []string{"http.go", "../ui/ui.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool { return addRoute(t, fset, registered, n) })
	}
	if len(registered) < 10 {
		t.Fatalf("found only %d routes in http.go and ui.go: %v", len(registered), registered)
	}
	described := map[string]bool{}
	for path, item := range openapiSpec(t).Doc().Paths.Map() {
		for method := range item.Operations() {
			described[method+" "+path] = true
		}
	}
	for _, r := range slices.Sorted(maps.Keys(registered)) {
		if !described[r] {
			t.Errorf("http.go or ui.go serves %s, which docs/openapi.yaml does not describe", r)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(described)) {
		if !registered[r] {
			t.Errorf("docs/openapi.yaml describes %s, which neither http.go nor ui.go serves", r)
		}
	}
}

// failingChecker fails every check with err, or, when err is nil, waits
// for the request's deadline.
type failingChecker struct{ err error }

func (c failingChecker) Check(ctx context.Context, _ []forward.Check, _ []forward.Result) error {
	if c.err != nil {
		return c.err
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestHTTPCheckFailures: a check the checker cannot decide is 503
// UNAVAILABLE (owner unavailable, or no decision before CheckTimeout) and
// one that fails otherwise 500 INTERNAL, on POST /v1/check and /v1/authz
// alike, as docs/openapi.yaml describes them.
func TestHTTPCheckFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"owner unavailable", fmt.Errorf("forward: node-2: %w", forward.ErrUnavailable), http.StatusServiceUnavailable, CodeUnavailable},
		{"check timeout", nil, http.StatusServiceUnavailable, CodeUnavailable},
		{"internal", errors.New("forward: something broke"), http.StatusInternalServerError, CodeInternal},
	} {
		e, _ := newAuthzEnv(t)
		var err error
		cfg := Config{Checker: failingChecker{c.err}, Policy: e.api.policy, AddOverride: e.api.addOverride, RevokeOverride: e.api.revoke,
			CheckTimeout: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
		if e.api, err = New(cfg); err != nil {
			t.Fatal(err)
		}
		s := e.startHTTP(t)
		for _, r := range []httpResult{
			s.check(t, chk("k", "", `{"limit":5,"per":"1s"}`)),
			s.check(t, `{"user":"42"}`),
			authzCall{headers: []string{"X-Original-URI", "/items", "X-API-Key", "k"}}.result(validated(t, e.api.Handler(nil))),
		} {
			if m := decodeMap(t, r.body); r.status != c.status || m["code"] != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.name, r.status, r.body, c.status, c.code)
			}
		}
	}
}

// result is do's answer as an httpResult.
func (c authzCall) result(h http.Handler) httpResult {
	w := c.do(h)
	return httpResult{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
}

// addRoute adds the route of a mux.Handle or mux.HandleFunc call to
// registered, as "METHOD /path".
func addRoute(t *testing.T, fset *token.FileSet, registered map[string]bool, n ast.Node) bool {
	t.Helper()
	call, ok := n.(*ast.CallExpr)
	if !ok || len(call.Args) != 2 {
		return true
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
		return true
	}
	if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "mux" {
		return true
	}
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		t.Errorf("%v: a pattern that is not a string literal", fset.Position(call.Pos()))
		return true
	}
	pattern, _ := strconv.Unquote(lit.Value)
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	switch {
	case path == "/": // extra: whatever the caller serves
	case path == "/{$}": // the exact path /
		registered[method+" /"] = true
	case method == "":
		for _, m := range anyMethod {
			registered[m+" "+path] = true
		}
	default:
		registered[method+" "+path] = true
	}
	return true
}
