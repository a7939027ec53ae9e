// Package peerdefault holds the defaults that the two sides of forwarding
// must agree on: the router (package forward), which waits for owners and
// keeps the state of keys it handed off, and the peer transport (package
// peer), which bounds each call and keeps a departed member dialable.
// Each package's DefaultConfig takes its values from here, so that a
// change to one cannot leave the other behind.
package peerdefault

import "time"

// Timeout is the deadline of a peer call (peer.Config.Timeout) and how
// long a check waits for an owner's state or for a new member
// (forward.Config.PeerTimeout).
const Timeout = 500 * time.Millisecond

// Grace is how long after a ring change a new owner may still fetch a
// key's state from its previous owner: the previous owner keeps the state
// it handed off (forward.Config.Grace), and the pool keeps the departed
// member dialable (peer.Config.Grace), for as long.
const Grace = 3 * time.Second
