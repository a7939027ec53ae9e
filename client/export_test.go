package client

// AbandonedChecks returns how many checks c never sent because their
// caller gave up while they waited in a batcher's queue.
func AbandonedChecks(c *Client) int64 { return c.abandoned.Load() }
