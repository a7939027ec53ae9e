package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/api"
)

// tokenPoll is how often the admin token file is checked for a change.
const tokenPoll = 2 * time.Second

// maxTokenFileBytes bounds what is read of the admin token file.
const maxTokenFileBytes = 1 << 20

// tokenFile keeps tokens in step with the admin token file (--admin-token-file).
// load and watch must not run concurrently.
type tokenFile struct {
	path   string
	tokens *api.Tokens
	log    *slog.Logger

	seen os.FileInfo // the file as last loaded (or refused)
}

// load reads and parses the file and, when it parses, replaces the tokens.
// A file that does not parse leaves the tokens as they were.
func (f *tokenFile) load() error {
	fh, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	f.seen = fi // what is read below, refused or not: not read again until it changes
	data, err := io.ReadAll(io.LimitReader(fh, maxTokenFileBytes+1))
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	if len(data) > maxTokenFileBytes {
		return fmt.Errorf("%s: longer than %d bytes", f.path, maxTokenFileBytes)
	}
	ts, err := api.ParseTokens(data)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	f.tokens.Set(ts)
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	f.log.Info("admin tokens loaded", "file", f.path, "names", names)
	return nil
}

// changed reports whether the file differs from the one last loaded: a
// new modification time or size, or another file renamed over it.
func (f *tokenFile) changed() bool {
	fi, err := os.Stat(f.path)
	if err != nil {
		if f.seen != nil {
			f.log.Error("admin token file unreadable; the running tokens stay", "file", f.path, "err", err)
			f.seen = nil
		}
		return false
	}
	return f.seen == nil || !fi.ModTime().Equal(f.seen.ModTime()) || fi.Size() != f.seen.Size() || !os.SameFile(fi, f.seen)
}

// watch reloads the file whenever it changes, checking every interval,
// until ctx ends. A file that does not parse is logged and the running
// tokens stay.
func (f *tokenFile) watch(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if f.changed() {
				if err := f.load(); err != nil {
					f.log.Error("admin token file refused; the running tokens stay", "err", err)
				}
			}
		}
	}
}
