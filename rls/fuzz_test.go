package rls

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, refuses with a message naming the file,
// and what it accepts can be matched against without panicking.
func FuzzParse(f *testing.F) {
	data, err := os.ReadFile("testdata/messaging.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(data), "message_type", "marketing", "to_number", "1")
	f.Add("domain: d\ndescriptors:\n  - key: a\n    value: b*\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "a", "bc", "", "")
	f.Add("domain: d\nx: &a [*a]\n", "a", "", "", "")
	f.Add("domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n", "k", "", "k", "")
	f.Fuzz(func(t *testing.T, src, k1, v1, k2, v2 string) {
		c, err := Parse([]File{{Name: "fuzz.yaml", Data: []byte(src)}})
		if err != nil {
			if c != nil || !strings.HasPrefix(err.Error(), "rls: fuzz.yaml") {
				t.Fatalf("Parse = %v, %v", c, err)
			}
			return
		}
		for _, domain := range c.Domains() {
			for _, d := range [][]string{{k1, v1}, {k1, v1, k2, v2}} {
				if r, ok := c.Match(domain, desc(d...)); ok && r.Key != key(domain, d...) {
					t.Fatalf("Match(%q, %q).Key = %q", domain, d, r.Key)
				}
			}
		}
	})
}
