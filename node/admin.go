package node

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/reload"
)

// tokenPoll is how often the admin token file is checked for a change.
const tokenPoll = 2 * time.Second

// maxTokenFileBytes bounds what is read of the admin token file.
const maxTokenFileBytes = 1 << 20

// tokenFile keeps tokens in step with the admin token file (--admin-token-file).
// load and its watcher must not run concurrently.
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

// changed reports whether the file differs from the one last loaded (or
// refused): a new modification time or size, or another file renamed over
// it. A file that cannot be read is an error.
func (f *tokenFile) changed() (bool, error) {
	fi, err := os.Stat(f.path)
	if err != nil {
		f.seen = nil
		return false, fmt.Errorf("%s: %w", f.path, err)
	}
	return f.seen == nil || !fi.ModTime().Equal(f.seen.ModTime()) || fi.Size() != f.seen.Size() || !os.SameFile(fi, f.seen), nil
}

// watcher returns a reload.Watcher of the file (cfg gives the Clock,
// Logger, Results and Poll): it loads the file whenever it changes. A file
// that does not parse is logged, once until the error changes, and the
// running tokens stay.
func (f *tokenFile) watcher(cfg reload.Config) (*reload.Watcher, error) {
	cfg.What, cfg.Paths = "admin token file", []string{f.path}
	cfg.Refused = "admin token file refused; the running tokens stay"
	cfg.Load = func(string) (bool, error) {
		if ok, err := f.changed(); !ok || err != nil {
			return false, err
		}
		if err := f.load(); err != nil {
			return false, err
		}
		return true, nil
	}
	return reload.New(cfg)
}
