package peer

import (
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/internal/peermsg"
	peerv1 "github.com/ringlimit/ringlimit/proto/peerv1"
)

// Adaptive limits on the hand-written codec: a check's spec (Check.adaptive,
// message AdaptiveSpec) and a key state's controller (BucketState.adaptive,
// message AdaptiveState), written as proto.Marshal writes them: fields in
// number order, zero values left out, doubles as fixed64.

// Field numbers, from peer.proto.
const (
	fCheckAdaptive, fCheckAdaptiveScope, fDecLimit, fStateAdaptive = 20, 21, 20, 20

	fSpecAlgorithm, fSpecMin, fSpecMax, fSpecInitial, fSpecWindow, fSpecMinSamples = 1, 2, 3, 4, 5, 6
	fSpecErrorThreshold, fSpecLatencyThreshold, fSpecBackoff, fSpecTolerance       = 7, 8, 9, 10
	fSpecSmoothing, fSpecLongWindow, fSpecFallback, fSpecFallbackAfter             = 11, 12, 13, 14

	fAstLimit, fAstLongRTT, fAstLongSum, fAstLongCount, fAstWindowAge, fAstSampleAge = 1, 2, 3, 4, 5, 6
	fAstFallen, fAstSamples, fAstErrors, fAstLatencySum, fAstMaxInFlight             = 7, 8, 9, 10, 11
)

// maxSpecField bounds a spec's durations and counts from a peer before they
// reach adaptive (which clamps them anyway).
const maxSpecField = 1 << 62

func doubleSize(f protowire.Number, v float64) int {
	if math.Float64bits(v) == 0 {
		return 0
	}
	return protowire.SizeTag(f) + 8
}

func appendDouble(b []byte, f protowire.Number, v float64) []byte {
	if math.Float64bits(v) == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, f, protowire.Fixed64Type), math.Float64bits(v))
}

// specInts and specDoubles list a spec's fields by number, in order.
func specFields(s *adaptive.Spec) (ints [10]struct {
	f protowire.Number
	v uint64
}, doubles [4]struct {
	f protowire.Number
	v float64
}) {
	ints[0].f, ints[0].v = fSpecAlgorithm, uint64(s.Algorithm)
	ints[1].f, ints[1].v = fSpecMin, uint64(s.Min)
	ints[2].f, ints[2].v = fSpecMax, uint64(s.Max)
	ints[3].f, ints[3].v = fSpecInitial, uint64(s.Initial)
	ints[4].f, ints[4].v = fSpecWindow, uint64(s.Window)
	ints[5].f, ints[5].v = fSpecMinSamples, uint64(int64(s.MinSamples))
	ints[6].f, ints[6].v = fSpecLatencyThreshold, uint64(s.LatencyThreshold)
	ints[7].f, ints[7].v = fSpecLongWindow, uint64(int64(s.LongWindow))
	ints[8].f, ints[8].v = fSpecFallback, uint64(s.Fallback)
	ints[9].f, ints[9].v = fSpecFallbackAfter, uint64(s.FallbackAfter)
	doubles[0].f, doubles[0].v = fSpecErrorThreshold, s.ErrorThreshold
	doubles[1].f, doubles[1].v = fSpecBackoff, s.Backoff
	doubles[2].f, doubles[2].v = fSpecTolerance, s.Tolerance
	doubles[3].f, doubles[3].v = fSpecSmoothing, s.Smoothing
	return
}

func specSize(s *adaptive.Spec) int {
	ints, doubles := specFields(s)
	n := 0
	for _, f := range ints {
		n += varintSize(f.f, f.v)
	}
	for _, f := range doubles {
		n += doubleSize(f.f, f.v)
	}
	return n
}

// appendSpec writes s's fields in number order.
func appendSpec(b []byte, s *adaptive.Spec) []byte {
	ints, doubles := specFields(s)
	b = appendVarint(b, ints[0].f, ints[0].v) // 1..6
	b = appendVarint(b, ints[1].f, ints[1].v)
	b = appendVarint(b, ints[2].f, ints[2].v)
	b = appendVarint(b, ints[3].f, ints[3].v)
	b = appendVarint(b, ints[4].f, ints[4].v)
	b = appendVarint(b, ints[5].f, ints[5].v)
	b = appendDouble(b, doubles[0].f, doubles[0].v) // 7
	b = appendVarint(b, ints[6].f, ints[6].v)       // 8
	b = appendDouble(b, doubles[1].f, doubles[1].v) // 9
	b = appendDouble(b, doubles[2].f, doubles[2].v) // 10
	b = appendDouble(b, doubles[3].f, doubles[3].v) // 11
	b = appendVarint(b, ints[7].f, ints[7].v)       // 12
	b = appendVarint(b, ints[8].f, ints[8].v)       // 13
	return appendVarint(b, ints[9].f, ints[9].v)    // 14
}

