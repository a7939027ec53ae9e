package peer

import (
	"testing"
)

// A decision's strings are parsed in place, into the answer's buffer, which
// the stream's next answer overwrites. detach (called for every decision
// handed to a caller) gives them memory of their own: a forwarded
// reserve's id and a redirect stay what the owner answered after the
// buffer is reused.
func TestDetachOutlivesTheBuffer(t *testing.T) {
	const id, to = "r1.aS1leQ.AAAAAAAAAAAAAAAA", "node-3"
	wire := (&checkAnswer{owner: "node-2", id: 1, decisions: []wireDecision{{allowed: true, reservation: id}, {redirect: to}}}).appendTo(nil)
	parse := func() *checkAnswer {
		var a checkAnswer
		b := a.buffer(len(wire))
		copy(b, wire)
		if err := a.parse(b); err != nil {
			t.Fatal(err)
		}
		return &a
	}
	overwrite := func(a *checkAnswer) {
		for i := range a.buf {
			a.buf[i] = 'x'
		}
	}

	// Without detach the parsed strings change with the buffer: what the
	// test guards against is real.
	raw := parse()
	got := raw.decisions
	overwrite(raw)
	if got[0].reservation == id && got[1].redirect == to {
		t.Fatal("parsed strings did not alias the buffer: the test checks nothing")
	}

	a := parse()
	out := make([]wireDecision, len(a.decisions))
	copy(out, a.decisions)
	for j := range out {
		out[j].detach()
	}
	overwrite(a)
	if ans := out[0].toAnswer(); ans.Reservation != id || !ans.Allowed {
		t.Errorf("reservation after the buffer was reused: %q, want %q", ans.Reservation, id)
	}
	if ans := out[1].toAnswer(); ans.Redirect != to {
		t.Errorf("redirect after the buffer was reused: %q, want %q", ans.Redirect, to)
	}
}
