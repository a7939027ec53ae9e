package node

import (
	"bytes"
	"context"
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

// watchKeyFile re-reads the key file at path every interval until ctx ends,
// and when its content changed and lists other keys than c's keyring (or
// another primary), makes c's keyring exactly those keys (cluster.SetKeys:
// add, switch primary, remove). A file that cannot be read or parsed is
// logged once per change and ignored: the running keyring stays.
func watchKeyFile(ctx context.Context, log *slog.Logger, path string, interval time.Duration, c *cluster.Cluster) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last []byte
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		data, err := os.ReadFile(path)
		if err != nil {
			if err.Error() != lastErr {
				log.Error("gossip key file not read; keyring unchanged", "path", path, "err", err)
				lastErr = err.Error()
			}
			continue
		}
		lastErr = ""
		if bytes.Equal(data, last) {
			continue
		}
		last = data
		keys, err := parseKeys(data)
		if err != nil {
			log.Error("gossip key file ignored; keyring unchanged", "path", path, "err", err)
			continue
		}
		if slices.EqualFunc(keys, c.Keys(), bytes.Equal) {
			continue
		}
		before := fingerprints(c.Keys())
		if err := c.SetKeys(keys); err != nil {
			log.Error("gossip keyring not fully updated", "path", path, "err", err, "keys", fingerprints(c.Keys()))
			continue
		}
		log.Info("gossip keyring updated", "path", path, "before", before, "keys", fingerprints(keys))
	}
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