// clampField keeps a count or duration from a peer within [0, maxSpecField].
func clampField(v uint64) int64 { return int64(min(v, maxSpecField)) }

// parseSpec merges b into s, as protobuf merges a message field.
func parseSpec(b []byte, s *adaptive.Spec) error {
	return fields(b, func(tag, v uint64, _ []byte) error {
		switch tag {
		case fSpecAlgorithm << 3:
			s.Algorithm = adaptive.Algorithm(min(v, 255))
		case fSpecMin << 3:
			s.Min = clampField(v)
		case fSpecMax << 3:
			s.Max = clampField(v)
		case fSpecInitial << 3:
			s.Initial = clampField(v)
		case fSpecWindow << 3:
			s.Window = time.Duration(clampField(v))
		case fSpecMinSamples << 3:
			s.MinSamples = int(min(v, math.MaxInt32))
		case fSpecErrorThreshold<<3 | 1:
			s.ErrorThreshold = math.Float64frombits(v)
		case fSpecLatencyThreshold << 3:
			s.LatencyThreshold = time.Duration(clampField(v))
		case fSpecBackoff<<3 | 1:
			s.Backoff = math.Float64frombits(v)
		case fSpecTolerance<<3 | 1:
			s.Tolerance = math.Float64frombits(v)
		case fSpecSmoothing<<3 | 1:
			s.Smoothing = math.Float64frombits(v)
		case fSpecLongWindow << 3:
			s.LongWindow = int(min(v, math.MaxInt32))
		case fSpecFallback << 3:
			s.Fallback = clampField(v)
		case fSpecFallbackAfter << 3:
			s.FallbackAfter = time.Duration(clampField(v))
		}
		return nil
	})
}

// checkSpec reports whether a spec from a peer is one a policy could have
// given: a hostile one is refused rather than run.
func checkSpec(s *adaptive.Spec) error { return s.Validate() }

// checkAdaptive checks the check's spec, if it has one.
func (c *wireCheck) checkAdaptive() error {
	if !c.hasAdaptive {
		return nil
	}
	return checkSpec(&c.adaptive)
}

func specToProto(s *adaptive.Spec) *peerv1.AdaptiveSpec {
	if s == nil {
		return nil
	}
	return &peerv1.AdaptiveSpec{Algorithm: uint32(s.Algorithm), Min: s.Min, Max: s.Max, Initial: s.Initial,
		WindowNs: int64(s.Window), MinSamples: int64(s.MinSamples), ErrorThreshold: s.ErrorThreshold,
		LatencyThresholdNs: int64(s.LatencyThreshold), Backoff: s.Backoff, Tolerance: s.Tolerance,
		Smoothing: s.Smoothing, LongWindow: int64(s.LongWindow), Fallback: s.Fallback, FallbackAfterNs: int64(s.FallbackAfter)}
}

func specFromProto(p *peerv1.AdaptiveSpec) adaptive.Spec {
	c := func(v int64) int64 { return min(max(v, 0), maxSpecField) }
	return adaptive.Spec{Algorithm: adaptive.Algorithm(min(p.GetAlgorithm(), 255)), Min: c(p.GetMin()), Max: c(p.GetMax()),
		Initial: c(p.GetInitial()), Window: time.Duration(c(p.GetWindowNs())), MinSamples: int(min(c(p.GetMinSamples()), math.MaxInt32)),
		ErrorThreshold: p.GetErrorThreshold(), LatencyThreshold: time.Duration(c(p.GetLatencyThresholdNs())),
		Backoff: p.GetBackoff(), Tolerance: p.GetTolerance(), Smoothing: p.GetSmoothing(),
		LongWindow: int(min(c(p.GetLongWindow()), math.MaxInt32)), Fallback: c(p.GetFallback()),
		FallbackAfter: time.Duration(c(p.GetFallbackAfterNs()))}
}

