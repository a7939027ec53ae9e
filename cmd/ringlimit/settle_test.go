package main

import (
	"fmt"
	"regexp"
	"testing"
	"time"
)

// TestReserveSettle: check --reserve of 100 of a budget of 1,000 prints a
// reservation; settle ID 30 through another node leaves 970; the same
// settle again exits 4 with ALREADY_SETTLED; a bad COST is a usage error.
func TestReserveSettle(t *testing.T) {
	needCluster(t)
	key := fmt.Sprintf("cli:settle:%d", time.Now().UnixNano())
	r := at(t, 0, "check", key, "--limit", "1000", "--per", "1000h", "--cost", "100", "--reserve", "--reserve-ttl", "1m")
	m := regexp.MustCompile(`(?m)^reservation  (r1\.\S+)$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil || !regexp.MustCompile(`(?m)^remaining    900$`).MatchString(r.stdout) {
		t.Fatalf("check --reserve: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = at(t, 1, "settle", m[1], "30")
	if r.code != 0 || !regexp.MustCompile(`(?m)^remaining  970$`).MatchString(r.stdout) {
		t.Fatalf("settle 30: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = at(t, 2, "settle", m[1], "30")
	if r.code != 4 || !regexp.MustCompile(`ALREADY_SETTLED`).MatchString(r.stderr) {
		t.Fatalf("second settle: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r = at(t, 2, "settle", m[1], "-1"); r.code != 2 {
		t.Fatalf("settle -1: exit %d, stderr: %s", r.code, r.stderr)
	}
}
