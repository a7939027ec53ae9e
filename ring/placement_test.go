package ring

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/bucket"
)

// TestInlinePlacement: an inline key is owned, and succeeded, as the
// caller's key is, whatever limit it names; other keys hash whole.
func TestInlinePlacement(t *testing.T) {
	if inlineTag != bucket.NamespaceInline {
		t.Fatalf("inlineTag %q, bucket.NamespaceInline %q", inlineTag, bucket.NamespaceInline)
	}
	r, err := New(DefaultConfig(), []string{"a", "b", "c", "d", "e"})
	if err != nil {
		t.Fatal(err)
	}
	limits := []bucket.Limit{
		bucket.MustLimit(bucket.TokenBucket, 3, time.Hour, 0),
		bucket.MustLimit(bucket.TokenBucket, 1000000, time.Millisecond, 0),
		bucket.MustLimit(bucket.FixedWindow, 10, time.Second, 0),
	}
	// A caller's key that itself begins with the inline tag.
	for _, key := range []string{"i|x|y", "i|", "i||"} {
		l := limits[0]
		want, _ := r.Owner(bucket.InlineKey(key, &l))
		if got, _ := r.Owner(bucket.InlineOwnerKey(key)); got != want {
			t.Fatalf("caller's key %q: InlineOwnerKey owned by %s, its InlineKey by %s", key, got, want)
		}
	}
	for i := range 200 {
		key := "user:" + string(rune('a'+i%26)) + "|x|" + string(rune('0'+i%10))
		want, _ := r.Owner(key)
		wantSucc := r.Successors(key, 2)
		if got, _ := r.Owner(bucket.InlineOwnerKey(key)); got != want {
			t.Fatalf("Owner(InlineOwnerKey(%q)) = %s, want %s", key, got, want)
		}
		for _, l := range limits {
			got, _ := r.Owner(bucket.InlineKey(key, &l))
			if got != want {
				t.Fatalf("Owner(InlineKey(%q, %v)) = %s, Owner(%q) = %s", key, l, got, key, want)
			}
			if s := r.Successors(bucket.InlineKey(key, &l), 2); s[0] != wantSucc[0] || s[1] != wantSucc[1] {
				t.Fatalf("Successors(InlineKey(%q)) = %v, want %v", key, s, wantSucc)
			}
		}
	}
	for _, k := range []string{"i|", "i|nospec", "p|api|tier:free|user:1", "r|shop|user=1"} {
		if got := placement(k); got != k {
			t.Errorf("placement(%q) = %q, want the whole key", k, got)
		}
	}
	if got := placement("i|tb:1:1s:1|"); got != "" {
		t.Errorf("placement of an empty caller key = %q", got)
	}
}
