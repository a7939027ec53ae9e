package bucket

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

// TestSpec: limits with the same parameters share a Spec, any difference
// gives another, and no Spec is longer than the room a namespace has.
func TestSpec(t *testing.T) {
	for i, tc := range []struct {
		l    Limit
		want string
	}{
		{MustLimit(TokenBucket, 10, time.Second, 50), "tb:10:1s:50"},
		{MustLimit(TokenBucket, 10, time.Second, 0), "tb:10:1s:10"},
		{MustLimit(TokenBucket, 10, time.Second, 10), "tb:10:1s:10"},
		{MustLimit(LeakyBucket, 10, time.Second, 0), "lb:10:1s:10"},
		{MustLimit(FixedWindow, 3, time.Hour, 99), "fw:3:1h0m0s:3"},
		{MustLimit(SlidingWindowLog, 3, time.Hour, 0), "swl:3:1h0m0s:3"},
		{MustLimit(SlidingWindowCounter, 3, 1500*time.Microsecond, 0), "swc:3:1.5ms:3"},
		{MustLimit(FixedWindow, MaxWindowCount, time.Second, 0), "fw:4294967295:1s:4294967295"},
	} {
		if got := tc.l.Spec(); got != tc.want {
			t.Errorf("step %d: %v.Spec() = %q want %q", i, tc.l, got, tc.want)
		}
	}
	longest := MustLimit(SlidingWindowCounter, MaxCount, MaxPer-time.Nanosecond, 0)
	if n := len(InlineKey("", &longest)); n > MaxNamespaceLen || strings.Contains(longest.Spec(), "|") {
		t.Fatalf("InlineKey of %v adds %d bytes, more than MaxNamespaceLen %d", longest, n, MaxNamespaceLen)
	}
}

// TestInlineKeyNamespaces: an inline key never equals a key of another
// namespace, whatever the caller's key, and two limits never share one.
func TestInlineKeyNamespaces(t *testing.T) {
	a, b := MustLimit(TokenBucket, 3, time.Hour, 0), MustLimit(TokenBucket, 1000000, time.Millisecond, 0)
	for _, key := range []string{"api|tier:free|user:u1", "p|api|tier:free|user:u1", "r|shop|user=1", "i|tb:3:1h0m0s:3|u1", "u1"} {
		ka, kb := InlineKey(key, &a), InlineKey(key, &b)
		if ka == kb || !strings.HasPrefix(ka, NamespaceInline) || !strings.HasSuffix(ka, "|"+key) {
			t.Errorf("InlineKey(%q): %q and %q", key, ka, kb)
		}
		for _, ns := range []string{NamespacePolicy, NamespaceRLS, NamespaceRLSOverride, NamespaceConcurrency} {
			if strings.HasPrefix(ka, ns) {
				t.Errorf("InlineKey(%q) = %q is in namespace %q", key, ka, ns)
			}
		}
	}
	if err := CheckRequestKey(strings.Repeat("k", MaxKeyLen+1)); err == nil {
		t.Error("CheckRequestKey accepted a key of MaxKeyLen+1 bytes")
	}
	long := strings.Repeat("k", MaxKeyLen)
	if err := CheckKey(InlineKey(long, &a)); err != nil || CheckRequestKey(long) != nil {
		t.Errorf("the longest request key in its namespace: %v", err)
	}
}

// TestFixedWindowFullUint32: a fixed window holds every count an Envoy
// requests_per_unit can give, exactly.
func TestFixedWindowFullUint32(t *testing.T) {
	l, err := NewLimit(FixedWindow, MaxWindowCount, time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := New(l)
	take := func(at, cost int64) Decision {
		t.Helper()
		d, err := b.TakeAt(clock.Instant(at), cost)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := take(0, MaxWindowCount-1); !d.Allowed || d.Remaining != 1 || d.Limit != MaxWindowCount {
		t.Fatalf("take of %d = %+v", int64(MaxWindowCount-1), d)
	}
	if d := take(1, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("last unit = %+v", d)
	}
	if d := take(2, 1); d.Allowed {
		t.Fatalf("unit %d admitted: %+v", int64(MaxWindowCount)+1, d)
	}
	if _, err := NewLimit(TokenBucket, MaxWindowCount, time.Second, 0); err == nil {
		t.Fatal("a token bucket above MaxCount accepted")
	}
}

func TestInlineKeyAllocatesOnce(t *testing.T) {
	l := MustLimit(TokenBucket, 10, time.Second, 50)
	if n := testing.AllocsPerRun(100, func() { InlineKey("user:42", &l) }); n != 1 {
		t.Errorf("InlineKey: %v allocations, want 1 (the key)", n)
	}
}
