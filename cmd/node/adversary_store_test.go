package main

// Adversarial tests of the key store against a real node process: a flood
// of distinct keys (some of 1 KiB) at a small --max-memory, keys aimed at
// one shard, and keys longer than --max-key-bytes. Each asserts that no
// exhausted key is refilled, that the node's memory stays within its
// budget, and that every new key the store has no room for gets its
// failure mode and is counted.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/internal/testonly/testkit"
	pb "github.com/ringlimit/ringlimit/proto/ringlimitv1"
)

func TestAdversaryStore(t *testing.T) {
	bin := buildNode(t)
	t.Run("Flood", func(t *testing.T) { testStoreFlood(t, bin) })
	t.Run("ShardAttack", func(t *testing.T) { testShardAttack(t, bin) })
}

// vmRSS returns the resident set of process pid, in bytes.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// hourly is an inline check of key: a token bucket of 3 an hour, cost 1.
func hourly(key string, mode pb.FailureMode) *pb.Check {
	return &pb.Check{Key: key, Limit: &pb.Limit{Algorithm: pb.Algorithm_TOKEN_BUCKET, Limit: 3, PerMs: 3_600_000, FailureMode: mode}}
}

// checkAll sends checks in calls of at most 500 and returns the decisions.
func checkAll(t *testing.T, c pb.RateLimiterClient, checks []*pb.Check) []*pb.Decision {
	t.Helper()
	var out []*pb.Decision
	for len(checks) > 0 {
		n := min(len(checks), 500)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.Check(ctx, &pb.CheckRequest{Checks: checks[:n]})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetDecisions()...)
		checks = checks[n:]
	}
	return out
}

// metric scrapes one unlabelled sample of name from p.
func metric(t *testing.T, client *http.Client, p *proc, name string) float64 {
	t.Helper()
	m, err := testkit.Scrape(client, p.http, name)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m[""]
	if !ok {
		t.Fatalf("%s not on %s's /metrics", name, p.name)
	}
	return v
}

// exhaust spends all 3 tokens of every victim and checks that a 4th is
// refused.
func exhaust(t *testing.T, c pb.RateLimiterClient, victims []string) {
	t.Helper()
	var checks []*pb.Check
	for _, v := range victims {
		for range 4 {
			checks = append(checks, hourly(v, pb.FailureMode_FAIL_OPEN))
		}
	}
	ds := checkAll(t, c, checks)
	for i, d := range ds {
		if want := i%4 < 3; d.GetAllowed() != want || d.GetDegraded() {
			t.Fatalf("%s check %d: allowed %v degraded %v, want allowed %v", victims[i/4], i%4+1, d.GetAllowed(), d.GetDegraded(), want)
		}
	}
}

// stillExhausted checks every victim once more (fail_open: a victim the
// store lost would be admitted, fresh or by its failure mode) and returns
// how many were admitted.
func stillExhausted(t *testing.T, c pb.RateLimiterClient, victims []string) int {
	t.Helper()
	var checks []*pb.Check
	for _, v := range victims {
		checks = append(checks, hourly(v, pb.FailureMode_FAIL_OPEN))
	}
	admitted := 0
	for _, d := range checkAll(t, c, checks) {
		if d.GetAllowed() {
			admitted++
		}
	}
	return admitted
}

