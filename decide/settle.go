package decide

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringlimit/ringlimit/forward"
)

// Reserve rides OpCheck: an inline check with forward.Check.Reserve set is
// planned with AddInline and decided as any check; its answer carries the
// reservation (Answer.Reservation). A policy request cannot reserve (its
// layers would each need one): ErrReservePolicy refuses it.

// Settler settles reservations. *forward.Router implements it.
type Settler interface {
	Settle(ctx context.Context, id string, cost int64) (forward.SettleResult, error)
}

var _ Settler = (*forward.Router)(nil)

// ErrReservePolicy refuses reserve on a policy request.
var ErrReservePolicy = errors.New("reserve: reserve is for inline limits")

// Settle settles the reservation id at cost under the Decider's deadline
// (see forward.Router.Settle for its errors).
func (d *Decider) Settle(ctx context.Context, id string, cost int64) (forward.SettleResult, error) {
	if d.settler == nil {
		return forward.SettleResult{}, fmt.Errorf("%w: this node settles nothing", forward.ErrUnavailable)
	}
	res, err := d.settler.Settle(d.Bound(ctx), id, cost)
	if err == nil {
		d.act.settles.Add(1)
	}
	return res, err
}
