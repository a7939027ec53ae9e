package node

// WriteState writes n's state file now (n has a DataDir).
func WriteState(n *Node) error { return n.state.write() }

// StopStateLoop ends n's state file loop (its Close still writes one).
func StopStateLoop(n *Node) { n.state.stop() }
