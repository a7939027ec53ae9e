package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/forward"
	"github.com/ringlimit/ringlimit/policy"
)

// notifyOverride is the kind of the peer message that carries an override.
const notifyOverride = "policy.override"

// addOverride installs an override here and on every other member. The
// override keeps the ID it got here, so that a member that hears it twice
// installs it once.
func addOverride(ctx context.Context, pol *policy.Manager, router *forward.Router, o policy.Override) (policy.Override, error) {
	o, err := pol.AddOverride(o)
	if err != nil {
		return o, err
	}
	payload, err := json.Marshal(o)
	if err != nil {
		return o, err
	}
	if err := router.Notify(ctx, notifyOverride, payload); err != nil {
		return o, fmt.Errorf("override %s installed here but not on every member: %w", o.ID, err)
	}
	return o, nil
}

// receiveNotify applies a message from another member.
func receiveNotify(pol *policy.Manager, kind string, payload []byte) error {
	if kind != notifyOverride {
		return fmt.Errorf("unknown notification %q", kind)
	}
	if pol == nil {
		return fmt.Errorf("this node runs no policy")
	}
	var o policy.Override
	if err := json.Unmarshal(payload, &o); err != nil {
		return err
	}
	_, err := pol.AddOverride(o)
	return err
}

// sendOverrides gives members that just joined the overrides in force.
func sendOverrides(ctx context.Context, log *slog.Logger, pol *policy.Manager, router *forward.Router, names []string) {
	for _, o := range pol.Overrides() {
		payload, err := json.Marshal(o)
		if err != nil {
			continue
		}
		if err := router.Notify(ctx, notifyOverride, payload, names...); err != nil {
			log.Warn("override not sent to new members", "override", o.ID, "members", names, "err", err)
		}
	}
}

// runPolicy reloads the policy on SIGHUP and when its file changes, and
// expires overrides, until ctx ends.
func runPolicy(ctx context.Context, log *slog.Logger, pol *policy.Manager) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watched := make(chan struct{})
	defer func() { <-watched }()
	go func() {
		defer close(watched)
		if err := pol.Watch(ctx); err != nil {
			log.Error("policy file not watched; SIGHUP still reloads", "err", err)
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			pol.Reload("sighup")
		case <-tick.C:
			pol.Expire()
		}
	}
}

// slogWriter turns audit lines into log records when no --audit-log is set.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Info("audit", "entry", json.RawMessage(p[:len(p)-1]))
	return len(p), nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
