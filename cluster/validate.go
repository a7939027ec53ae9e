package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Validate reports the first problem with c, after zero fields are given
// their defaults; it does not modify c. New calls it.
func (c *Config) Validate() error {
	v := c.withDefaults()
	if v.Name == "" {
		return errors.New("cluster: Name is required")
	}
	if v.Clock == nil {
		return errors.New("cluster: Config.Clock is required")
	}
	if v.Transport == nil {
		if err := v.checkBind(); err != nil {
			return err
		}
	}
	if v.PeerAddr == "" {
		return errors.New("cluster: PeerAddr is required")
	}
	if err := checkDialable(v.PeerAddr); err != nil {
		return fmt.Errorf("cluster: PeerAddr: %w", err)
	}
	if v.APIAddr != "" {
		if err := checkDialable(v.APIAddr); err != nil {
			return fmt.Errorf("cluster: APIAddr: %w", err)
		}
	}
	if v.HTTPAddr != "" {
		if err := checkDialable(v.HTTPAddr); err != nil {
			return fmt.Errorf("cluster: HTTPAddr: %w", err)
		}
	}
	for i, s := range v.Seeds {
		if err := checkSeed(s); err != nil {
			return fmt.Errorf("cluster: Seeds[%d]: %w", i, err)
		}
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"JoinRetryInterval", v.JoinRetryInterval},
		{"RejoinInterval", v.RejoinInterval},
		{"ProbeInterval", v.ProbeInterval},
		{"ProbeTimeout", v.ProbeTimeout},
		{"GossipInterval", v.GossipInterval},
		{"GossipToTheDeadTime", v.GossipToTheDeadTime},
		{"PushPullInterval", v.PushPullInterval},
		{"TCPTimeout", v.TCPTimeout},
		{"DeadNodeReclaimTime", v.DeadNodeReclaimTime},
		{"DepartedRetention", v.DepartedRetention},
	}
	for _, d := range durations {
		if d.v < 0 {
			return fmt.Errorf("cluster: %s must not be negative, got %v", d.name, d.v)
		}
	}
	for i, k := range v.Keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("cluster: Keys[%d]: %w", i, err)
		}
		for j := range i {
			if bytes.Equal(v.Keys[j], k) {
				return fmt.Errorf("cluster: Keys[%d] repeats Keys[%d]", i, j)
			}
		}
	}
	if len(v.Label) > MaxLabelLen {
		return fmt.Errorf("cluster: Label must be at most %d bytes, got %d", MaxLabelLen, len(v.Label))
	}
	if v.ProbeTimeout >= v.ProbeInterval {
		return fmt.Errorf("cluster: ProbeTimeout (%v) must be below ProbeInterval (%v)", v.ProbeTimeout, v.ProbeInterval)
	}
	if v.SuspicionMult < 1 {
		return fmt.Errorf("cluster: SuspicionMult must be ≥ 1, got %d", v.SuspicionMult)
	}
	if v.SuspicionMaxTimeoutMult < 1 {
		return fmt.Errorf("cluster: SuspicionMaxTimeoutMult must be ≥ 1, got %d", v.SuspicionMaxTimeoutMult)
	}
	return nil
}

// checkBind checks BindAddr and AdvertiseAddr (unused with a Transport).
func (c *Config) checkBind() error {
	if c.BindAddr == "" {
		return errors.New("cluster: BindAddr is required")
	}
	if _, _, err := splitIPPort(c.BindAddr); err != nil {
		return fmt.Errorf("cluster: BindAddr: %w", err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitIPPort(c.AdvertiseAddr); err != nil {
			return fmt.Errorf("cluster: AdvertiseAddr: %w", err)
		}
	}
	return nil
}
