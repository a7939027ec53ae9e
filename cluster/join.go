package cluster

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Joining and re-joining.
//
// memberlist gossips only with members it believes alive (and, for
// GossipToTheDeadTime, with the freshly dead), and joins only when told to.
// So after a partition each side declares the other dead and, left alone,
// they never talk again. joinLoop therefore keeps re-joining: every
// RejoinInterval it contacts the seeds and the members it saw die, unless
// they are alive. A push/pull with a member of the other side tells each one
// that it was declared dead; each refutes (a higher incarnation), and the
// next exchange, or the gossip that follows, makes both sides alive again.

// Log messages of the join loop (tests count them).
const (
	msgJoined     = "cluster: joined"
	msgJoinFailed = "cluster: join failed, will retry"
	msgRejoin     = "cluster: re-joining"
)

// markJoined records the first join and has the Listener told the members.
func (c *Cluster) markJoined() {
	c.joined.Store(true)
	c.changed()
}

// othersAlive reports whether a member other than this one is alive or
// suspect here: it joined this member before this member reached a seed.
func (c *Cluster) othersAlive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.members {
		if r.m.Name != c.cfg.Name && r.m.State.onRing() {
			return true
		}
	}
	return false
}

// maxParallelJoins bounds the join calls of one round in flight at once.
// A call to an unreachable address takes up to TCPTimeout, so they are made
// in parallel: one round (and Close) waits about one TCPTimeout, not one
// per unreachable target.
const maxParallelJoins = 16

// otherSeeds returns the configured seeds minus this member's own address.
func (c *Cluster) otherSeeds() []string {
	var out []string
	for _, s := range c.cfg.Seeds {
		if s == c.localAddr || s == c.cfg.BindAddr {
			continue
		}
		out = append(out, s)
	}
	return out
}

// joinLoop first joins the seeds (if hasSeeds), retrying every
// JoinRetryInterval until one answers, then runs a re-join round every
// RejoinInterval. It returns when ctx is cancelled or this member leaves.
func (c *Cluster) joinLoop(ctx context.Context, hasSeeds bool) {
	defer close(c.joinDone)
	timer := c.clock.NewTimer(0)
	defer timer.Stop()
	joined := !hasSeeds // New stored it before starting the event loop
	for attempt := 1; ; {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-c.joinNow:
			if joined {
				continue
			}
		}
		if c.leaving.Load() {
			return
		}
		if joined {
			c.rejoin(ctx)
		} else {
			joined = c.join(ctx, attempt) // join stores c.joined itself, before telling the Listener
			attempt++
		}
		if ctx.Err() != nil {
			return
		}
		if joined {
			timer.Reset(c.cfg.RejoinInterval)
		} else {
			timer.Reset(c.cfg.JoinRetryInterval)
		}
	}
}

// join is one attempt at the first join: it contacts every address of the
// seeds that is not already a live member, and reports whether this member
// is now in a cluster: a seed answered, another member joined this one
// first, or every seed is this member. Only then is the Listener told the
// members (see eventLoop).
func (c *Cluster) join(ctx context.Context, attempt int) bool {
	if c.othersAlive() {
		c.log.Info(msgJoined, "contacted", 0, "seeds", c.cfg.Seeds, "attempt", attempt, "note", "another member joined this one first")
		c.markJoined()
		return true
	}
	seeds, resolveErr := c.resolveSeeds(ctx)
	targets := c.withoutLive(seeds)
	if len(seeds) > 0 && len(targets) == 0 {
		c.log.Info(msgJoined, "contacted", 0, "seeds", c.cfg.Seeds, "attempt", attempt, "note", "every seed is this member")
		c.markJoined()
		return true
	}
	c.joining.Store(true)
	n, err := c.joinEach(targets)
	if n > 0 && ctx.Err() == nil {
		c.joined.Store(true)
	}
	c.joining.Store(false)
	c.changed() // the members the seeds told of, all at once
	if ctx.Err() != nil {
		return false
	}
	if n > 0 {
		c.log.Info(msgJoined, "contacted", n, "seeds", targets, "attempt", attempt)
		return true
	}
	c.log.Warn(msgJoinFailed, "seeds", c.cfg.Seeds, "addrs", targets, "attempt", attempt,
		"retry_in", c.cfg.JoinRetryInterval, "err", errors.Join(resolveErr, err))
	return false
}

