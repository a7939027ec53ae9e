package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ringlimit/ringlimit/api"
	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	"github.com/ringlimit/ringlimit/policy"
)

// TestCheck: an inline limit of 3 a minute, checked through the three
// nodes in turn, admits exactly 3 (remaining 2, 1, 0; exit 0) and refuses
// the next two (exit 1); every answer names the owner /v1/owner names.
func TestCheck(t *testing.T) {
	needCluster(t)
	key := fmt.Sprintf("cli:check:%d", time.Now().UnixNano())
	var o api.OwnerResponse
	if err := getJSON("http://"+cluster.nodes[0].http+"/v1/owner?key="+url.QueryEscape(key), &o); err != nil {
		t.Fatal(err)
	}
	const n = 3
	for i := range n + 2 {
		r := at(t, i%3, "check", key, "--limit", "3", "--per", "1m")
		allowed := i < n
		wantCode, retry := 0, ""
		if !allowed {
			wantCode, retry = 1, `retry after  \d+(\.\d+)?s\n`
		}
		want := fmt.Sprintf(`^allowed      %v\nlimit        3\nremaining    %d\n%sreset after  \d+(\.\d+)?s\nscope        inline\nowner        %s\n$`,
			allowed, max(n-1-i, 0), retry, regexp.QuoteMeta(o.Owner))
		if r.code != wantCode || !regexp.MustCompile(want).MatchString(r.stdout) || r.stderr != "" {
			t.Fatalf("check %d via %s: exit %d, stdout:\n%s\nstderr: %s\nwant exit %d, stdout matching %s", i, cluster.nodes[i%3].name, r.code, r.stdout, r.stderr, wantCode, want)
		}
	}
	// --json: the API's body; exit 1 still.
	r := at(t, 1, "check", "--json", key, "--limit", "3", "--per", "1m")
	var resp api.CheckResponse
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || r.code != 1 {
		t.Fatalf("--json: exit %d, %q: %v", r.code, r.stdout, err)
	}
	if resp.Allowed || resp.Remaining != 0 || resp.Limit != 3 || resp.Code != api.CodeRateLimited || resp.Owner != o.Owner || resp.RetryAfterMs <= 0 {
		t.Fatalf("--json: %+v", resp)
	}
	// Another key with cost and burst: the flags reach the node.
	r = at(t, 0, "check", "--json", key+":b", "--limit", "1", "--per", "1h", "--burst", "10", "--cost", "4")
	resp = api.CheckResponse{}
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || r.code != 0 || resp.Remaining != 6 {
		t.Fatalf("burst 10 cost 4: exit %d, %s %v, want remaining 6", r.code, r.stdout, err)
	}
}

// TestCheckPolicy: the policy form resolves the running policy
// (examples/policy.yaml): a user on the free tier, a refused route limit.
func TestCheckPolicy(t *testing.T) {
	needCluster(t)
	user := fmt.Sprintf("cli-%d", time.Now().UnixNano())
	r := at(t, 0, "check", "--json", "--user", user)
	var resp api.CheckResponse
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || r.code != 0 || !resp.Allowed || resp.Scope != "tier:free" || resp.PolicyVersion == "" {
		t.Fatalf("policy check: exit %d, %s %v", r.code, r.stdout, err)
	}
	// /login: 5 a minute by IP.
	ip := fmt.Sprintf("192.0.2.%d", time.Now().UnixNano()%250+1)
	for i := range 6 {
		r := at(t, i%3, "check", "--ip", ip, "--route", "/login")
		if wantCode := min(i/5, 1); r.code != wantCode {
			t.Fatalf("login %d: exit %d want %d\n%s%s", i, r.code, wantCode, r.stdout, r.stderr)
		}
		if i == 5 && !strings.Contains(r.stdout, "scope        route:/login\n") {
			t.Fatalf("login refused: %s", r.stdout)
		}
	}
	// Both forms at once is a usage error.
	at(t, 0, "check", "k", "--user", "u").want(t, 2, "",
		"ringlimit: check: give KEY with --limit and --per, or policy flags (--policy, --api-key, --user, --ip, --route, --tier), not both\nrun 'ringlimit help' for usage\n")
}