func astSize(a *peermsg.AdaptiveState) int {
	return doubleSize(fAstLimit, a.Limit) + doubleSize(fAstLongRTT, a.LongRTT) + doubleSize(fAstLongSum, a.LongSum) +
		varintSize(fAstLongCount, uint64(a.LongCount)) + varintSize(fAstWindowAge, uint64(a.WindowAge)) +
		varintSize(fAstSampleAge, uint64(a.SampleAge)) + varintSize(fAstFallen, boolVal(a.Fallen)) +
		varintSize(fAstSamples, uint64(a.Samples)) + varintSize(fAstErrors, uint64(a.Errors)) +
		doubleSize(fAstLatencySum, a.LatencySum) + varintSize(fAstMaxInFlight, uint64(a.MaxInFlight))
}

// appendAdaptiveState writes BucketState.adaptive for a (nothing for nil).
func appendAdaptiveState(b []byte, a *peermsg.AdaptiveState) []byte {
	if a == nil {
		return b
	}
	b = protowire.AppendTag(b, fStateAdaptive, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(astSize(a)))
	b = appendDouble(b, fAstLimit, a.Limit)
	b = appendDouble(b, fAstLongRTT, a.LongRTT)
	b = appendDouble(b, fAstLongSum, a.LongSum)
	b = appendVarint(b, fAstLongCount, uint64(a.LongCount))
	b = appendVarint(b, fAstWindowAge, uint64(a.WindowAge))
	b = appendVarint(b, fAstSampleAge, uint64(a.SampleAge))
	b = appendVarint(b, fAstFallen, boolVal(a.Fallen))
	b = appendVarint(b, fAstSamples, uint64(a.Samples))
	b = appendVarint(b, fAstErrors, uint64(a.Errors))
	b = appendDouble(b, fAstLatencySum, a.LatencySum)
	return appendVarint(b, fAstMaxInFlight, uint64(a.MaxInFlight))
}

// adaptiveStateSize is the size of BucketState.adaptive for a.
func adaptiveStateSize(a *peermsg.AdaptiveState) int {
	if a == nil {
		return 0
	}
	return bytesSize(fStateAdaptive, astSize(a))
}

func parseAdaptiveState(b []byte, a *peermsg.AdaptiveState) error {
	return fields(b, func(tag, v uint64, _ []byte) error {
		switch tag {
		case fAstLimit<<3 | 1:
			a.Limit = math.Float64frombits(v)
		case fAstLongRTT<<3 | 1:
			a.LongRTT = math.Float64frombits(v)
		case fAstLongSum<<3 | 1:
			a.LongSum = math.Float64frombits(v)
		case fAstLongCount << 3:
			a.LongCount = int64(v)
		case fAstWindowAge << 3:
			a.WindowAge = time.Duration(v)
		case fAstSampleAge << 3:
			a.SampleAge = time.Duration(v)
		case fAstFallen << 3:
			a.Fallen = v != 0
		case fAstSamples << 3:
			a.Samples = int64(v)
		case fAstErrors << 3:
			a.Errors = int64(v)
		case fAstLatencySum<<3 | 1:
			a.LatencySum = math.Float64frombits(v)
		case fAstMaxInFlight << 3:
			a.MaxInFlight = int64(v)
		}
		return nil
	})
}

func adaptiveStateToProto(a *peermsg.AdaptiveState) *peerv1.AdaptiveState {
	if a == nil {
		return nil
	}
	return &peerv1.AdaptiveState{Limit: a.Limit, LongRtt: a.LongRTT, LongSum: a.LongSum, LongCount: a.LongCount,
		WindowAgeNs: int64(a.WindowAge), SampleAgeNs: int64(a.SampleAge), Fallen: a.Fallen, Samples: a.Samples,
		Errors: a.Errors, LatencySum: a.LatencySum, MaxInFlight: a.MaxInFlight}
}

func adaptiveStateFromProto(p *peerv1.AdaptiveState) *peermsg.AdaptiveState {
	if p == nil {
		return nil
	}
	return &peermsg.AdaptiveState{Limit: p.GetLimit(), LongRTT: p.GetLongRtt(), LongSum: p.GetLongSum(),
		LongCount: p.GetLongCount(), WindowAge: time.Duration(p.GetWindowAgeNs()), SampleAge: time.Duration(p.GetSampleAgeNs()),
		Fallen: p.GetFallen(), Samples: p.GetSamples(), Errors: p.GetErrors(), LatencySum: p.GetLatencySum(),
		MaxInFlight: p.GetMaxInFlight()}
}

// setAdaptive gives q the check's adaptive spec and scope, copied: the
// request outlives the batch's buffer only through them.
func (c *wireCheck) setAdaptive(q *Request) {
	if !c.hasAdaptive {
		return
	}
	s := c.adaptive
	q.Adaptive, q.AdaptiveScope = &s, strings.Clone(c.adaptiveScope)
}