// rejoin is one re-join round: it contacts the seeds and the members
// declared dead within DepartedRetention, minus this member and the members
// alive or suspect. A healthy cluster whose seeds are all alive makes no
// call. Failures are logged at debug level: an unreachable target is
// expected (the member is really gone, or the partition lasts).
func (c *Cluster) rejoin(ctx context.Context) {
	targets, pruned := c.rejoinTargets(ctx)
	if pruned {
		c.changed() // the Listener's list lost a member
	}
	if len(targets) == 0 {
		return
	}
	n, err := c.joinEach(targets)
	c.log.Debug(msgRejoin, "targets", targets, "contacted", n, "err", err)
}

// rejoinTargets returns the addresses a re-join round contacts, sorted: the
// seeds' addresses and the gossip addresses of the members dead (not left)
// within DepartedRetention, minus this member's and those of the members
// alive or suspect. It forgets the members departed before
// DepartedRetention, and reports whether there were any.
func (c *Cluster) rejoinTargets(ctx context.Context) (targets []string, pruned bool) {
	seeds, err := c.resolveSeeds(ctx)
	if err != nil {
		c.log.Debug("cluster: cannot resolve seeds", "err", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pruned = c.pruneLocked(c.clock.Now())
	for _, r := range c.members {
		if r.m.State == StateDead {
			seeds = append(seeds, r.m.GossipAddr)
		}
	}
	return c.withoutLiveLocked(seeds), pruned
}

// resolveSeeds returns the addresses of the seeds other than this member's:
// every address each hostname resolves to (looked up now), and IP literals
// as they are. The error joins the failed lookups; the addresses of the
// others are still returned.
func (c *Cluster) resolveSeeds(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.TCPTimeout)
	defer cancel()
	var out []string
	var errs []error
	for _, s := range c.otherSeeds() {
		if isSRVName(s) {
			addrs, err := c.resolveSRV(ctx, s)
			if err != nil {
				errs = append(errs, err)
			}
			out = append(out, addrs...)
			continue
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil { // cannot happen: Validate checked the seeds
			errs = append(errs, err)
			continue
		}
		hosts := []string{host}
		if net.ParseIP(host) == nil {
			if hosts, err = c.lookupHost(ctx, host); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		for _, h := range hosts {
			out = append(out, net.JoinHostPort(canonicalIP(h), port))
		}
	}
	return out, errors.Join(errs...)
}

// resolveSRV returns the addresses of every target of the SRV name, each
// with its target's port. The error joins the failed lookups.
func (c *Cluster) resolveSRV(ctx context.Context, name string) ([]string, error) {
	_, srvs, err := c.cfg.Resolver.LookupSRV(ctx, "", "", name)
	if err != nil && len(srvs) == 0 {
		return nil, err
	}
	var out []string
	var errs []error
	for _, srv := range srvs {
		port := strconv.Itoa(int(srv.Port))
		host := strings.TrimSuffix(srv.Target, ".")
		hosts := []string{host}
		if net.ParseIP(host) == nil {
			if hosts, err = c.lookupHost(ctx, host); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		for _, h := range hosts {
			out = append(out, net.JoinHostPort(canonicalIP(h), port))
		}
	}
	return out, errors.Join(errs...)
}

// lookupHost resolves a hostname with the configured resolver.
func (c *Cluster) lookupHost(ctx context.Context, host string) ([]string, error) {
	return c.cfg.Resolver.LookupHost(ctx, host)
}

// canonicalIP returns an IP address in the form memberlist reports
// addresses in, and anything else as it is.
func canonicalIP(h string) string {
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return h
}

// withoutLive returns addrs without duplicates, this member's own address,
// and the gossip addresses of the members alive or suspect.
func (c *Cluster) withoutLive(addrs []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.withoutLiveLocked(addrs)
}

func (c *Cluster) withoutLiveLocked(addrs []string) []string {
	skip := map[string]bool{c.localAddr: true, c.cfg.BindAddr: true}
	for _, r := range c.members {
		if r.m.State.onRing() {
			skip[r.m.GossipAddr] = true
		}
	}
	var out []string
	for _, a := range addrs {
		if !skip[a] {
			skip[a] = true
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// joinEach asks memberlist to join each address, in parallel (at most
// maxParallelJoins at once), and returns how many answered and the errors of
// the others. Each call is bounded by TCPTimeout.
func (c *Cluster) joinEach(addrs []string) (int, error) {
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		contacted int
		errs      []error
	)
	sem := make(chan struct{}, maxParallelJoins)
	for _, a := range addrs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			n, err := c.ml.Join([]string{a})
			mu.Lock()
			contacted += n
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return contacted, errors.Join(errs...)
}