// testStoreFlood floods one node at --max-memory 16MiB with 200,000
// distinct keys, half of them 1 KiB long, each spending 1 of 3 an hour (so
// that none is ever full again during the test): the store fills, and
// from then on every new key gets its failure mode.
func testStoreFlood(t *testing.T, bin string) {
	const (
		budget  = 16 << 20
		flood   = 200_000
		victims = 100
	)
	h := &harness{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(h.client.CloseIdleConnections)
	p := startSolo(t, bin, "flood", "--max-memory", "16MiB", "--gc-headroom", "0")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimiterClient(conn)

	var vs []string
	for i := range victims {
		vs = append(vs, fmt.Sprintf("victim:%d", i))
	}
	exhaust(t, c, vs)
	before := vmRSS(t, p.cmd.Process.Pid)

	// Key i is 1 KiB long when i is even; its failure mode is fail_open
	// when i/2 is even, fail_closed otherwise.
	key := func(i int) string {
		k := "flood:" + strconv.Itoa(i)
		if i%2 == 0 {
			k += ":" + strings.Repeat("x", 1024-len(k)-1)
		}
		return k
	}
	mode := func(i int) pb.FailureMode {
		if i/2%2 == 0 {
			return pb.FailureMode_FAIL_OPEN
		}
		return pb.FailureMode_FAIL_CLOSED
	}
	checks := make([]*pb.Check, flood)
	for i := range checks {
		checks[i] = hourly(key(i), mode(i))
	}
	start := time.Now()
	ds := checkAll(t, c, checks)
	var held []int // flood keys the store took
	full := 0
	for i, d := range ds {
		switch {
		case !d.GetDegraded():
			if !d.GetAllowed() || d.GetRemaining() != 2 {
				t.Fatalf("new key %d held: allowed %v remaining %d, want a fresh bucket", i, d.GetAllowed(), d.GetRemaining())
			}
			held = append(held, i)
		case d.GetAllowed() != (mode(i) == pb.FailureMode_FAIL_OPEN):
			t.Fatalf("new key %d with no room: allowed %v, want its failure mode %v", i, d.GetAllowed(), mode(i))
		default:
			full++
		}
	}
	after := vmRSS(t, p.cmd.Process.Pid)
	t.Logf("%d keys in %v: %d held, %d decided by their failure mode; RSS %d MiB before, %d MiB after (budget %d MiB)",
		flood, time.Since(start).Round(time.Millisecond), len(held), full, before>>20, after>>20, budget>>20)

	if n := stillExhausted(t, c, vs); n != 0 {
		t.Fatalf("%d of %d exhausted keys admitted after the flood, want 0", n, victims)
	}
	if full == 0 {
		t.Fatal("the store never filled")
	}
	if got := metric(t, h.client, p, "ringlimit_store_full_total"); got != float64(full) {
		t.Fatalf("ringlimit_store_full_total = %v, want %d", got, full)
	}
	if got := metric(t, h.client, p, "ringlimit_store_bytes"); got > budget {
		t.Fatalf("ringlimit_store_bytes = %v, over the budget %d", got, budget)
	}
	// Keys held keep working: each had 2 left, now 1.
	for _, i := range held[:10] {
		d := checkAll(t, c, []*pb.Check{hourly(key(i), mode(i))})[0]
		if !d.GetAllowed() || d.GetDegraded() || d.GetRemaining() != 1 {
			t.Fatalf("held key %d: allowed %v degraded %v remaining %d, want 1 remaining", i, d.GetAllowed(), d.GetDegraded(), d.GetRemaining())
		}
	}
	// The process holds the budget plus at most rssOverhead: the heap's
	// garbage between two collections (GOGC=100: up to the live heap
	// again), the store's pages allocated 256 entries at a time, gRPC's
	// buffers.
	const rssOverhead = 48 << 20
	if grew := after - before; grew > budget+rssOverhead {
		t.Fatalf("RSS grew by %d MiB, over the budget %d MiB + %d MiB", grew>>20, budget>>20, rssOverhead>>20)
	}

	// A key longer than --max-key-bytes (1024): a clear 400, nothing kept.
	keys := metric(t, h.client, p, "ringlimit_keys")
	long := strings.Repeat("k", 1025)
	code, body, err := send(h.client, http.MethodPost, "http://"+p.http+"/v1/check",
		`{"key":"`+long+`","limit":{"limit":3,"per":"1h"}}`, "")
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Code, Message string }
	if err := json.Unmarshal(body, &e); err != nil || code != http.StatusBadRequest || e.Code != "KEY_TOO_LONG" || !strings.Contains(e.Message, "1024") {
		t.Fatalf("a 1,025-byte key: %d %s, want 400 KEY_TOO_LONG naming 1024", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Check(ctx, &pb.CheckRequest{Checks: []*pb.Check{hourly(long, pb.FailureMode_FAIL_OPEN)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("a 1,025-byte key over gRPC: %v, want InvalidArgument naming 1024", err)
	}
	if got := metric(t, h.client, p, "ringlimit_keys"); got != keys {
		t.Fatalf("ringlimit_keys %v after refused keys, want %v", got, keys)
	}
}

// testShardAttack aims 17,000 keys at the shard an unseeded xxhash puts
// an exhausted key in (64 shards: the top 6 bits), on a node holding 100
// keys a shard (--max-keys 6400). Neither aiming nor flooding may refill
// the exhausted key.
func testShardAttack(t *testing.T, bin string) {
	const aimed = 17_000
	h := &harness{t: t, client: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(h.client.CloseIdleConnections)
	p := startSolo(t, bin, "shard", "--max-keys", "6400")
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimiterClient(conn)

	victim := "victim"
	exhaust(t, c, []string{victim})
	target := xxhash.Sum64String(victim) >> 58
	var checks []*pb.Check
	for i := 0; len(checks) < aimed; i++ {
		if k := "aimed:" + strconv.Itoa(i); xxhash.Sum64String(k)>>58 == target {
			checks = append(checks, hourly(k, pb.FailureMode_FAIL_CLOSED))
		}
	}
	full := 0
	for _, d := range checkAll(t, c, checks) {
		if d.GetDegraded() {
			full++
		}
	}
	t.Logf("%d keys aimed at one shard: %d found no room", aimed, full)
	if n := stillExhausted(t, c, []string{victim}); n != 0 {
		t.Fatal("the exhausted key was admitted after keys were aimed at its shard")
	}
	if got := metric(t, h.client, p, "ringlimit_store_full_total"); got != float64(full) {
		t.Fatalf("ringlimit_store_full_total = %v, want %d", got, full)
	}
}
