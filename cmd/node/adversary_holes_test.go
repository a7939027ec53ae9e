package main

// The smaller holes of a rate limiter held against its own clients, tried
// on real node processes over real sockets: a browser page of another
// origin spending for its victim, a local process choosing its client IP
// through proxy headers, a peer connection outliving the CA it was made
// under, and answers that tell a caller without the admin token who owns
// its key and how the policy is named.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

// TestAdversaryHoles builds cmd/node once and runs each attack against
// nodes of it.
func TestAdversaryHoles(t *testing.T) {
	bin := buildNode(t)
	t.Run("CrossOriginSpendsNothing", func(t *testing.T) { testCrossOrigin(t, bin) })
	t.Run("ProxyHeadersNotBelievedByDefault", func(t *testing.T) { testTrustedProxies(t, bin) })
	t.Run("PrivateReadsHideOwnersAndTiers", func(t *testing.T) { testPrivateAnswers(t, bin) })
	t.Run("CARotationClosesOldPeerConnections", func(t *testing.T) { testCARotationCloses(t, bin) })
}

// rawPost sends POST url with body and the headers (name, value, ...), and
// returns the status and the answer, headers included.
func rawPost(t *testing.T, client *http.Client, url, body string, headers ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return sendRaw(t, client, req)
}

func sendRaw(t *testing.T, client *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	sb.Write(b)
	for k, v := range resp.Header {
		fmt.Fprintf(&sb, "%s: %s\n", k, strings.Join(v, ", "))
	}
	return resp.StatusCode, sb.String()
}