// TestOwner: owner KEY prints what GET /v1/owner answers.
func TestOwner(t *testing.T) {
	needCluster(t)
	for i := range 3 {
		key := fmt.Sprintf("user:%d", i)
		var o api.OwnerResponse
		if err := getJSON("http://"+cluster.nodes[i].http+"/v1/owner?key="+url.QueryEscape(key), &o); err != nil {
			t.Fatal(err)
		}
		at(t, i, "owner", key).want(t, 0, fmt.Sprintf("key           %s\nowner         %s\nring version  %d\n", key, o.Owner, o.RingVersion), "")
		r := at(t, i, "--json", "owner", key)
		var got api.OwnerResponse
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got != o {
			t.Fatalf("--json: %q %v, want %+v", r.stdout, err, o)
		}
	}
}

// TestStatus: status lists the three members alive on the ring with their
// addresses and shares, whose partitions sum to 1021; --json decodes into
// the API's types.
func TestStatus(t *testing.T) {
	needCluster(t)
	head := regexp.MustCompile(`^node-2 \(http://` + regexp.QuoteMeta(cluster.nodes[1].http) + `\) sees 3 members, 3 alive; ring version \d+, 1021 partitions$`)
	// On a loaded machine gossip may hold a member suspect for a moment
	// (it refutes it): ask again until node-2 sees all three alive.
	var r result
	var lines []string
	testkit.Poll(20*time.Second, func() bool {
		r = at(t, 1, "status")
		lines = strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		return r.code == 0 && head.MatchString(lines[0])
	})
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(lines), r.stdout)
	}
	if !head.MatchString(lines[0]) {
		t.Fatalf("first line %q, want %s", lines[0], head)
	}
	if !regexp.MustCompile(`^NAME +STATE +ON RING +HTTP +GRPC +PEER +GOSSIP +KEYS +PARTITIONS +SHARE$`).MatchString(lines[1]) {
		t.Fatalf("header %q", lines[1])
	}
	sum := 0
	for i, p := range cluster.nodes {
		self := ""
		if i == 1 {
			self = " \\*"
		}
		re := regexp.MustCompile(fmt.Sprintf(`^%s%s +alive +yes +%s +%s +%s +%s +\d+ +(\d+) +(\d+\.\d)%%$`, p.name, self,
			regexp.QuoteMeta(p.http), regexp.QuoteMeta(p.grpc), regexp.QuoteMeta(p.peer), regexp.QuoteMeta(p.gossip)))
		m := re.FindStringSubmatch(lines[2+i])
		if m == nil {
			t.Fatalf("row %q, want %s", lines[2+i], re)
		}
		var parts int
		var pct float64
		fmt.Sscan(m[1], &parts)
		fmt.Sscan(m[2], &pct)
		if want := 100 * float64(parts) / 1021; pct < want-0.051 || pct > want+0.051 {
			t.Fatalf("%s: %d partitions shown as %.1f%%", p.name, parts, pct)
		}
		sum += parts
	}
	if sum != 1021 {
		t.Fatalf("partitions sum to %d, want 1021:\n%s", sum, r.stdout)
	}
	if lines[5] != "quorum: majority (cluster size 3)" || !regexp.MustCompile(`^replication: factor 1, lag \d+\.\d ms, \d+ pending, \d+ replicas held, successor for 0 keys$`).MatchString(lines[6]) {
		t.Fatalf("summary:\n%s\n%s", lines[5], lines[6])
	}

	r = at(t, 0, "status", "--json")
	var st Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("--json: exit %d: %v\n%s", r.code, err, r.stdout)
	}
	if st.Cluster.Self != "node-1" || len(st.Cluster.Members) != 3 || st.Ring == nil || len(st.Ring.Members) != 3 || len(st.Ring.Owners) != 1021 || st.Node != "http://"+cluster.nodes[0].http {
		t.Fatalf("--json: %+v", st)
	}
	sum = 0
	for i, m := range st.Cluster.Members {
		if m.State != "alive" || !m.OnRing || m.HTTP != cluster.nodes[i].http {
			t.Fatalf("member %d: %+v", i, m)
		}
		sum += st.Ring.Members[i].Partitions
	}
	if sum != 1021 {
		t.Fatalf("--json partitions sum to %d", sum)
	}
}

