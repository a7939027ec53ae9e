package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/client"
)

// TestLeasesOnCluster: through a Client of three real nodes, a limit of 2
// in flight grants 2 leases (in_flight 1 and 2, 10s each) and refuses the
// third with a RetryAfter of 10s; Renew of the second for 20s answers
// 20s; Release of the first answers true, then false, and its Renew is
// ErrLeaseNotFound; then one more acquire is granted (in_flight 2).
func TestLeasesOnCluster(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var leases []client.Lease
	for i := range 3 {
		l, err := cl.Acquire(ctx, "export:acme", 2, 10*time.Second, "")
		if err != nil {
			t.Fatalf("acquire %d: %v", i+1, err)
		}
		leases = append(leases, l)
	}
	a, b, full := leases[0], leases[1], leases[2]
	if !a.Allowed || a.ID == "" || a.InFlight != 1 || a.Limit != 2 || a.ExpiresIn != 10*time.Second || !b.Allowed || b.InFlight != 2 {
		t.Fatalf("grants: %+v, %+v", a, b)
	}
	if full.Allowed || full.ID != "" || full.RetryAfter != 10*time.Second || full.InFlight != 2 {
		t.Fatalf("third acquire: %+v", full)
	}
	if r, err := cl.Renew(ctx, b.ID, 20*time.Second); err != nil || r.ExpiresIn != 20*time.Second || r.InFlight != 2 {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := cl.Release(ctx, a.ID, client.OutcomeOK, 50*time.Millisecond); ok != want || err != nil {
			t.Fatalf("release %d: %v, %v; want %v", i+1, ok, err, want)
		}
	}
	if _, err := cl.Renew(ctx, a.ID, 0); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("renew of a released lease: %v", err)
	}
	if l, err := cl.Acquire(ctx, "export:acme", 2, 0, ""); err != nil || !l.Allowed || l.InFlight != 2 || l.ExpiresIn != 30*time.Second {
		t.Fatalf("acquire after the release: %+v, %v", l, err)
	}
}

// TestConcurrencyMiddlewareOnCluster: with one slot per caller, a request
// that holds it makes a second one answer 429; once the first returns,
// its slot is released and a third is served.
func TestConcurrencyMiddlewareOnCluster(t *testing.T) {
	c := newCluster(t, 3, "")
	cl := newClient(t, client.Config{Targets: c.addrs(), Timeout: 5 * time.Second})
	mw, err := client.ConcurrencyMiddleware(client.ConcurrencyConfig{MiddlewareConfig: client.MiddlewareConfig{Client: cl}, InFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	started, unblock := make(chan struct{}, 1), make(chan struct{})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-unblock
		}
	}))
	served := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slow", nil))
		served <- rec.Code
	}()
	<-started
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/fast", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("second request with the slot held: %d %v", rec.Code, rec.Header())
	}
	close(unblock)
	if code := <-served; code != http.StatusOK {
		t.Fatalf("slow request: %d", code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/fast", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("third request after the release: %d %s", rec.Code, rec.Body)
	}
}
