package forward

import (
	"sync"

	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// askScratch is the requests and answers of one ask, handed from ask to
// ask (askScratchPool): CheckSender.Check uses neither once it returns, and
// ask copies out what it keeps.
type askScratch struct {
	reqs    []peermsg.Request
	answers []peermsg.Answer
}

var askScratchPool sync.Pool // of *askScratch

// maxAskScratch is the most checks whose scratch goes back to the pool: a
// rare large request does not leave large arrays in it.
const maxAskScratch = 64

// takeAskScratch returns a scratch with n zero requests and answers.
func takeAskScratch(n int) *askScratch {
	sc, _ := askScratchPool.Get().(*askScratch)
	if sc == nil {
		sc = new(askScratch)
	}
	if cap(sc.reqs) < n {
		sc.reqs, sc.answers = make([]peermsg.Request, n), make([]peermsg.Answer, n)
	}
	sc.reqs, sc.answers = sc.reqs[:n], sc.answers[:n]
	return sc
}

// give clears the scratch (it keeps no key alive in the pool) and puts it
// back.
func (sc *askScratch) give() {
	if cap(sc.reqs) > maxAskScratch {
		return
	}
	clear(sc.reqs)
	clear(sc.answers)
	askScratchPool.Put(sc)
}