// TestOverride: add (with the admin token) → list shows it, on every node
// once gossiped, and a check of that user is decided by it → revoke → list
// empty. Without a token: exit 4 and the node's 401; a wrong one 403;
// revoking an unknown ID 404.
func TestOverride(t *testing.T) {
	needCluster(t)
	user := fmt.Sprintf("cli-ovr-%d", time.Now().UnixNano())
	tok := "--token-file=" + cluster.tokenFile
	addr := cluster.nodes[0].http

	r := at(t, 0, "override", "add", "--user", user, "--tier", "enterprise", "--reason", "incident 7", "--expires-in", "30m")
	r.want(t, 4, "", fmt.Sprintf("ringlimit: POST http://%s/v1/overrides: 401 UNAUTHENTICATED: an admin token is required: Authorization: Bearer <token>\n", addr))
	r = cli(t, map[string]string{"RINGLIMIT_ADDR": addr, "RINGLIMIT_TOKEN": "not-the-admin-token-at-all"},
		"override", "add", "--user", user, "--tier", "enterprise", "--reason", "incident 7", "--expires-in", "30m")
	r.want(t, 4, "", fmt.Sprintf("ringlimit: POST http://%s/v1/overrides: 403 PERMISSION_DENIED: the bearer token is not an admin token of this node\n", addr))

	r = at(t, 0, tok, "--json", "override", "add", "--user", user, "--tier", "enterprise", "--reason", "incident 7", "--expires-in", "30m")
	var o policy.Override
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || r.code != 0 {
		t.Fatalf("add: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if o.User != user || o.Tier != "enterprise" || o.Actor != "cli-test" || o.Reason != "incident 7" || o.Policy != "api" || !strings.HasPrefix(o.ID, "ovr-") {
		t.Fatalf("added %+v", o)
	}
	row := fmt.Sprintf("%s  user %s  api     tier enterprise  %s  cli-test  incident 7\n", o.ID, user, o.Expires.UTC().Format(time.RFC3339))
	for i := range 3 { // gossiped to every node
		testkit.WaitFor(t, 5*time.Second, "the override listed by "+cluster.nodes[i].name, func() error {
			r := at(t, i, "override", "list")
			if !strings.HasSuffix(r.stdout, row) || !strings.HasPrefix(r.stdout, "ID ") || r.code != 0 {
				return fmt.Errorf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
			}
			return nil
		})
	}
	r = at(t, 2, "override", "list", "--json")
	var list []policy.Override
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].ID != o.ID {
		t.Fatalf("list --json: %v %s", err, r.stdout)
	}
	r = at(t, 1, "check", "--user", user)
	if r.code != 0 || !strings.Contains(r.stdout, "scope        override:tier:enterprise\n") {
		t.Fatalf("check under the override: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	at(t, 0, tok, "override", "revoke", "ovr-nope").want(t, 4, "",
		fmt.Sprintf("ringlimit: DELETE http://%s/v1/overrides/ovr-nope: 404 NOT_FOUND: no override in force has id \"ovr-nope\"\n", addr))
	at(t, 0, "override", "revoke", o.ID).want(t, 4, "",
		fmt.Sprintf("ringlimit: DELETE http://%s/v1/overrides/%s: 401 UNAUTHENTICATED: an admin token is required: Authorization: Bearer <token>\n", addr, o.ID))
	at(t, 0, tok, "override", "revoke", o.ID).want(t, 0, fmt.Sprintf("revoked %s: user %s had tier enterprise in policy api\n", o.ID, user), "")
	for i := range 3 {
		testkit.WaitFor(t, 5*time.Second, "no override listed by "+cluster.nodes[i].name, func() error {
			if r := at(t, i, "override", "list"); r.stdout != "no override in force\n" || r.code != 0 {
				return fmt.Errorf("exit %d:\n%s%s", r.code, r.stdout, r.stderr)
			}
			return nil
		})
	}
	// Usage errors stay on this side.
	at(t, 0, tok, "override", "add", "--user", user, "--tier", "pro", "--expires-in", "1m").want(t, 2, "",
		"ringlimit: override add: --reason is required\nrun 'ringlimit help' for usage\n")
}

// TestErrors: what a node refuses (400) is printed as it said it, exit 4;
// a node that is not there is named, exit 3; a node that does not answer
// in time, exit 3; bad usage, exit 2.
func TestErrors(t *testing.T) {
	needCluster(t)
	addr := cluster.nodes[0].http
	at(t, 0, "check", "k", "--limit", "0", "--per", "1s").want(t, 4, "",
		fmt.Sprintf("ringlimit: POST http://%s/v1/check: 400 INVALID_ARGUMENT: limit.limit: must be at least 1, got 0\n", addr))
	at(t, 0, "check", "k", "--limit", "1", "--per", "10").want(t, 4, "",
		fmt.Sprintf("ringlimit: POST http://%s/v1/check: 400 INVALID_ARGUMENT: limit.per: \"10\" is not a duration (try 10s)\n", addr))
	r := at(t, 0, "--json", "check", "k", "--limit", "1", "--per", "1x")
	var er api.ErrorResponse
	if err := json.Unmarshal([]byte(r.stdout), &er); err != nil || r.code != 4 || er.Code != api.CodeInvalidArgument {
		t.Fatalf("--json 400: exit %d %q %v", r.code, r.stdout, err)
	}

	dead := testkit.DeadAddr(t)
	cli(t, map[string]string{"RINGLIMIT_ADDR": dead}, "status").want(t, 3, "",
		fmt.Sprintf("ringlimit: cannot reach the node at http://%s: connection refused (is it running? set --addr or $RINGLIMIT_ADDR)\n", dead))
	hole := testkit.Blackhole(t)
	cli(t, nil, "--addr", "http://"+hole+"/", "--timeout", "200ms", "owner", "k").want(t, 3, "",
		fmt.Sprintf("ringlimit: no answer from the node at http://%s within 200ms (--timeout)\n", hole))

	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"frobnicate"}, "ringlimit: unknown command \"frobnicate\" (commands: check, peek, reset, settle, acquire, renew, release, report, owner, status, override, policy, rls, version, help)\n"},
		{[]string{"check", "k", "--limit", "3"}, "ringlimit: check k: an inline check needs --limit and --per (or --calendar)\n"},
		{[]string{"check", "k", "--limit", "3", "--per", "1s", "--failure-mode", "x"}, "ringlimit: --failure-mode: want local, fail_open or fail_closed, got \"x\"\n"},
		{[]string{"owner"}, "ringlimit: usage: ringlimit owner KEY\n"},
		{[]string{"owner", "a", "b"}, "ringlimit: usage: ringlimit owner KEY\n"},
		{[]string{"--addr", "ftp://x", "status"}, "ringlimit: --addr \"ftp://x\": want host:port or an http:// or https:// URL\n"},
		{[]string{"override", "add", "--reason", "r", "--user", "u", "--tier", "t", "--limit", "3", "--per", "1s", "--expires-in", "1m"},
			"ringlimit: override add: give --tier, or --limit and --per, not both\n"},
	} {
		cli(t, nil, c.args...).want(t, 2, "", c.stderr+"run 'ringlimit help' for usage\n")
	}
	cli(t, nil, "owner", "--bogus", "k").want(t, 2, "", "ringlimit: owner: unknown flag --bogus\nrun 'ringlimit help owner' for usage\n")
	cli(t, nil).want(t, 2, "", "usage: ringlimit [flags] COMMAND [flags] [args]\nrun 'ringlimit help' for the commands and their flags\n")
}

