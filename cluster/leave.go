package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leaving the cluster: the leaving flag in this member's metadata, then
// memberlist's leave, each waited for within the caller's context.

// leaveWaitWithoutDeadline bounds how long Leave waits for its broadcast
// when its context has no deadline.
const leaveWaitWithoutDeadline = 5 * time.Second

// Leave announces that this member is leaving and waits, until ctx is done,
// for the announcement to be gossiped (a context without a deadline waits at
// most 5s). The other members then report it as StateLeft and drop it from
// their ring; it keeps answering gossip until Close. It is not an error to
// call Leave twice; the second call returns at once. Leave does not stop the
// Cluster: call Close.
//
// Even when ctx is already done, the leave is still announced (without
// waiting) and later calls report success; the error only says that
// propagation was not confirmed. With too short a ctx some members may report
// this one as dead rather than left: the leaving flag goes out in a first
// broadcast, the leave itself in a second.
func (c *Cluster) Leave(ctx context.Context) error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.closed {
		return ErrClosed
	}
	return c.leaveLocked(ctx)
}

func (c *Cluster) leaveLocked(ctx context.Context) error {
	if c.left {
		return nil
	}
	c.left = true
	// First re-advertise our metadata with the leaving flag, so that peers
	// can tell this departure from a crash, then broadcast the leave itself.
	c.leaving.Store(true)
	var errs []error
	if err := c.announceLeaving(ctx); err != nil {
		errs = append(errs, fmt.Errorf("announce leaving: %w", err))
	}
	if err := c.ml.Leave(waitBudget(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("broadcast leave: %w", err))
	}
	if len(errs) == 0 {
		c.log.Info("cluster: left", "name", c.cfg.Name)
		return nil
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return fmt.Errorf("cluster: leave not confirmed: %w", errors.Join(errs...))
}

// leaveAnnouncePoll is how often announceLeaving looks whether any member
// is left to tell.
const leaveAnnouncePoll = 100 * time.Millisecond

// announceLeaving re-advertises this member's metadata, now with the
// leaving flag, and waits within ctx's budget (waitBudget) until the
// broadcast has gone out. memberlist sends a broadcast only to members
// alive or suspect, and its UpdateNode waits for that until its timeout: a
// member whose last peer leaves meanwhile (two members stopping at once)
// would wait its whole budget for a broadcast nobody is left to receive.
// So while it waits, once no other member is alive or suspect, a newer
// announcement of this member replaces the one waited for: memberlist
// finishes a broadcast that another about the same member replaces, and
// the newer one waits for nothing, since nobody is left.
func (c *Cluster) announceLeaving(ctx context.Context) error {
	budget := waitBudget(ctx)
	done := make(chan error, 1)
	go func() { done <- c.ml.UpdateNode(budget) }()
	poll := time.NewTicker(leaveAnnouncePoll)
	defer poll.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-poll.C:
			if c.ml.NumMembers() <= 1 { // this member alone is alive
				c.ml.UpdateNode(time.Nanosecond)
			}
		}
	}
}

// waitBudget turns ctx into the timeout memberlist wants (where 0 would mean
// "wait forever"). A context that has already ended gets the shortest wait
// there is, whether it had a deadline or was cancelled: the broadcast is
// queued and nothing waits for it. A context's deadline is on the runtime's
// clock (the context package sets and enforces it with time.Now), so the
// time left is measured on that clock too, not on Config.Clock.
func waitBudget(ctx context.Context) time.Duration {
	if ctx.Err() != nil {
		return time.Nanosecond
	}
	d, ok := ctx.Deadline()
	if !ok {
		return leaveWaitWithoutDeadline
	}
	return max(time.Until(d), time.Millisecond)
}