// A page on another origin POSTs a check for its victim's key as a
// browser lets any page do without a preflight (text/plain, a form): each
// is refused 403 CROSS_ORIGIN and spends nothing, so the key still has its
// whole limit when curl -d (a form Content-Type, no Origin) spends one.
func testCrossOrigin(t *testing.T, bin string) {
	h := newHarness(t)
	p := startSolo(t, bin, "holes-cors", "--cors-origins", "https://app.example")
	url := "http://" + p.http + "/v1/check"
	body := `{"key":"victim","limit":{"limit":5,"per":"1h"}}`
	for _, st := range []struct {
		name    string
		headers []string
	}{
		{"text/plain", []string{"Origin", "https://evil.example", "Content-Type", "text/plain;charset=UTF-8", "Sec-Fetch-Site", "cross-site"}},
		{"form", []string{"Origin", "https://evil.example", "Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "cross-site"}},
		{"multipart", []string{"Origin", "null", "Content-Type", "multipart/form-data; boundary=b"}},
	} {
		for range 3 {
			status, answer := rawPost(t, h.client, url, body, st.headers...)
			if status != http.StatusForbidden || !strings.Contains(answer, `"code":"CROSS_ORIGIN"`) {
				t.Fatalf("cross-origin %s POST: %d %s, want 403 CROSS_ORIGIN", st.name, status, answer)
			}
		}
	}
	// curl -d '{...}' URL, as curl sends it.
	status, answer := rawPost(t, h.client, url, body, "Content-Type", "application/x-www-form-urlencoded", "User-Agent", "curl/8.5.0", "Accept", "*/*")
	if status != http.StatusOK || !strings.Contains(answer, `"remaining":4,`) {
		t.Fatalf("curl -d after 9 cross-origin POSTs: %d %s, want 200 with remaining 4 (nothing spent before)", status, answer)
	}
	status, answer = rawPost(t, h.client, url, body, "Origin", "https://app.example", "Content-Type", "application/json")
	if status != http.StatusOK || !strings.Contains(answer, `"remaining":3,`) || !strings.Contains(answer, "Access-Control-Allow-Origin: https://app.example") {
		t.Fatalf("POST from the allowed origin: %d %s, want 200 with remaining 3 and Access-Control-Allow-Origin", status, answer)
	}
}

// A process on the node's machine sends /v1/authz a different X-Real-IP on
// every request to get a fresh per-IP bucket each time. By default no
// proxy is trusted: the key is the connection's address, 127.0.0.1, and
// exactly 3 (the anonymous tier) of 5 are admitted. With
// --trusted-proxies 127.0.0.1/32 the header is believed: 5 of 5, each IP
// with its own bucket.
func testTrustedProxies(t *testing.T, bin string) {
	h := newHarness(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writePolicy(t, pol, gatewayPolicy)
	for _, tc := range []struct {
		name     string
		flags    []string
		admitted int
	}{
		{"default", nil, 3},
		{"trusted", []string{"--trusted-proxies", "127.0.0.1/32"}, 5},
	} {
		p := startSolo(t, bin, "holes-xff-"+tc.name, append([]string{"--policy", pol}, tc.flags...)...)
		admitted := 0
		for i := range 5 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/v1/authz", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Original-URI", "/app")
			req.Header.Set("X-Real-IP", fmt.Sprintf("203.0.113.%d", 10+i))
			status, answer := sendRaw(t, h.client, req)
			cancel()
			switch status {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
			default:
				t.Fatalf("%s: request %d: %d %s", tc.name, i, status, answer)
			}
		}
		if admitted != tc.admitted {
			t.Errorf("%s: %d of 5 admitted with a new X-Real-IP each, want %d", tc.name, admitted, tc.admitted)
		}
	}
}

// With --private-reads, answers to a caller without the admin token, over
// HTTP, gRPC and /v1/authz, admitted or refused, name no owner, owner
// address, policy version or tier; with the token they do.
func testPrivateAnswers(t *testing.T, bin string) {
	h := newHarness(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	writePolicy(t, pol, gatewayPolicy)
	tokens := filepath.Join(dir, "admin.tokens")
	if err := os.WriteFile(tokens, []byte("oncall:"+testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "holes-private"
	p := startSolo(t, bin, name, "--policy", pol, "--private-reads", "--admin-token-file", tokens)
	leaks := func(answer string) []string {
		var found []string
		for _, s := range []string{name, "owner_addr", "policy_version", "gateway", "free", "anon", "tier:", "/login"} {
			if strings.Contains(answer, s) {
				found = append(found, s)
			}
		}
		return found
	}
	url := "http://" + p.http + "/v1/check"
	for i, want := range []int{200, 200, 200, 200, 200, 429} {
		status, answer := rawPost(t, h.client, url, `{"user":"u1"}`, "Content-Type", "application/json")
		if status != want || len(leaks(answer)) > 0 {
			t.Errorf("check %d without a token: %d, naming %q: %s", i, status, leaks(answer), answer)
		}
	}
	status, answer := rawPost(t, h.client, url, `{"user":"u2","cost":9}`)
	if status != http.StatusBadRequest || len(leaks(answer)) > 0 {
		t.Errorf("invalid check without a token: %d, naming %q: %s", status, leaks(answer), answer)
	}
	for i, want := range []int{200, 200, 429} {
		a, err := traefikAuth(h.client, p.http, "", "GET", "/login", "203.0.113.9")
		if err != nil {
			t.Fatal(err)
		}
		if got := leaks(a.body + fmt.Sprint(a.header)); a.status != want || len(got) > 0 {
			t.Errorf("authz %d without a token: %d, naming %q: %s %v", i, a.status, got, a.body, a.header)
		}
	}
	status, answer = rawPost(t, h.client, url, `{"user":"u1"}`, "Authorization", "Bearer "+testAdminToken)
	if status != http.StatusTooManyRequests || !strings.Contains(answer, `"owner":"`+name+`"`) || !strings.Contains(answer, `"policy_version":"gateway`) ||
		!strings.Contains(answer, `"scope":"tier:free"`) {
		t.Errorf("check with the token: %d %s, want 429 naming the owner, the version and tier:free", status, answer)
	}

	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimiterClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &pb.CheckRequest{Checks: []*pb.Check{
		{Request: &pb.PolicyRequest{User: "u3"}},
		{Key: "inline", Limit: &pb.Limit{Limit: 5, PerMs: 60_000}},
	}}
	resp, err := c.Check(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range resp.GetDecisions() {
		if d.GetOwner() != "" || d.GetOwnerAddr() != "" || d.GetPolicyVersion() != "" || strings.Contains(d.GetScope(), ":") {
			t.Errorf("gRPC decision %d without a token: %v, want no owner, address, version or scope name", i, d)
		}
	}
	resp, err = c.Check(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+testAdminToken), req)
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetDecisions()[1]; d.GetOwner() != name || d.GetOwnerAddr() != p.grpc {
		t.Errorf("gRPC decision with the token: %v, want owner %s at %s", d, name, p.grpc)
	}
}

// A peer connection made with a certificate of the old CA stays open until
// the node drops that CA; then the node closes it, at its next reload
// (every 2 s) and 3 s later (peerRecheckDelay), and says so in its log and
// metrics, instead of serving it for as long as the client keeps it.
func testCARotationCloses(t *testing.T, bin string) {
	h := newHarness(t)
	dir := t.TempDir()
	old := testkit.NewPKI(t, dir, "prod")
	const name = "holes-tls"
	cert, key := old.Issue(name, name)
	ca := filepath.Join(dir, "prod-ca.pem")
	p := startSolo(t, bin, name, "--tls-ca", ca, "--tls-cert", cert, "--tls-key", key)

	// A client of the old CA, as a peer of the old days would hold.
	conn, err := grpc.NewClient(p.peer, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{old.KeyPair("node-2")}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	waitState := func(what string, timeout time.Duration, done func(connectivity.State) bool) {
		t.Helper()
		poll(t, timeout, what, func() (bool, string) {
			s := conn.GetState()
			return done(s), s.String()
		})
	}
	waitState("the old CA's connection open", 10*time.Second, func(s connectivity.State) bool { return s == connectivity.Ready })

	reloads := func() int { return len(p.logs.Records("certificates reloaded")) }
	step := func(what string, write func()) {
		t.Helper()
		before := reloads()
		write()
		poll(t, 15*time.Second, what, func() (bool, string) { return reloads() > before, fmt.Sprintf("%d reloads", reloads()-before) })
	}
	next := testkit.NewPKI(t, dir, "next")
	step("both CAs trusted", func() { old.Write("prod-ca.pem", append(old.CA.CertPEM(), next.CA.CertPEM()...)) })
	step("a certificate of the new CA", func() { next.Issue(name, name) })
	if s := conn.GetState(); s != connectivity.Ready {
		t.Fatalf("the old CA's connection is %v while the old CA is still trusted, want Ready", s)
	}
	dropped := time.Now()
	step("only the new CA", func() { old.Write("prod-ca.pem", next.CA.CertPEM()) })
	waitState("the old CA's connection closed", 20*time.Second, func(s connectivity.State) bool { return s != connectivity.Ready })
	t.Logf("the connection made under the old CA closed %v after the CA file dropped it", time.Since(dropped).Round(time.Millisecond))
	// The node closes the connection before it logs and counts the close, so
	// the client can see it closed first.
	poll(t, 10*time.Second, "a log line saying the connection was closed", func() (bool, string) {
		n := len(p.logs.Records("peer connections closed: their certificate no longer verifies against --tls-ca"))
		return n > 0, fmt.Sprintf("%d lines", n)
	})
	if got := h.metric(p.http, "ringlimit_peer_connections_closed_total", ""); got < 1 {
		t.Errorf("ringlimit_peer_connections_closed_total = %v, want at least 1", got)
	}
}
