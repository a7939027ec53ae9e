package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/clock"
	"github.com/ringlimit/ringlimit/policy"
)

//go:embed static
var static embed.FS

// Source gathers a Snapshot; ctx ends when the request does. It must be
// safe for concurrent use.
type Source func(ctx context.Context) Snapshot

// Config configures the status page.
type Config struct {
	// Source gathers what the page shows. Required.
	Source Source
	// AdminTokens and PrivateReads: with PrivateReads, GET /ui/api/status
	// requires an admin bearer token, as the other read-only endpoints
	// do (api.RequireAdmin). The page's own files stay open.
	AdminTokens  *api.Tokens
	PrivateReads bool
	// Timeout bounds how long one status call waits for Source (the other
	// nodes' answers). Zero means DefaultTimeout.
	Timeout time.Duration
	// MinInterval is the least time between two calls of Source: a status
	// call within it of the last gathering answers that gathering's
	// result, so that many open pages (or a client polling hard) cost the
	// other nodes no more than one Stats call each per MinInterval. Zero
	// means DefaultMinInterval; negative, none.
	MinInterval time.Duration
	// Clock times MinInterval. Required: a node passes its one clock to
	// every package.
	Clock clock.Clock
}

// DefaultMinInterval is Config.MinInterval's default.
const DefaultMinInterval = 250 * time.Millisecond

// DefaultTimeout is Config.Timeout's default: under the page's poll
// interval of 1 s, so that a node that does not answer delays nothing.
const DefaultTimeout = 800 * time.Millisecond

// Validate reports a Config that New would refuse.
func (c *Config) Validate() error {
	if c.Source == nil {
		return errors.New("ui: Source is required")
	}
	if c.Clock == nil {
		return errors.New("ui: Config.Clock is required")
	}
	if c.Timeout < 0 {
		return errors.New("ui: Timeout must not be negative")
	}
	return nil
}

// securityHeaders are set on every answer: the page may load and fetch
// only from the node that served it, and run no inline script or style.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
}

// Page is the HTTP handler of the status page: GET / (a redirect to
// /ui/), the page's files under /ui/ and GET /ui/api/status; other paths
// answer 404. It is safe for concurrent use.
type Page struct {
	mux *http.ServeMux
}

// ServeHTTP serves r with the security headers.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	p.mux.ServeHTTP(w, r)
}

// New validates cfg and returns the page.
func New(cfg Config) (*Page, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	if cfg.MinInterval == 0 {
		cfg.MinInterval = DefaultMinInterval
	}
	k := newRateKeeper()
	// last is the last gathering's answer, shared by the calls within
	// MinInterval of it; mu makes concurrent calls wait for one gathering.
	var (
		mu     sync.Mutex
		last   []byte
		lastAt clock.Instant
	)
	var status http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body := last
		if body == nil || cfg.Clock.Now().Sub(lastAt) >= cfg.MinInterval {
			// Not the caller's context: its answer may serve others.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), cfg.Timeout)
			st := k.build(cfg.Source(ctx))
			cancel()
			b, err := json.Marshal(&st)
			if err != nil {
				mu.Unlock()
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			body, last, lastAt = append(b, '\n'), append(b, '\n'), cfg.Clock.Now()
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(body)
	})
	if cfg.PrivateReads {
		status = api.RequireAdmin(cfg.AdminTokens, status)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(files)))
	mux.Handle("GET /ui/api/status", status)
	return &Page{mux: mux}, nil
}

// build merges a snapshot into the page's Status, with each node's rates.
func (k *rateKeeper) build(s Snapshot) Status {
	st := Status{Self: s.Cluster.Self, RingVersion: s.Cluster.RingVersion, Members: []Member{}, Ring: s.Ring,
		Replication: s.Cluster.Replication, Quorum: s.Cluster.Quorum, Policy: s.Policy}
	if st.Ring.Members == nil {
		st.Ring.Members = []api.RingMember{}
	}
	if st.Ring.Owners == nil {
		st.Ring.Owners = []int{}
	}
	if st.Policy != nil && st.Policy.Overrides == nil {
		p := *st.Policy
		p.Overrides = []policy.Override{}
		st.Policy = &p
	}
	stats := make(map[string]*NodeStats, len(s.Stats))
	for i := range s.Stats {
		stats[s.Stats[i].Name] = &s.Stats[i]
	}
	names := map[string]bool{}
	for _, m := range s.Cluster.Members {
		names[m.Name] = true
		mm := Member{Member: m, Self: m.Name == s.Cluster.Self, Stats: stats[m.Name]}
		if mm.Stats != nil {
			mm.Keys = mm.Stats.Keys
			mm.Rates = k.add(*mm.Stats)
		}
		st.Members = append(st.Members, mm)
	}
	k.forget(names)
	return st
}
