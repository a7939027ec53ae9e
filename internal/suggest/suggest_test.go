package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"algorithm", "algorithm", 0},
		{"algoritm", "algorithm", 1},   // a deletion
		{"algorithmm", "algorithm", 1}, // an insertion
		{"algorothm", "algorithm", 1},  // a substitution
		{"algroithm", "algorithm", 1},  // a swap of neighbours
		{"chek-timeout", "check-timeout", 1},
		{"descriptor", "descriptors", 1},
		{"kitten", "sitting", 3},
		{"ca", "abc", 3}, // no byte edited twice: not 2
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	fields := []string{"algorithm", "limit", "per", "burst", "failure_mode", "key", "dry_run", "lease"}
	commands := []string{"check", "owner", "status", "override", "policy", "rls", "version", "help"}
	for _, c := range []struct {
		word  string
		known []string
		want  string
		ok    bool
	}{
		{"algoritm", fields, "algorithm", true},
		{"algroithm", fields, "algorithm", true},
		{"limits", fields, "limit", true},
		{"dryRun", fields, "dry_run", true},            // case and '_'
		{"FAILURE-MODE", fields, "failure_mode", true}, // case and '-'
		{"failuremod", fields, "failure_mode", true},   // 2 edits
		{"pr", fields, "per", true},                    // 1 edit on a short word
		{"bu", fields, "", false},                      // 2 edits on a short word: too far
		{"xyz", fields, "", false},
		{"chek", commands, "check", true},
		{"stats", commands, "status", true},
		{"verison", commands, "version", true},
		{"nosuch", commands, "", false},
		{"key", fields, "key", true}, // itself
		{"kye", []string{"key", "kyes"}, "key", true},
		{"limt", []string{"lint", "limit"}, "lint", true}, // equal distance: the first
		{"word", nil, "", false},
	} {
		got, ok := Closest(c.word, c.known)
		if got != c.want || ok != c.ok {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", c.word, got, ok, c.want, c.ok)
		}
	}
}
