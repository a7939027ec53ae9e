package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/ringlimit/ringlimit/internal/buildinfo"
)

// Subcommands: the node binary is also its own probe and flag checker, so
// that an image with nothing else in it (FROM scratch) can declare a health
// check and a deployment's flags can be checked before they are rolled out.
//
//	ringlimit-node probe [URL]          GET URL (default: /readyz on the address of
//	                                    $RINGLIMIT_HTTP, or 127.0.0.1:8080); exit 0 on 200
//	ringlimit-node validate-flags ARGS  check ARGS (and the RINGLIMIT_* environment) as
//	                                    the node would; exit 0, or 2 with the error
//	ringlimit-node version              print the version, commit and Go version
//	ringlimit-node help                 print the usage (as -h and --help do; help.go)

// version and commit are set at build time, -ldflags "-X main.version=v1.2.3
// -X main.commit=$(git rev-parse HEAD)"; otherwise they come from the
// binary's build information when it has them.
var version, commit string

// exitError carries a process exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// subcommand runs the subcommand args[0] names, and reports whether there
// was one.
func subcommand(args []string, getenv func(string) string, stdout, stderr io.Writer) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	if len(args) > 1 && slices.Contains([]string{"-h", "-help", "--help"}, args[1]) && args[0] != "validate-flags" {
		args = []string{"help"} // the help lists the subcommands
	}
	switch args[0] {
	case "probe":
		return true, probe(args[1:], getenv, stdout)
	case "validate-flags":
		if _, err := parseConfig(args[1:], getenv, stdout); err != nil {
			return true, &exitError{code: 2, err: err}
		}
		fmt.Fprintln(stdout, "flags ok")
		return true, nil
	case "help":
		parseConfig([]string{"--help"}, getenv, stdout) // prints the usage
		return true, nil
	case "version":
		v, rev, goVersion := buildInfo()
		fmt.Fprintf(stdout, "ringlimit-node %s (commit %s, %s)\n", v, rev, goVersion)
		return true, nil
	}
	return false, nil
}

// probe GETs args[0], or /readyz on $RINGLIMIT_HTTP's address, and fails
// unless the answer is 200. With $RINGLIMIT_API_TLS_CERT set it speaks
// HTTPS to the local node without verifying its certificate.
func probe(args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 1 {
		return fmt.Errorf("probe: at most one URL, got %q", args)
	}
	url := ""
	if len(args) == 1 {
		url = args[0]
	} else {
		addr := getenv("RINGLIMIT_HTTP")
		if addr == "" {
			addr = "127.0.0.1:8080"
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("probe: RINGLIMIT_HTTP=%q: %w", addr, err)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		scheme := "http"
		if getenv("RINGLIMIT_API_TLS_CERT") != "" {
			scheme = "https"
		}
		url = scheme + "://" + net.JoinHostPort(host, port) + "/readyz"
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the local node's own certificate names no loopback address
	}}
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: %s answered %s: %s", url, resp.Status, body)
	}
	fmt.Fprintf(stdout, "%s: %s", url, body)
	return nil
}

// buildInfo returns the version, commit and Go version of this build
// (buildinfo.Read).
func buildInfo() (v, rev, goVersion string) { return buildinfo.Read(version, commit) }

// nodeVersion is buildInfo's version.
func nodeVersion() string { v, _, _ := buildInfo(); return v }

// exitCode is the process exit status for run's error.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}
