package route

import (
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for i, tc := range []struct{ in, want string }{
		{"/", "/"},
		{"", "/"},
		{"/login", "/login"},
		{"/login/", "/login"},
		{"//login", "/login"},
		{"/login//", "/login"},
		{"///a//b///", "/a/b"},
		{"/login;jsessionid=1", "/login"},
		{"/a;x=1/b;y", "/a/b"},
		{"/%6Cogin", "/login"},
		{"/%6cogin", "/login"},
		{"/LOGIN", "/LOGIN"},
		{"/a/./b", "/a/b"},
		{"/a/../b", "/b"},
		{"/a/b/..", "/a"},
		{"/../../login", "/login"},
		{"/..;/login", "/login"},
		{"/a/%2e%2e/login", "/login"},
		{"/a/.%2E/login", "/login"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a%2fb", "/a%2Fb"},
		{"/a%7Cb", "/a%7Cb"},
		{"/%7e/x", "/~/x"},
		{"/a%zzb", "/a%25zzb"},
		{"/a%", "/a%25"},
		{"/a%4", "/a%254"},
		{"/%25", "/%25"},
		{"/login?next=/admin", "/login"},
		{"/login#frag", "/login"},
		{"login", "/login"},
		{"./login", "/login"},
		{"/reports/2024/", "/reports/2024"},
		{"/export/a.csv", "/export/a.csv"},
		{"/.well-known/x", "/.well-known/x"},
		{"/é/x", "/é/x"},
	} {
		if got := Normalize(tc.in); got != tc.want {
			t.Errorf("step %d: Normalize(%q) = %q want %q", i, tc.in, got, tc.want)
		}
		if got := Normalize(tc.want); got != tc.want {
			t.Errorf("step %d: Normalize(%q) = %q, not idempotent", i, tc.want, got)
		}
	}
}

func TestNormalizeCanonicalAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { Normalize("/api/v1/reports") }); n != 0 {
		t.Errorf("Normalize of a canonical path: %v allocations, want 0", n)
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"/", "", "//a", "/a/../b", "/%6C", "/a;b/c", "/%%616", "/a/%2e%2E/", "?x", "/a%2f", "../..", "/.;/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		n := Normalize(p)
		if again := Normalize(n); again != n {
			t.Fatalf("Normalize(%q) = %q, Normalize of that = %q", p, n, again)
		}
		if n == "" || n[0] != '/' || len(n) > 1 && n[len(n)-1] == '/' {
			t.Fatalf("Normalize(%q) = %q: not a rooted path without a trailing slash", p, n)
		}
		if strings.Contains(n, "//") || strings.ContainsAny(n, ";?#") {
			t.Fatalf("Normalize(%q) = %q", p, n)
		}
		if len(n) > 3*len(p)+1 {
			t.Fatalf("Normalize(%q) = %q: longer than it can be", p, n)
		}
	})
}