// TestHTTPS: --addr https:// with --ca verifies the node's certificate
// (a TLS proxy in front of node-1); without --ca the certificate is
// refused, exit 3.
func TestHTTPS(t *testing.T) {
	needCluster(t)
	target, _ := url.Parse("http://" + cluster.nodes[0].http)
	srv := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(target))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	want := at(t, 0, "owner", "user:7")
	cli(t, nil, "--addr", srv.URL, "--ca", ca, "owner", "user:7").want(t, 0, want.stdout, "")
	r := cli(t, nil, "--addr", srv.URL, "owner", "user:7")
	if r.code != 3 || !strings.Contains(r.stderr, "cannot reach the node at "+srv.URL+": ") || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("no --ca: exit %d %q", r.code, r.stderr)
	}
	srv.CloseClientConnections()
}

// TestBinary: the built binary's exit status is run's (check refused: 1).
func TestBinary(t *testing.T) {
	needCluster(t)
	key := fmt.Sprintf("cli:bin:%d", time.Now().UnixNano())
	for i, want := range []int{0, 1} {
		cmd := exec.Command(cluster.cliBin, "check", key, "--limit", "1", "--per", "1h")
		cmd.Env = append(os.Environ(), "RINGLIMIT_ADDR=http://"+cluster.nodes[2].http)
		out, err := cmd.CombinedOutput()
		if got := cmd.ProcessState.ExitCode(); got != want {
			t.Fatalf("run %d: exit %d (%v), want %d\n%s", i, got, err, want, out)
		}
	}
	out, err := exec.Command(cluster.cliBin, "version").Output()
	if err != nil || !regexp.MustCompile(`^ringlimit \S+ \(commit \S+, go1\.\d+\S*\)\n$`).Match(out) {
		t.Fatalf("version: %q %v", out, err)
	}
	var v Version
	r := cli(t, nil, "version", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.GoVersion == "" || v.Version == "" {
		t.Fatalf("version --json: %q %v", r.stdout, err)
	}
}

// policyFile is a valid policy file; the tests break one line of it.
const policyFile = `version: t1
policies:
  api:
    default_tier: free
    tiers:
      free: { limit: 10, per: 1s, burst: 20 }
      pro: { limit: 100, per: 1s }
    routes:
      - match: /reports
        cost: 10
      - match: /login
        limit: { limit: 5, per: 1m, key: ip+route }
    global: { limit: 2000, per: 1s }
`

// TestPolicyValidate: a valid file gets a one-line summary and exit 0;
// a broken one, FILE:LINE: error on stderr and exit 1, with the line the
// error is on (YAML errors and validation errors alike).
func TestPolicyValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", policyFile)
	sum := sha256.Sum256([]byte(policyFile))
	version := "t1-" + hex.EncodeToString(sum[:6])
	cli(t, nil, "policy", "validate", good).want(t, 0, good+": ok: version "+version+", policies api (default api)\n", "")
	r := cli(t, nil, "policy", "validate", "--json", good)
	var v Validation
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || !v.OK || v.Version != version || v.Default != "api" {
		t.Fatalf("--json: exit %d %q %v", r.code, r.stdout, err)
	}

	for _, c := range []struct {
		name, old, new string
		line           int
		msg            string
	}{
		{"per", "pro: { limit: 100, per: 1s }", "pro: { limit: 100, per: -1s }", 7,
			`policies.api.tiers.pro.per: must be between 1ms and 8784h0m0s, got -1s`},
		{"route", "match: /login", "match: login", 11,
			`policies.api.routes[1].match: want an exact path like /reports or a prefix like /export/*, got "login"`},
		{"route limit", "limit: 5, per: 1m, key: ip+route", "limit: 5, per: 1m, key: ip+router", 12,
			`policies.api.routes[1].limit.key: want identity, ip, ip+route, identity+route or all, got "ip+router"`},
		{"default tier", "default_tier: free", "default_tier: gold", 4, `policies.api.default_tier: no tier named "gold"`},
		{"unknown field", "cost: 10", "costs: 10", 10, `unknown field "costs" in route (did you mean "cost"?)`},
		{"misspelt field", "pro: { limit: 100, per: 1s }", "pro: { limit: 100, per: 1s, algoritm: gcra }", 7,
			`unknown field "algoritm" in limit (did you mean "algorithm"?)`},
		{"decimal", "cost: 10", "cost: 2.5", 10, `want a whole number, got "2.5"`},
		{"syntax", "cost: 10", "cost: 10: 11", 10, "mapping values are not allowed in this context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := write(strings.ReplaceAll(c.name, " ", "-")+".yaml", strings.Replace(policyFile, c.old, c.new, 1))
			cli(t, nil, "policy", "validate", path).want(t, 1, "", fmt.Sprintf("%s:%d: %s\n", path, c.line, c.msg))
			r := cli(t, nil, "--json", "policy", "validate", path)
			var v Validation
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 1 || v.OK || v.Line != c.line || v.Error != c.msg || v.File != path {
				t.Fatalf("--json: exit %d %q %v", r.code, r.stdout, err)
			}
		})
	}
	missing := filepath.Join(dir, "missing.yaml")
	cli(t, nil, "policy", "validate", missing).want(t, 1, "", fmt.Sprintf("%s: open %s: no such file or directory\n", missing, missing))
}

