package clientip

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

var proxies = mustList("10.0.0.0/8", "192.0.2.10", "fd00::/8")

func mustList(s ...string) Trusted {
	t, err := ParseList(s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestResolve(t *testing.T) {
	steps := []struct {
		trusted Trusted
		peer    string
		xff     []string // header lines
		want    string
	}{
		{nil, "10.0.0.6:1234", []string{"203.0.113.9"}, "10.0.0.6"},                                   // nothing trusted
		{proxies, "198.51.100.7:1234", []string{"203.0.113.1"}, "198.51.100.7"},                       // untrusted peer
		{proxies, "10.0.0.2:1234", []string{"203.0.113.2"}, "203.0.113.2"},                            // trusted peer
		{proxies, "10.0.0.2:1234", []string{"6.6.6.6, 203.0.113.3, 10.0.0.9"}, "203.0.113.3"},         // spoofed left
		{proxies, "10.0.0.2:1234", []string{"6.6.6.7", "203.0.113.4"}, "203.0.113.4"},                 // two lines
		{proxies, "10.0.0.2:1234", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1"},                        // every hop trusted
		{proxies, "10.0.0.3:1234", []string{"203.0.113.5, garbage"}, "10.0.0.3"},                      // garbage right-most
		{proxies, "10.0.0.3:1234", []string{"garbage, 10.9.9.9"}, "10.9.9.9"},                         // garbage past a trusted hop
		{proxies, "10.0.0.4:1234", nil, "10.0.0.4"},                                                   // no header
		{proxies, "192.0.2.10:1234", []string{"203.0.113.6"}, "203.0.113.6"},                          // single trusted address
		{proxies, "192.0.2.11:1234", []string{"203.0.113.6"}, "192.0.2.11"},                           // next to it
		{proxies, "[fd00::1]:443", []string{"2001:db8::7"}, "2001:db8::7"},                            // IPv6 proxy
		{proxies, "[::ffff:10.0.0.5]:1", []string{"::ffff:203.0.113.8"}, "203.0.113.8"},               // IPv4-mapped
		{proxies, "10.0.0.2:1234", []string{"203.0.113.10:5555"}, "203.0.113.10"},                     // hop with a port
		{proxies, "10.0.0.2:1234", []string{"[2001:db8::9]:80, fe80::1%eth0"}, "fe80::1"},             // zone dropped
		{proxies, "@", []string{"203.0.113.11"}, "@"},                                                 // unix socket
		{proxies, "host.example:80", []string{"203.0.113.12"}, "host.example"},                        // not an IP
		{mustList("127.0.0.0/8", "::1/128"), "127.0.0.1:5", []string{"198.51.100.1"}, "198.51.100.1"}, // the node's default
	}
	for i, st := range steps {
		h := http.Header{}
		for _, v := range st.xff {
			h.Add("X-Forwarded-For", v)
		}
		if got := Resolve(st.peer, Hops(h, "X-Forwarded-For"), st.trusted); got != st.want {
			t.Errorf("step %d: Resolve(%q, %q) = %q want %q", i, st.peer, st.xff, got, st.want)
		}
	}
}

func TestParseList(t *testing.T) {
	good, err := ParseList([]string{"10.0.0.0/8", " 192.0.2.1 ", "::ffff:10.0.0.0/104", "fd00::/8", "10.1.2.3/8", "fe80::1%eth0"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "10.0.0.0/8", "fd00::/8", "10.0.0.0/8", "fe80::1/128"}
	for i, p := range good {
		if p.String() != want[i] {
			t.Errorf("entry %d: %v want %s", i, p, want[i])
		}
	}
	for _, bad := range []struct{ in, want string }{
		{"10.0.0.0/33", `entry 0: "10.0.0.0/33" is not a CIDR prefix`},
		{"proxy.internal", `entry 0: "proxy.internal" is neither a CIDR prefix nor an address`},
		{"", `entry 0: "" is neither`},
		{"::ffff:0:0/80", "IPv4-mapped prefix must be /96 or longer"},
	} {
		if _, err := ParseList([]string{bad.in}); err == nil || !strings.Contains(err.Error(), bad.want) || !strings.HasPrefix(err.Error(), "clientip: ") {
			t.Errorf("ParseList(%q) = %v, want an error containing %q", bad.in, err, bad.want)
		}
	}
}

// FuzzResolve: whatever the hops say, the client IP is the peer unless the
// peer is trusted, and otherwise the peer or an address among the hops.
func FuzzResolve(f *testing.F) {
	f.Add("10.0.0.2:1234", "6.6.6.6, 203.0.113.3, 10.0.0.9")
	f.Add("198.51.100.7:1", "203.0.113.1")
	f.Add("[fd00::1]:443", "2001:db8::7, [2001:db8::8]:9, ,,")
	f.Add("[::ffff:10.0.0.5]:1", "::ffff:1.2.3.4")
	f.Fuzz(func(t *testing.T, peer, xff string) {
		hops := Hops(http.Header{"X-Forwarded-For": {xff}}, "X-Forwarded-For")
		got := Resolve(peer, hops, proxies)
		p, ok := ParseAddr(peer)
		if !ok {
			return // not an IP peer: passed through
		}
		if !proxies.Contains(p) || got == p.String() {
			if got != p.String() {
				t.Fatalf("untrusted peer %s: got %q", peer, got)
			}
			return
		}
		a, err := netip.ParseAddr(got)
		if err != nil {
			t.Fatalf("got %q, not an address", got)
		}
		for _, hop := range hops {
			if h, ok := ParseAddr(hop); ok && h == a {
				return
			}
		}
		t.Fatalf("peer %s, X-Forwarded-For %q: got %q from neither", peer, xff, got)
	})
}
