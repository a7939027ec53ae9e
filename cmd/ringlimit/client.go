package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/api"
)

// defaultAddr is the node asked when neither --addr nor $RINGLIMIT_ADDR
// says.
const defaultAddr = "http://127.0.0.1:8080"

// maxAnswer bounds the body of an answer read from a node.
const maxAnswer = 64 << 20

// client calls one node's HTTP API. It is used by one command at a time.
type client struct {
	base    *url.URL // scheme, host and path prefix; no trailing slash
	token   string   // admin bearer token; "" sends none
	timeout time.Duration
	http    *http.Client
}

// newClient builds the client the global flags describe.
func (e *env) newClient() (*client, error) {
	base, err := parseAddr(e.g.addr)
	if err != nil {
		return nil, err
	}
	token, err := e.token()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a node is asked directly
	if e.g.ca != "" {
		pem, err := os.ReadFile(e.g.ca)
		if err != nil {
			return nil, usagef("--ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--ca %s: no PEM certificate in the file", e.g.ca)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if e.g.timeout <= 0 {
		return nil, usagef("--timeout: must be positive, got %v", e.g.timeout)
	}
	return &client{base: base, token: token, timeout: e.g.timeout, http: &http.Client{Transport: tr}}, nil
}

// close releases the client's idle connections.
func (c *client) close() { c.http.CloseIdleConnections() }

// parseAddr turns --addr into a base URL: "host:port" and ":port" mean
// http://, a URL keeps its scheme (http or https) and path prefix.
func parseAddr(addr string) (*url.URL, error) {
	if addr == "" {
		addr = defaultAddr
	}
	raw := addr
	if !strings.Contains(raw, "://") {
		if strings.HasPrefix(raw, ":") {
			raw = "127.0.0.1" + raw
		}
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usagef("--addr %q: want host:port or an http:// or https:// URL", addr)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// token returns the admin token: --token, else the first token of
// --token-file (a file api.ParseTokens reads: "name:token" or a bare token
// a line), else $RINGLIMIT_TOKEN, else "".
func (e *env) token() (string, error) {
	if e.g.token != "" && e.g.tokenFile != "" {
		return "", usagef("give --token or --token-file, not both")
	}
	if e.g.tokenFile != "" {
		data, err := os.ReadFile(e.g.tokenFile)
		if err != nil {
			return "", usagef("--token-file: %v", err)
		}
		toks, err := api.ParseTokens(data)
		if err != nil {
			return "", usagef("--token-file %s: %v", e.g.tokenFile, err)
		}
		return toks[0].Token, nil
	}
	if e.g.token != "" {
		return e.g.token, nil
	}
	return e.getenv("RINGLIMIT_TOKEN"), nil
}

// apiError is an answer the command did not expect: a 4xx or 5xx, with the
// API's {code, message} when the body held one.
type apiError struct {
	method, url string
	status      int
	code, msg   string
	body        []byte // the answer's body when it is the API's JSON error; else nil
}

func (e *apiError) Error() string {
	if e.code != "" {
		return fmt.Sprintf("%s %s: %d %s: %s", e.method, e.url, e.status, e.code, e.msg)
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.method, e.url, e.status, http.StatusText(e.status), e.msg)
}

// do sends method path?query with body (JSON-encoded, unless nil) and
// returns the answer's status and body. A status not in ok is an
// *apiError; a failure to talk to the node names its address.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any, ok ...int) (int, []byte, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, c.transportError(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, fmt.Errorf("reading the answer of %s %s: %w", method, u.Redacted(), c.transportError(err))
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return resp.StatusCode, data, nil
		}
	}
	ae := &apiError{method: method, url: u.Redacted(), status: resp.StatusCode}
	var er api.ErrorResponse
	if json.Unmarshal(data, &er) == nil && er.Code != "" {
		ae.code, ae.msg, ae.body = er.Code, er.Message, data
	} else {
		ae.msg = strings.TrimSpace(string(data[:min(len(data), 200)]))
		if ae.msg == "" {
			ae.msg = "(empty answer)"
		}
	}
	return resp.StatusCode, nil, ae
}

// transportError says which node could not be reached, and why, in words.
func (c *client) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach the node at %s: connection refused (is it running? set --addr or $RINGLIMIT_ADDR)", c.base.Redacted())
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("no answer from the node at %s within %v (--timeout)", c.base.Redacted(), c.timeout)
	}
	return fmt.Errorf("cannot reach the node at %s: %w", c.base.Redacted(), err)
}

// getJSON GETs path and decodes a 200 answer into out, returning the raw
// body too.
func (c *client) getJSON(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	_, data, err := c.do(ctx, http.MethodGet, path, query, nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return data, c.decode(path, data, out)
}

// decode decodes a node's answer to path into out.
func (c *client) decode(path string, data []byte, out any) error {
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the answer of %s%s is not the API's JSON: %v", c.base.Redacted(), path, err)
	}
	return nil
}
