package client

import (
	"context"
	"log/slog"
	"testing"
)

// A nil Logger discards the outage lines, as in every ringlimit package:
// nothing goes to slog.Default() behind the program's back.
func TestNilLoggerDiscards(t *testing.T) {
	c, err := New(Config{Targets: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.cfg.Logger.Enabled(context.Background(), slog.LevelError) {
		t.Error("a Client given no Logger logs at error: it should discard")
	}
}
