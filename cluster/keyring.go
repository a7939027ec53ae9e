package cluster

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// KeyLen is the length of the keys NewKey makes, in bytes (AES-256).
const KeyLen = 32

// MaxLabelLen is the longest Config.Label, in bytes (memberlist.LabelMaxSize).
const MaxLabelLen = memberlist.LabelMaxSize

// ErrNoEncryption is returned by the keyring methods of a Cluster started
// without Config.Keys: encryption cannot be turned on in a running cluster.
var ErrNoEncryption = errors.New("cluster: gossip encryption is off (Config.Keys is empty)")

// NewKey returns a new random gossip key of KeyLen bytes, from crypto/rand.
func NewKey() ([]byte, error) {
	k := make([]byte, KeyLen)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("cluster: new key: %w", err)
	}
	return k, nil
}

// checkKey reports whether k can be a gossip key: 16, 24 or 32 bytes, for
// AES-128, AES-192 or AES-256.
func checkKey(k []byte) error {
	if l := len(k); l != 16 && l != 24 && l != 32 {
		return fmt.Errorf("must be 16, 24 or 32 bytes (AES-128, -192 or -256), got %d", l)
	}
	return nil
}

// newKeyring builds memberlist's keyring from keys (validated, at least
// one), the first the primary. The keys are copied.
func newKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	cp := cloneKeys(keys)
	return memberlist.NewKeyring(cp[1:], cp[0])
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}

// Keys returns a copy of this member's keyring, the primary key first, or
// nil when encryption is off.
func (c *Cluster) Keys() [][]byte {
	if c.keyring == nil {
		return nil
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	return cloneKeys(c.keyring.GetKeys())
}

// AddKey adds key to this member's keyring: gossip encrypted with it is
// accepted from now on. See "Gossip encryption" in the package
// documentation for the order of a rotation. Adding a key already there does nothing. The key is
// copied. It returns ErrNoEncryption when the Cluster was started without
// Config.Keys.
func (c *Cluster) AddKey(key []byte) error {
	if c.keyring == nil {
		return ErrNoEncryption
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("cluster: add key: %w", err)
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	if err := c.keyring.AddKey(bytes.Clone(key)); err != nil {
		return fmt.Errorf("cluster: add key: %w", err)
	}
	return nil
}

// UseKey makes key, which must be in the keyring, the primary key: this
// member encrypts everything it sends with it from now on. Every other
// member must have the key (AddKey) first, or it refuses this member's
// gossip and soon declares it dead.
func (c *Cluster) UseKey(key []byte) error {
	if c.keyring == nil {
		return ErrNoEncryption
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	if err := c.keyring.UseKey(key); err != nil {
		return fmt.Errorf("cluster: use key: %w", err)
	}
	return nil
}

// RemoveKey removes key from this member's keyring: gossip encrypted with
// it is refused from now on. The primary key cannot be removed (UseKey
// another first). Removing a key that is not there does nothing.
func (c *Cluster) RemoveKey(key []byte) error {
	if c.keyring == nil {
		return ErrNoEncryption
	}
	c.keyMu.Lock()
	defer c.keyMu.Unlock()
	keys := c.keyring.GetKeys()
	i := slices.IndexFunc(keys, func(k []byte) bool { return bytes.Equal(k, key) })
	switch {
	case i < 0:
		return nil
	case i == 0:
		return errors.New("cluster: remove key: it is the primary key (UseKey another first)")
	}
	// memberlist's Keyring.RemoveKey shifts the later keys down in place,
	// in the very slice that GetKeys handed to the goroutines decrypting
	// packets (a data race), unless the key is the last one. So take the
	// later keys off from the end, remove key, and put them back. For the
	// moment this takes, gossip under those later keys is refused (and
	// retransmitted or retried by memberlist); with the usual two keys there
	// are none.
	later := cloneKeys(keys[i+1:])
	for j := len(later) - 1; j >= 0; j-- {
		if err := c.keyring.RemoveKey(later[j]); err != nil {
			return fmt.Errorf("cluster: remove key: %w", err)
		}
	}
	if err := c.keyring.RemoveKey(key); err != nil {
		return fmt.Errorf("cluster: remove key: %w", err)
	}
	for _, k := range later {
		if err := c.keyring.AddKey(k); err != nil {
			return fmt.Errorf("cluster: remove key: %w", err)
		}
	}
	return nil
}

// SetKeys makes this member's keyring exactly keys, the first the primary,
// in three steps: add the new keys, switch the primary, remove the keys not
// listed. It is what a member does when its key file changes; the rotation
// order (see AddKey) is still the operator's to follow across members.
// keys must not be empty. On an error the keyring may be part way.
func (c *Cluster) SetKeys(keys [][]byte) error {
	if c.keyring == nil {
		return ErrNoEncryption
	}
	if len(keys) == 0 {
		return errors.New("cluster: set keys: at least one key is required")
	}
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return fmt.Errorf("cluster: set keys: key %d: %w", i, err)
		}
	}
	for _, k := range keys {
		if err := c.AddKey(k); err != nil {
			return err
		}
	}
	if err := c.UseKey(keys[0]); err != nil {
		return err
	}
	for _, old := range c.Keys() {
		if !slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, old) }) {
			if err := c.RemoveKey(old); err != nil {
				return err
			}
		}
	}
	return nil
}
