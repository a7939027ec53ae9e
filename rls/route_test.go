package rls

import (
	"strings"
	"testing"
)

// TestConfigRoutesNormalised: a configured route value is matched by its
// normalised form (with a warning saying so), and every spelling of the
// route a request sends reaches the same rule and the same bucket.
func TestConfigRoutesNormalised(t *testing.T) {
	c, err := Parse([]File{{Name: "f.yaml", Data: []byte(`
domain: gw
descriptors:
  - key: path
    value: /login/
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: header_match
    value: /a//b
    rate_limit: {unit: hour, requests_per_unit: 5}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 2 || !strings.Contains(w[0], `"/login"`) {
		t.Errorf("warnings %q, want one per value normalised", w)
	}
	want, ok := c.Match("gw", desc("path", "/login"))
	if !ok || want.RequestsPerUnit != 3 || want.Key != "r|gw|path=/login" {
		t.Fatalf("/login: %+v, %v", want, ok)
	}
	for _, v := range []string{"/login/", "//login", "/login;jsessionid=1", "/%6Cogin", "/x/../login", "/login?a=b"} {
		got, ok := c.Match("gw", desc("path", v))
		if !ok || got.Key != want.Key || got.RequestsPerUnit != 3 {
			t.Errorf("path %q: %+v, %v; want the /login rule and key %q", v, got, ok, want.Key)
		}
	}
	if got, ok := c.Match("gw", desc("header_match", "/a/b/")); !ok || got.RequestsPerUnit != 5 {
		t.Errorf("a value beginning with '/' is a route: %+v, %v", got, ok)
	}
	if got := BucketKey("gw", [][2]string{{"path", "//login/"}}); got != want.Key {
		t.Errorf("BucketKey of //login/ = %q, want %q", got, want.Key)
	}
}
