// Command devcerts makes the certificates a local ringlimit cluster needs for
// mutual TLS, with Go code and no openssl:
//
//	devcerts -dir D -nodes node-1,node-2,node-3 [-ip 127.0.0.1] [-days 30] [-renew]
//
// It writes D/ca.pem and D/ca-key.pem, and for each node D/<node>.pem and
// D/<node>-key.pem: a certificate with the node name as common name and DNS
// name, the -ip addresses as IP addresses, usable as both TLS server and
// client. Keys are written with mode 0600, certificates 0644.
//
// An existing CA (both files present) is loaded and kept, so adding a node or
// re-issuing one uses the same CA. An existing node certificate is kept
// unless -renew is given, which issues a new key and certificate (with a new
// serial) for every listed node: a rotation.
//
// The exit status is 2 on bad flags, 1 on any other error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit/internal/devca"
)

const day = 24 * time.Hour

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is everything devcerts reads from its flags.
type config struct {
	dir    string
	nodes  []string
	ips    []net.IP
	days   int
	caDays int
	renew  bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("devcerts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	var nodes, ips string
	fs.StringVar(&c.dir, "dir", "", "directory to write the certificates and keys to (required)")
	fs.StringVar(&nodes, "nodes", "", "comma-separated node names, e.g. node-1,node-2,node-3 (required)")
	fs.StringVar(&ips, "ip", "127.0.0.1", "comma-separated IP addresses put in every node certificate; empty for none")
	fs.IntVar(&c.days, "days", 30, "validity of node certificates, in days")
	fs.IntVar(&c.caDays, "ca-days", 365, "validity of a newly made CA, in days")
	fs.BoolVar(&c.renew, "renew", false, "re-issue the certificates of the listed nodes even if present")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.dir == "" {
		return c, errors.New("-dir is required")
	}
	if nodes == "" {
		return c, errors.New("-nodes is required")
	}
	seen := map[string]bool{}
	for _, n := range strings.Split(nodes, ",") {
		n = strings.TrimSpace(n)
		if err := checkNodeName(n); err != nil {
			return c, err
		}
		if n == "ca" {
			return c, errors.New(`-nodes: "ca" is reserved for the CA files`)
		}
		if seen[n] {
			return c, fmt.Errorf("-nodes: %q listed twice", n)
		}
		seen[n] = true
		c.nodes = append(c.nodes, n)
	}
	if ips != "" {
		for _, s := range strings.Split(ips, ",") {
			ip := net.ParseIP(strings.TrimSpace(s))
			if ip == nil {
				return c, fmt.Errorf("-ip: %q is not an IP address", s)
			}
			c.ips = append(c.ips, ip)
		}
	}
	if c.days < 1 {
		return c, fmt.Errorf("-days must be ≥ 1, got %d", c.days)
	}
	if c.caDays < 1 {
		return c, fmt.Errorf("-ca-days must be ≥ 1, got %d", c.caDays)
	}
	return c, nil
}

// checkNodeName accepts what is both a DNS name and a safe file name:
// lowercase letters, digits, '-' and '.', not starting or ending with '-' or '.'.
func checkNodeName(n string) error {
	if n == "" {
		return errors.New("-nodes: empty node name")
	}
	if len(n) > 253 {
		return fmt.Errorf("-nodes: %q is longer than 253 characters", n)
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("-nodes: %q: only lowercase letters, digits, '-' and '.' are allowed", n)
		}
	}
	if strings.Trim(n, "-.") != n || strings.Contains(n, "..") {
		return fmt.Errorf("-nodes: %q must not start or end with '-' or '.', nor contain \"..\"", n)
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "devcerts:", err)
		}
		return 2
	}
	if err := generate(c, stdout); err != nil {
		fmt.Fprintln(stderr, "devcerts:", err)
		return 1
	}
	return 0
}

func generate(c config, stdout io.Writer) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	ca, err := loadOrMakeCA(c, stdout)
	if err != nil {
		return err
	}
	for _, n := range c.nodes {
		certPath := filepath.Join(c.dir, n+".pem")
		keyPath := filepath.Join(c.dir, n+"-key.pem")
		if !c.renew {
			certOK, keyOK := exists(certPath), exists(keyPath)
			if certOK && keyOK {
				fmt.Fprintf(stdout, "kept %s\n", certPath)
				continue
			}
			if certOK != keyOK {
				return fmt.Errorf("%s: only one of %s and %s exists; use -renew to re-issue", n, certPath, keyPath)
			}
		}
		certPEM, keyPEM, err := ca.Issue(n, []string{n}, c.ips, time.Duration(c.days)*day)
		if err != nil {
			return err
		}
		// Key first: a cert on disk always has its key next to it.
		if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
			return err
		}
		if err := writeFile(certPath, certPEM, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s and %s\n", certPath, keyPath)
	}
	return nil
}

func loadOrMakeCA(c config, stdout io.Writer) (*devca.CA, error) {
	certPath := filepath.Join(c.dir, "ca.pem")
	keyPath := filepath.Join(c.dir, "ca-key.pem")
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := os.ReadFile(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := devca.Load(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("load %s and %s: %w", certPath, keyPath, err)
		}
		fmt.Fprintf(stdout, "kept CA %s\n", certPath)
		return ca, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		// Make a new one below.
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, certErr
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, keyErr
	default:
		return nil, fmt.Errorf("only one of %s and %s exists; remove it or restore the other", certPath, keyPath)
	}
	ca, err := devca.NewCA("ringlimit dev CA", time.Duration(c.caDays)*day)
	if err != nil {
		return nil, err
	}
	if err := writeFile(keyPath, ca.KeyPEM(), 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(certPath, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "wrote CA %s and %s\n", certPath, keyPath)
	return ca, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writeFile replaces path atomically with data and mode perm: it writes a
// temporary file in the same directory (created 0600, so a key is never
// readable by others, even briefly), sets perm and renames it over path.
func writeFile(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err = f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
