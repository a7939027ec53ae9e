package peer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/internal/testkit"
)

// A check on a connection that closed under it (its member left the ring,
// or the pool closed, while the caller held it) must not wait for an answer
// that will never come. Before the fix in the batcher it did, about every
// other time, until its ctx ended: the queue send and the batcher's done
// were both ready, and a call queued after the loop's last drain was never
// answered.
func TestCheckOnClosedConnDoesNotHang(t *testing.T) {
	p, err := NewPool(Config{Self: "A", Clock: testkit.NewClock(0)})
	if err != nil {
		t.Fatal(err)
	}
	p.SetMembers(1, map[string]string{"B": testkit.DeadAddr(t)})
	c, err := p.conn("B", false)
	if err != nil {
		t.Fatal(err)
	}
	p.Close(context.Background())
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		_, err := c.check(ctx, []Request{{Key: "k", Limit: hourly(10), Cost: 1}}, make([]Answer, 1))
		cancel()
		if !errors.Is(err, errClosed) || time.Since(start) > time.Second {
			t.Fatalf("check %d on a closed connection: %v after %v, want %v at once", i, err, time.Since(start), errClosed)
		}
	}
}
