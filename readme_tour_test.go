package ringlimit_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tourDir is how the README names the cluster directory.
const tourDir = "/tmp/ringlimit-cluster"

// The tour's cluster listens on these bases (node I on base + I), away
// from the defaults the README shows, so that the test never meets a
// cluster someone runs by hand. pickTourPorts chooses them, below the
// ephemeral range, where every port the cluster needs is free: two runs of
// the suite at once (two clones on one machine) do not collide.
var tourHTTPBase, tourGRPCBase, tourPeerBase, tourGossipBase int

// pickTourPorts sets the bases to a block of 40 ports (HTTP, gRPC, peer,
// gossip, 10 each) in 20000-31999 whose ports for three nodes are free.
func pickTourPorts(t *testing.T) {
	t.Helper()
	tourHTTPBase, tourGRPCBase, tourPeerBase, tourGossipBase = pickPortBases(t, 3)
}

// pickPortBases returns the HTTP, gRPC, peer and gossip bases of a block of
// 40 ports (10 each) in 20000-31999 whose ports for n ≤ 9 nodes (base + 1
// to base + n, TCP and UDP) are free.
func pickPortBases(t *testing.T, n int) (http, grpc, peer, gossip int) {
	t.Helper()
	free := func(base int) bool {
		for b := base; b < base+40; b += 10 {
			for i := 1; i <= n; i++ {
				addr := fmt.Sprintf("127.0.0.1:%d", b+i)
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					return false
				}
				ln.Close()
				pc, err := net.ListenPacket("udp", addr)
				if err != nil {
					return false
				}
				pc.Close()
			}
		}
		return true
	}
	for range 50 {
		base := 20000 + 40*rand.IntN(300)
		if free(base) {
			return base, base + 10, base + 20, base + 30
		}
	}
	t.Fatal("no block of free ports for a local cluster in 20000-31999 after 50 tries")
	return
}

// tourStep is one command of the README's tour and what the README shows
// under it.
type tourStep struct {
	line int      // of README.md, where the command starts
	cmd  string   // as bash runs it (continuation prompts removed)
	want []string // the output lines shown; "..." stands for any lines
	exit int      // the exit status a "exit status N" comment claims, else 0
}

// TestREADMETour runs every command of README.md's tour (the console
// blocks under a "<!-- tour -->" line), in order, with bash against a fresh
// local cluster on ports of its own, and checks each command's output
// against the lines the README shows under it: the owner named, remaining
// 2, 1, 0 and then a refusal, the key still refused after its owner
// stopped and after it came back, the status output, the CLI's answers, an
// override added and revoked by the id of its answer, the RLS call. Times,
// ids, pids and dates may differ; nothing else does. Ports and the
// cluster directory are rewritten between the README's and the test's.
func TestREADMETour(t *testing.T) {
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing: the README tour needs it", tool)
			}
			t.Skipf("%s is missing: the README tour needs it", tool)
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go is not on PATH: scripts/local-cluster.sh up builds with it: %v", err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := parseTour(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) < 20 {
		t.Fatalf("found %d commands in the README's tour blocks; want at least 20", len(steps))
	}

	pickTourPorts(t)

	dir := filepath.Join(t.TempDir(), "cluster")
	env := []string{
		"RINGLIMIT_HTTP_BASE=" + strconv.Itoa(tourHTTPBase),
		"RINGLIMIT_GRPC_BASE=" + strconv.Itoa(tourGRPCBase),
		"RINGLIMIT_PEER_BASE=" + strconv.Itoa(tourPeerBase),
		"RINGLIMIT_GOSSIP_BASE=" + strconv.Itoa(tourGossipBase),
		"RINGLIMIT_CLUSTER_DIR=" + dir,
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RINGLIMIT_") { // the README's defaults, not the caller's
			env = append(env, kv)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		down := exec.CommandContext(ctx, "scripts/local-cluster.sh", "down")
		down.Env = env
		if out, err := down.CombinedOutput(); err != nil {
			t.Errorf("scripts/local-cluster.sh down: %v\n%s", err, out)
		}
	})

	// One bash runs every command, so that what one sets (eval, ID=...)
	// the next sees; after each, a record separator, its number and its
	// exit status.
	var script strings.Builder
	script.WriteString("exec 2>&1\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "%s\nprintf '\\036%d %%d\\n' $?\n", toTest(s.cmd, dir), i)
	}
	if err := os.WriteFile(dir+".sh", []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", dir+".sh")
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.WaitDelay = 5 * time.Second // should a node the script started hold our pipe, Run still returns
	runErr := cmd.Run()

	records := strings.Split(out.String(), "\x1e")
	got := records[0] // output before the first separator belongs to step 0
	for i, s := range steps {
		if i+1 >= len(records) {
			t.Fatalf("README.md:%d: %s\nnever finished (bash: %v); its output:\n%s", s.line, s.cmd, runErr, got)
		}
		status, rest, _ := strings.Cut(records[i+1], "\n")
		var n, code int
		if _, err := fmt.Sscanf(status, "%d %d", &n, &code); err != nil || n != i {
			t.Fatalf("README.md:%d: step %d: unreadable status line %q", s.line, i, status)
		}
		if code != s.exit {
			t.Errorf("README.md:%d: %s\nexit status %d, want %d; output:\n%s", s.line, s.cmd, code, s.exit, got)
		}
		if lines := fromTest(got, dir); !matchLines(s.want, lines) {
			t.Errorf("README.md:%d: %s\noutput:\n%s\nwant (as README.md shows it):\n%s",
				s.line, s.cmd, strings.Join(lines, "\n"), strings.Join(s.want, "\n"))
		}
		got = rest
	}
	if runErr != nil {
		t.Errorf("bash: %v", runErr)
	}
}

