// Package suggest finds the known name a mistyped one was meant to be: a
// flag, a command or a YAML field. It imports only the standard library.
package suggest

import "strings"

// Closest returns the name among known that word was most likely meant to
// be, and whether there is one. A name matches when it differs from word
// only in case, '-' and '_' (dry_run for dryRun), or when it is within
// MaxDistance edits (insertions, deletions, substitutions or swaps of two
// neighbours) of word: 2, or 1 for a word of 4 bytes or fewer, so that a
// short word does not match every other short name. Among matches the
// fewest edits win, then the first in known.
func Closest(word string, known []string) (string, bool) {
	best, bestDist := "", -1
	norm := fold(word)
	for _, k := range known {
		d := 0
		if fold(k) != norm {
			d = Distance(word, k)
			if d > MaxDistance(word) {
				continue
			}
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	return best, bestDist >= 0
}

// MaxDistance is the most edits Closest allows between word and a name.
func MaxDistance(word string) int {
	if len(word) <= 4 {
		return 1
	}
	return 2
}

// fold is s in lower case without '-' and '_'.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' {
			return -1
		}
		return r
	}, strings.ToLower(s))
}

// Distance is the optimal string alignment distance between a and b, in
// bytes: the fewest insertions, deletions, substitutions and swaps of two
// adjacent bytes that turn a into b, no byte edited twice.
func Distance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
