package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/api"
)

// TestPeekReset: peek answers as check would, through every node, and
// spends nothing; reset needs the admin token ($RINGLIMIT_TOKEN) and puts
// the key back to full.
func TestPeekReset(t *testing.T) {
	needCluster(t)
	key := fmt.Sprintf("cli:peek:%d", time.Now().UnixNano())
	var o api.OwnerResponse
	if err := getJSON("http://"+cluster.nodes[0].http+"/v1/owner?key="+url.QueryEscape(key), &o); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if r := at(t, i, "check", key, "--limit", "3", "--per", "1h"); r.code != 0 {
			t.Fatalf("check %d: exit %d\n%s%s", i, r.code, r.stdout, r.stderr)
		}
	}
	for i := range 6 {
		r := at(t, i%3, "peek", "--json", key, "--limit", "3", "--per", "1h")
		var resp api.CheckResponse
		if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || r.code != 1 || resp.Allowed || resp.Remaining != 0 || resp.Owner != o.Owner {
			t.Fatalf("peek %d via %s: exit %d, %s %v; want exit 1, refused by %s", i, cluster.nodes[i%3].name, r.code, r.stdout, err, o.Owner)
		}
	}
	addr := cluster.nodes[1].http
	cli(t, map[string]string{"RINGLIMIT_ADDR": addr}, "reset", key, "--limit", "3", "--per", "1h").want(t, 4, "",
		fmt.Sprintf("ringlimit: POST http://%s/v1/reset: 401 UNAUTHENTICATED: an admin token is required: Authorization: Bearer <token>\n", addr))
	cli(t, map[string]string{"RINGLIMIT_ADDR": addr, "RINGLIMIT_TOKEN": testToken}, "reset", key, "--limit", "3", "--per", "1h").want(t, 0,
		fmt.Sprintf("reset               true\nprevious remaining  0\nowner               %s\n", o.Owner), "")
	r := at(t, 2, "peek", key, "--limit", "3", "--per", "1h")
	if r.code != 0 || !strings.Contains(r.stdout, "remaining    2\n") {
		t.Fatalf("peek after the reset: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	at(t, 0, "reset", key, "--limit", "3", "--per", "1h", "--cost", "2").want(t, 2, "",
		"ringlimit: reset: unknown flag --cost\nrun 'ringlimit help reset' for usage\n")
}