var exitClaim = regexp.MustCompile(`#.*exit status (\d+)`)

// parseTour returns the commands of the console blocks that follow a
// "<!-- tour -->" line: a command starts with "$ " and goes on over lines
// starting with "> ", or after a line ending in a backslash; the lines up
// to the next command are its output.
func parseTour(readme string) ([]tourStep, error) {
	lines := strings.Split(readme, "\n")
	var steps []tourStep
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "<!-- tour -->" {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```console" {
			return nil, fmt.Errorf("README.md:%d: a tour marker not followed by a ```console block", i+1)
		}
		i += 2
		var cur *tourStep
		for ; i < len(lines) && lines[i] != "```"; i++ {
			l := lines[i]
			switch {
			case strings.HasPrefix(l, "$ "):
				steps = append(steps, tourStep{line: i + 1, cmd: l[2:]})
				cur = &steps[len(steps)-1]
			case cur == nil:
				return nil, fmt.Errorf("README.md:%d: a tour block must start with a command ($ ...)", i+1)
			case len(cur.want) == 0 && strings.HasPrefix(l, "> "):
				cur.cmd += "\n" + l[2:]
			case len(cur.want) == 0 && strings.HasSuffix(cur.cmd, "\\"):
				cur.cmd += "\n" + l
			default:
				cur.want = append(cur.want, l)
			}
		}
		if i == len(lines) {
			return nil, fmt.Errorf("README.md: a tour block that never ends")
		}
	}
	for i := range steps {
		if m := exitClaim.FindStringSubmatch(steps[i].cmd); m != nil {
			steps[i].exit, _ = strconv.Atoi(m[1])
		}
	}
	return steps, nil
}

var (
	readmePort = regexp.MustCompile(`\b80[89][0-9]\b`)
	testPort   = regexp.MustCompile(`\b127\.0\.0\.1:([0-9]+)\b`)
)

// toTest rewrites a README command for the test's cluster: HTTP ports
// (8080 to 8099, wherever they stand: localhost:8081, for port in 8081
// 8082) from the default base to the test's, and the cluster directory.
func toTest(cmd, dir string) string {
	cmd = readmePort.ReplaceAllStringFunc(cmd, func(s string) string {
		p, _ := strconv.Atoi(s)
		return strconv.Itoa(tourHTTPBase + p - 8080)
	})
	return strings.ReplaceAll(cmd, tourDir, dir)
}

// fromTest rewrites output of the test's cluster into the README's terms
// (default ports, the default cluster directory) and splits it in lines.
func fromTest(out, dir string) []string {
	out = strings.ReplaceAll(out, dir, tourDir)
	out = testPort.ReplaceAllStringFunc(out, func(s string) string {
		p, _ := strconv.Atoi(strings.TrimPrefix(s, "127.0.0.1:"))
		for _, b := range [][2]int{{tourHTTPBase, 8080}, {tourGRPCBase, 9090}, {tourPeerBase, 9190}, {tourGossipBase, 7946}} {
			if p > b[0] && p < b[0]+10 {
				return fmt.Sprintf("127.0.0.1:%d", b[1]+p-b[0])
			}
		}
		return s
	})
	out = strings.TrimSuffix(out, "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// volatile are the parts of an output that differ from run to run: times
// that depend on when the command ran, ids and pids, dates. Each is
// replaced, in the README's lines and the output alike, by a placeholder.
var volatile = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`"(retry_after_ms|reset_after_ms)":[0-9]+`), `"$1":N`},
	{regexp.MustCompile(`(retry after|reset after) +[0-9.]+(ms|s)`), `$1 N`},
	{regexp.MustCompile(`lag [0-9.]+ ms`), `lag N ms`},
	{regexp.MustCompile(`[0-9]+ replicas held, successor for [0-9]+ keys`), `N replicas held, successor for N keys`}, // as replication catches up
	{regexp.MustCompile(`"durationUntilReset":"[0-9.]+s"`), `"durationUntilReset":"N"`},
	{regexp.MustCompile(`ovr-[0-9]+-[0-9]+`), `ovr-N`},
	{regexp.MustCompile(`[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z`), `TIME`},
	{regexp.MustCompile(`^Date: .*`), `Date: DATE`},
	{regexp.MustCompile(`^Content-Length: [0-9]+`), `Content-Length: N`},
	{regexp.MustCompile(`\(pid [0-9]+,`), `(pid N,`},
	{regexp.MustCompile(`[ \t]+`), ` `}, // columns: the test's ports are wider
}

func normalize(l string) string {
	l = strings.TrimRight(l, " \t\r")
	for _, v := range volatile {
		l = v.re.ReplaceAllString(l, v.repl)
	}
	return l
}

// matchLines reports whether got is want, line by line after normalize,
// where a want line "..." matches any number of lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for k := 0; k <= len(got); k++ {
			if matchLines(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && normalize(want[0]) == normalize(got[0]) && matchLines(want[1:], got[1:])
}
