// Package peermsg holds the messages a node exchanges with the owner of a
// key: a check (Request), its answer (Answer) and a key's state (State).
// forward, which sends them, and peer, which carries them, share these
// types, so that neither imports the other and nothing is converted on
// the way to the wire; peer names them peer.Request, peer.Answer and
// peer.State.
package peermsg