const rlsFile = `domain: shop
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 100 }
    descriptors:
      - key: path
        value: /upload
        rate_limit: { unit: hour, requests_per_unit: 10 }
`

// TestRLSValidate: a file or a directory of them; the first error names
// the file in the directory and its line.
func TestRLSValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := write("a.yaml", rlsFile)
	r := cli(t, nil, "rls", "validate", a)
	if r.code != 0 || !regexp.MustCompile(`^`+regexp.QuoteMeta(a)+`: ok: 1 domains \(shop\), version [0-9a-f]{12}\n$`).MatchString(r.stdout) || r.stderr != "" {
		t.Fatalf("valid file: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	write("b.yaml", strings.Replace(strings.Replace(rlsFile, "shop", "shop2", 1), "unit: hour", "unit: fortnight", 1))
	cli(t, nil, "rls", "validate", dir).want(t, 1, "", filepath.Join(dir, "b.yaml")+":8: invalid rate limit unit \"fortnight\"\n")
	write("b.yaml", strings.Replace(rlsFile, "shop", "shop2", 1)+"  - key: x: y\n")
	cli(t, nil, "rls", "validate", dir).want(t, 1, "", filepath.Join(dir, "b.yaml")+":9: mapping values are not allowed in this context\n")
	write("b.yaml", strings.Replace(strings.Replace(rlsFile, "shop", "shop2", 1), "    descriptors:", "    descriptor:", 1))
	cli(t, nil, "rls", "validate", dir).want(t, 1, "", filepath.Join(dir, "b.yaml")+":5: unknown field \"descriptor\" in descriptor (did you mean \"descriptors\"?)\n")
	write("b.yaml", strings.Replace(rlsFile, "shop", "shop2", 1))
	r = cli(t, nil, "rls", "validate", "--json", dir)
	var v Validation
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || !v.OK || strings.Join(v.Domains, ",") != "shop,shop2" {
		t.Fatalf("--json: exit %d %q %v", r.code, r.stdout, err)
	}
}

// TestParseAddr: the forms --addr takes.
func TestParseAddr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "http://127.0.0.1:8080"},
		{"127.0.0.1:8081", "http://127.0.0.1:8081"},
		{":8082", "http://127.0.0.1:8082"},
		{"localhost:8083", "http://localhost:8083"},
		{"https://rl.example.com/", "https://rl.example.com"},
		{"https://gw.example.com/ringlimit/?x=1", "https://gw.example.com/ringlimit"},
		{"[::1]:8080", "http://[::1]:8080"},
	} {
		u, err := parseAddr(c.in)
		if err != nil || u.String() != c.want {
			t.Errorf("parseAddr(%q) = %v, %v; want %s", c.in, u, err, c.want)
		}
	}
	for _, in := range []string{"ftp://x", "http://", "http://%zz"} {
		if u, err := parseAddr(in); err == nil {
			t.Errorf("parseAddr(%q) = %v, want an error", in, u)
		}
	}
}

// TestPathLine: a validation error's path is found in the file, names
// holding '.' included; a path the file lacks stops at its deepest key.
func TestPathLine(t *testing.T) {
	const file = `policies:
  v1.api:
    tiers:
      free.old: { limit: 1, per: 1s }
      free: { limit: 1, per: 1s }
    routes:
      - match: /a
        cost: 2
      - match: /b
        limit:
          per: 0s
`
	for _, c := range []struct {
		path string
		line int
	}{
		{"policies", 1},
		{"policies.v1.api", 2},
		{"policies.v1.api.tiers.free.old.per", 4},
		{"policies.v1.api.tiers.free.per", 5},
		{"policies.v1.api.routes[1].limit.per", 11},
		{"policies.v1.api.routes[/b].limit", 10},
		{"policies.v1.api.routes[/a].cost", 8},
		{"policies.v1.api.global", 2},
		{"policies.v2", 1},
		{"version", 1},
	} {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(file), &doc); err != nil {
			t.Fatal(err)
		}
		if got := pathLine(doc.Content[0], c.path); got != c.line {
			t.Errorf("pathLine(%s) = %d, want %d", c.path, got, c.line)
		}
	}
}
