package bucket

import (
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/clock"
)

func TestSetAndCharge(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingWindowLog, SlidingWindowCounter} {
		t.Run(alg.String(), func(t *testing.T) {
			s, err := NewStore(StoreConfig{MaxKeys: 16, Shards: 1})
			if err != nil {
				t.Fatal(err)
			}
			l, err := NewLimit(alg, 100, time.Hour, 100)
			if err != nil {
				t.Fatal(err)
			}
			now := clock.Instant(time.Hour) // inside one fixed window
			used := func() int64 {
				t.Helper()
				_, u, ok := s.Used("k", now)
				if !ok {
					t.Fatal("k not held")
				}
				return u
			}
			if err := s.Charge("k", &l, now, 30); err != nil || used() != 30 {
				t.Fatalf("charge of a new key: used %d, err %v; want 30", used(), err)
			}
			if err := s.Charge("k", &l, now, 25); err != nil || used() != 55 {
				t.Fatalf("second charge: used %d, err %v; want 55", used(), err)
			}
			if err := s.Charge("k", &l, now, 80); err != nil || used() != 100 {
				t.Fatalf("charge beyond capacity: used %d, err %v; want 100", used(), err)
			}
			if err := s.Set("k", &l, now, 12); err != nil || used() != 12 {
				t.Fatalf("set: used %d, err %v; want 12", used(), err)
			}
			if err := s.Charge("k", &l, now, 0); err != nil || used() != 12 {
				t.Fatalf("charge of 0: used %d, err %v; want 12", used(), err)
			}
			d, _ := s.Take("k", &l, now, 88)
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("take of the 88 left: %+v", d)
			}
			if err := s.Set("", &l, now, 1); err == nil {
				t.Fatal("Set accepted an empty key")
			}
			if err := s.Charge("k2", &Limit{}, now, 1); err == nil || s.Has("k2") {
				t.Fatal("Charge accepted a zero limit or stored the key")
			}
		})
	}
}
