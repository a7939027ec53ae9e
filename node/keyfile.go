package node

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/cluster"
	"github.com/ringlimit/ringlimit/internal/reload"
)

// keyFilePoll is how often the --gossip-key-file is re-read.
const keyFilePoll = 2 * time.Second

// parseKeys reads a gossip key file: one base64 key (standard encoding) per
// line, the first the primary; blank lines and lines starting with # are
// skipped. Each key is 16, 24 or 32 bytes; at least one is required.
func parseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: not base64: %w", i+1, err)
		}
		if l := len(k); l != 16 && l != 24 && l != 32 {
			return nil, fmt.Errorf("line %d: key of %d bytes, want 16, 24 or 32", i+1, l)
		}
		if slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }) {
			return nil, fmt.Errorf("line %d: key listed twice", i+1)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no key in the file")
	}
	return keys, nil
}

// readKeyFile reads and parses the key file at path.
func readKeyFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseKeys(data)
}

// fingerprints names keys in logs without revealing them: the first 8 hex
// digits of each key's SHA-256.
func fingerprints(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		sum := sha256.Sum256(k)
		out[i] = hex.EncodeToString(sum[:4])
	}
	return out
}

// keyFileWatcher returns a reload.Watcher of the key file at path (cfg
// gives the Clock, Logger, Results and Poll): when the file's content
// changed and lists other keys than c's keyring (or another primary), it
// makes c's keyring exactly those keys (cluster.SetKeys: add, switch
// primary, remove). A file that cannot be read or parsed is refused, and
// logged once until the error changes: the running keyring stays.
func keyFileWatcher(cfg reload.Config, path string, c *cluster.Cluster) (*reload.Watcher, error) {
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	var last []byte // the content last applied
	cfg.What, cfg.Paths = "gossip key file", []string{path}
	cfg.Refused = "gossip key file ignored; keyring unchanged"
	cfg.RefusedAttrs = func() []any { return []any{"path", path} }
	cfg.Load = func(string) (bool, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		if bytes.Equal(data, last) {
			return false, nil
		}
		keys, err := parseKeys(data)
		if err != nil {
			return false, err
		}
		if slices.EqualFunc(keys, c.Keys(), bytes.Equal) {
			last = data
			return false, nil
		}
		before := fingerprints(c.Keys())
		if err := c.SetKeys(keys); err != nil {
			return false, fmt.Errorf("gossip keyring not fully updated (keys %v): %w", fingerprints(c.Keys()), err)
		}
		last = data
		log.Info("gossip keyring updated", "path", path, "before", before, "keys", fingerprints(keys))
		return true, nil
	}
	return reload.New(cfg)
}

// printNewKey writes a new random gossip key (32 bytes, base64) and a
// newline to w: a line for --gossip-key-file.
func printNewKey(w io.Writer) error {
	k, err := cluster.NewKey()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, base64.StdEncoding.EncodeToString(k))
	return err
}
