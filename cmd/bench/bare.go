package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/ratelimitheader"
)

// The bare HTTP server (--serve-bare-http) is the floor under the node's
// HTTP surfaces: what net/http alone costs for the same requests. It does
// the HTTP work a node does for them (read and decode the same JSON body
// of POST /v1/check, or read X-API-Key on /v1/authz; write the same
// rate-limit headers through the same package and a decision) and decides
// nothing: every answer is a fixed 200.

// bareCheckRequest has the fields and JSON names of api.CheckRequest
// (TestBareCheckRequestMatchesAPI keeps them in step), so that decoding
// it costs what decoding the node's does.
type bareCheckRequest struct {
	Key   string     `json:"key,omitempty"`
	Cost  *int64     `json:"cost,omitempty"`
	Limit *bareLimit `json:"limit,omitempty"`

	Policy string `json:"policy,omitempty"`
	APIKey string `json:"api_key,omitempty"`
	User   string `json:"user,omitempty"`
	IP     string `json:"ip,omitempty"`
	Route  string `json:"route,omitempty"`
	Tier   string `json:"tier,omitempty"`

	// Decoded and ignored, as the node's: the bare server answers the
	// same fixed decision to a reserve or a peek.
	Reserve    bool   `json:"reserve,omitempty"`
	ReserveTTL string `json:"reserve_ttl,omitempty"`
	Peek       bool   `json:"peek,omitempty"`
}

// bareLimit is api.LimitJSON's shape.
type bareLimit struct {
	Algorithm   string `json:"algorithm,omitempty"`
	Limit       int64  `json:"limit"`
	Per         string `json:"per"`
	Burst       int64  `json:"burst,omitempty"`
	FailureMode string `json:"failure_mode,omitempty"`
	Lease       bool   `json:"lease,omitempty"`
	Replication string `json:"replication,omitempty"`
	Calendar    string `json:"calendar,omitempty"`
	Timezone    string `json:"timezone,omitempty"`
	WeekStart   string `json:"week_start,omitempty"`
}

// bareMaxBody is api.MaxBodyBytes: the bound on a request body.
const bareMaxBody = 64 << 10

// The fixed answers. /v1/check answers what a node answers an inline check
// of bench's default limit (10⁹ per second) that admits; /v1/authz what a
// node running scripts/bench-policy.yaml answers (its one tier, 10⁹ per
// second), headers and body.
var (
	bareCheckDecision = ratelimitheader.Decision{Allowed: true, Scope: "inline", Limit: 1_000_000_000,
		Window: time.Second, Remaining: 999_999_999, Reset: time.Millisecond}
	bareCheckBody = []byte(`{"allowed":true,"limit":1000000000,"remaining":999999999,"retry_after_ms":0,` +
		`"reset_after_ms":1,"delay_ms":0,"scope":"inline","owner":"bare"}` + "\n")
	bareAuthzDecision = ratelimitheader.Decision{Allowed: true, Scope: "tier:bench", Limit: 1_000_000_000,
		Window: time.Second, Remaining: 999_999_999, Reset: time.Millisecond}
	bareAuthzBody = []byte(`{"allowed":true,"limit":1000000000,"remaining":999999999,"retry_after_ms":0,` +
		`"reset_after_ms":1,"delay_ms":0,"scope":"tier:bench","owner":"bare","policy_version":"bench"}` + "\n")
)

// bareHandler serves POST /v1/check and /v1/authz (any method).
func bareHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req bareCheckRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, bareMaxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			bareError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			bareError(w, http.StatusBadRequest, "body: more than one JSON value")
			return
		}
		if req.Key == "" || req.Limit == nil {
			bareError(w, http.StatusBadRequest, "key, limit: required")
			return
		}
		ratelimitheader.Write(w.Header(), &bareCheckDecision)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(bareCheckBody)
	})
	mux.HandleFunc("/v1/authz", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") == "" || r.Header.Get("X-Original-URI") == "" {
			bareError(w, http.StatusBadRequest, "X-API-Key, X-Original-URI: required")
			return
		}
		ratelimitheader.Write(w.Header(), &bareAuthzDecision)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(bareAuthzBody)
	})
	return mux
}

func bareError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"code": "INVALID_ARGUMENT", "message": msg})
}

// serveBareHTTP serves bareHandler on addr until ctx ends, in its own
// process so that its CPU can be read from /proc like a node's.
func serveBareHTTP(ctx context.Context, addr string, log io.Writer) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "bench: serving bare HTTP /v1/check and /v1/authz on %s (pid %d)\n", lis.Addr(), os.Getpid())
	return serveBareHTTPOn(ctx, lis)
}

// serveBareHTTPOn serves bareHandler on lis until ctx ends, with the
// timeouts and header bound of a node's HTTP server (its defaults).
func serveBareHTTPOn(ctx context.Context, lis net.Listener) error {
	s := &http.Server{
		Handler:           bareHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.Close()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
