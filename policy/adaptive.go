package policy

import (
	"errors"

	"github.com/ringlimit/ringlimit/adaptive"
)

// parseAdaptive parses a layer's adaptive block. Its errors name the field
// (adaptive.window: ...), prefixed by the caller with the layer's place.
// A hot-key lease admits from tokens the owner handed out beforehand, at
// the limit of that moment: it is refused with an adaptive limit. The
// entry node's pre-limiter counts against the layer's own limit, not the
// owner's current one: an adaptive layer is not pre-limited (a policy's
// prelimit does not apply to it).
func parseAdaptive(y adaptive.YAML, l *Layer) (*adaptive.Spec, error) {
	s, err := adaptive.ParseSpec(y)
	if err != nil {
		return nil, err
	}
	if l.Lease {
		return nil, errors.New("adaptive: a hot-key lease (lease: true) cannot follow an adaptive limit")
	}
	l.Prelimit = 0
	return &s, nil
}
