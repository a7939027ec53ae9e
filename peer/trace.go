package peer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Tracing across the hop. Checks travel batched on a stream that stays
// open, so a span of the stream says nothing about one check: each check
// instead carries its own W3C trace context (field Check.trace) when the
// context it was sent with holds a sampled span (Config.PropagateTrace),
// and a Server with a tracer (ServerConfig.TracerProvider) decides it
// inside a span "ringlimit.peer.check" whose parent is that context. A check without a
// trace context has exactly the bytes it had before the field existed, and
// a node that does not know the field skips it (protobuf's rule for
// unknown fields), so traced and untraced nodes mix in one cluster. No
// span attribute names a key.

// traceContextLen is the length of the field trace: trace id (16 bytes),
// span id (8), trace flags (1), as in a W3C traceparent.
const traceContextLen = 25

// traceContext is a span context as the wire carries it.
type traceContext [traceContextLen]byte

// traceOf returns the trace context to send with the checks of ctx, and
// whether there is one: only for a valid, sampled span context.
func traceOf(ctx context.Context) (traceContext, bool) {
	var tc traceContext
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return tc, false
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(tc[:16], tid[:])
	copy(tc[16:24], sid[:])
	tc[24] = byte(sc.TraceFlags())
	return tc, true
}

// spanContext returns tc as a remote span context (not valid when its ids
// are zero).
func (tc *traceContext) spanContext() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], tc[:16])
	copy(sid[:], tc[16:24])
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(tc[24]), Remote: true})
}

// Span attributes of "ringlimit.peer.check"; keys are left out (user data).
const (
	attrCost      = attribute.Key("ringlimit.cost")
	attrAlgorithm = attribute.Key("ringlimit.algorithm")
	attrAllowed   = attribute.Key("ringlimit.allowed")
	attrRefund    = attribute.Key("ringlimit.refund")
	attrFinal     = attribute.Key("ringlimit.final")
	attrRedirect  = attribute.Key("ringlimit.redirect")
	attrFull      = attribute.Key("ringlimit.store_full")
	attrFrom      = attribute.Key("ringlimit.peer.from")
	attrBatch     = attribute.Key("ringlimit.peer.batch_checks")
)

// PeerCheckSpan is the name of the span in which an owner decides a traced
// check.
const PeerCheckSpan = "ringlimit.peer.check"

// tracedCheck is a check of a received batch decided inside a span.
type tracedCheck struct {
	i    int
	span trace.Span
}

// startSpans starts a span for each check of pb that carries a trace
// context, before the batch is decided.
func (s *Server) startSpans(ctx context.Context, pb *received) {
	pb.spans = pb.spans[:0]
	if s.tracer == nil {
		return
	}
	for i := range pb.in.checks {
		c := &pb.in.checks[i]
		if !c.traced {
			continue
		}
		sc := c.trace.spanContext()
		if !sc.IsValid() {
			continue
		}
		q := &pb.reqs[i]
		_, span := s.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), PeerCheckSpan,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrCost.Int64(q.Cost), attrAlgorithm.String(q.Limit.Algorithm().String()),
				attrFrom.String(pb.in.from), attrBatch.Int(len(pb.in.checks))))
		pb.spans = append(pb.spans, tracedCheck{i: i, span: span})
	}
}

// endSpans ends the spans startSpans started, with each check's decision.
func (pb *received) endSpans() {
	for _, t := range pb.spans {
		q, a := &pb.reqs[t.i], &pb.answers[t.i]
		switch {
		case a.Redirect != "":
			t.span.SetAttributes(attrRedirect.String(a.Redirect))
		case q.Refund:
			t.span.SetAttributes(attrRefund.Bool(true))
		case a.Full:
			t.span.SetAttributes(attrFull.Bool(true))
		default:
			t.span.SetAttributes(attrAllowed.Bool(a.Allowed))
		}
		if q.Final {
			t.span.SetAttributes(attrFinal.Bool(true))
		}
		t.span.End()
	}
	clear(pb.spans)
	pb.spans = pb.spans[:0]
}
