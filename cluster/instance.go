package cluster

import (
	"fmt"
	"strings"
	"time"
)

// Instances.
//
// memberlist refuses a name it knows at another address until the old
// holder is declared dead, and for DeadNodeReclaimTime after that. A member
// restarted elsewhere (a Kubernetes pod that comes back with a new IP) would
// then wait out failure detection before it is admitted. So each process
// gossips under its member name followed by an instance tag, "name@" and 16
// hex digits of its start time: a restart is a new memberlist node, admitted
// at once, and the old instance is declared dead by the usual probes. This
// package shows one entry per member name (see pickInstance).

// instanceSep separates the member name from the instance tag.
const instanceSep = '@'

// instanceTagLen is the length of an instance tag: nanoseconds since the
// Unix epoch as 16 hex digits, so that tags compare as their times do.
const instanceTagLen = 16

// instanceName is the memberlist name of a process named name started at
// start.
func instanceName(name string, start time.Time) string {
	return fmt.Sprintf("%s%c%0*x", name, instanceSep, instanceTagLen, uint64(start.UnixNano()))
}

// splitInstance returns the member name and instance tag of a memberlist
// name, or the whole name and "" when it carries no tag.
func splitInstance(mlName string) (name, tag string) {
	i := strings.LastIndexByte(mlName, instanceSep)
	if i <= 0 || len(mlName)-i-1 != instanceTagLen {
		return mlName, ""
	}
	for _, c := range mlName[i+1:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return mlName, ""
		}
	}
	return mlName[:i], mlName[i+1:]
}

// newer reports whether record a should stand for its member name rather
// than b: a member on the ring wins over one that is not, then the later
// instance.
func newer(a, b *record) bool {
	if a.m.State.onRing() != b.m.State.onRing() {
		return a.m.State.onRing()
	}
	return a.tag > b.tag
}

// pickLocked returns, for each member name, the record that stands for it.
func (c *Cluster) pickLocked() map[string]*record {
	out := make(map[string]*record, len(c.members))
	for _, r := range c.members {
		if cur, ok := out[r.m.Name]; !ok || newer(r, cur) {
			out[r.m.Name] = r
		}
	}
	return out
}
