package forward

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ForwardSpan is the name of the span on the entry node around each wait
// for an owner's (or a stand-in's) answer, when Config.TracerProvider is
// set and the check's context holds a span: its parent is that span (the
// API request's), and the peer transport carries its context to the
// member asked, whose span "ringlimit.peer.check" is its child. A check
// redirected once or decided by a stand-in makes one span per member
// asked. Its attributes name the member asked, never a key.
const ForwardSpan = "ringlimit.forward"

const (
	attrPeer    = attribute.Key("ringlimit.peer")
	attrChecks  = attribute.Key("ringlimit.checks")
	attrFinal   = attribute.Key("ringlimit.final")
	attrDecider = attribute.Key("ringlimit.decider")
)

// startForward starts the span of a wait for name's answer to n checks,
// when ctx holds a span to be its parent (a check made without one, such
// as a lease's refund in the background, starts no trace of its own); it
// returns a nil span otherwise.
func (r *Router) startForward(ctx context.Context, name string, n int, final bool) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, nil
	}
	return r.tracer.Start(ctx, ForwardSpan, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrPeer.String(name), attrChecks.Int(n), attrFinal.Bool(final)))
}

func endForward(span trace.Span, decider string, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attrDecider.String(decider))
	}
	span.End()
}
