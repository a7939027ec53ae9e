package discard_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/internal/discard"
)

func TestLoggerNilDiscards(t *testing.T) {
	l := discard.Logger(nil)
	if l == nil {
		t.Fatal("Logger(nil) = nil")
	}
	if l.Enabled(context.Background(), slog.LevelError) {
		t.Error("Logger(nil) is enabled at error: it should discard")
	}
}

func TestLoggerKeepsGiven(t *testing.T) {
	var buf bytes.Buffer
	given := slog.New(slog.NewTextHandler(&buf, nil))
	if got := discard.Logger(given); got != given {
		t.Fatalf("Logger(l) = %p, want l (%p)", got, given)
	}
}

func TestRegistererNilRegistersNothing(t *testing.T) {
	r := discard.Registerer(nil)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	for i := range 2 { // a duplicate is no error: nothing was kept
		if err := r.Register(c); err != nil {
			t.Fatalf("Register #%d: %v", i+1, err)
		}
	}
	r.MustRegister(c, c)
	if r.Unregister(c) {
		t.Error("Unregister = true, want false: nothing was registered")
	}
}

func TestRegistererKeepsGiven(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := discard.Registerer(reg)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "x"})
	if err := r.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "x_total" {
		t.Fatalf("the registry given gathers %v, want x_total", mfs)
	}
}
