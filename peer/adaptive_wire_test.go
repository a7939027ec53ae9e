package peer

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/ringlimit/ringlimit/adaptive"
	"github.com/ringlimit/ringlimit/internal/peermsg"
)

// genSpec draws an adaptive spec, each field zero half the time; counts
// and durations within what the reader keeps (non-negative), doubles
// finite.
func genSpec(t *rapid.T, label string) adaptive.Spec {
	n := func(name string) int64 {
		return rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, maxSpecField)).Draw(t, label+"."+name)
	}
	f := func(name string) float64 {
		return rapid.OneOf(rapid.Just(0.0), rapid.Float64Range(-1e9, 1e9)).Draw(t, label+"."+name)
	}
	return adaptive.Spec{Algorithm: adaptive.Algorithm(rapid.IntRange(0, 255).Draw(t, label+".alg")),
		Min: n("min"), Max: n("max"), Initial: n("initial"), Window: time.Duration(n("window")),
		MinSamples: int(rapid.IntRange(0, 1<<31-1).Draw(t, label+".min_samples")), ErrorThreshold: f("error_threshold"),
		LatencyThreshold: time.Duration(n("latency")), Backoff: f("backoff"), Tolerance: f("tolerance"),
		Smoothing: f("smoothing"), LongWindow: int(rapid.IntRange(0, 1<<31-1).Draw(t, label+".long_window")),
		Fallback: n("fallback"), FallbackAfter: time.Duration(n("fallback_after"))}
}

func genAdaptiveState(t *rapid.T, label string) *peermsg.AdaptiveState {
	if !rapid.Bool().Draw(t, label+".present") {
		return nil
	}
	f := func(name string) float64 {
		return rapid.OneOf(rapid.Just(0.0), rapid.Float64Range(-1e12, 1e12)).Draw(t, label+"."+name)
	}
	i := func(name string) int64 {
		return rapid.OneOf(rapid.Just(int64(0)), rapid.Int64()).Draw(t, label+"."+name)
	}
	return &peermsg.AdaptiveState{Limit: f("limit"), LongRTT: f("long_rtt"), LongSum: f("long_sum"), LongCount: i("long_count"),
		WindowAge: time.Duration(i("window_age")), SampleAge: time.Duration(i("sample_age")), Fallen: rapid.Bool().Draw(t, label+".fallen"),
		Samples: i("samples"), Errors: i("errors"), LatencySum: f("latency_sum"), MaxInFlight: i("max_in_flight")}
}

// A Replicate call whose states carry adaptive controllers encodes as
// proto.Marshal encodes it, and reads back to the same states.
func TestReplicateWireAdaptive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := replicateBatch{from: "A", version: 3}
		for i := range rapid.IntRange(0, 4).Draw(t, "states") {
			m.states = append(m.states, State{Key: fmt.Sprint("k", i), Limit: hourly(10), Used: int64(i),
				Adaptive: genAdaptiveState(t, fmt.Sprint("s", i))})
		}
		checkReplicateWire(t, &m)
	})
}

// A spec read from the wire is the spec that was written, and the one the
// generated message carries.
func TestSpecWireRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := genSpec(t, "spec")
		var back adaptive.Spec
		if err := parseSpec(appendSpec(nil, &s), &back); err != nil {
			t.Fatal(err)
		}
		if back != s || specFromProto(specToProto(&s)) != s || specSize(&s) != len(appendSpec(nil, &s)) {
			t.Fatalf("spec %+v read back as %+v", s, back)
		}
	})
}

// FuzzAdaptiveWire: any bytes parse as a spec and as a controller state
// without panicking, and what parses writes back to bytes that parse to
// the same values.
func FuzzAdaptiveWire(f *testing.F) {
	s := adaptive.Spec{Algorithm: adaptive.AIMD, Min: 5, Max: 50, Initial: 20, Window: time.Second, Backoff: 0.51}
	f.Add(appendSpec(nil, &s))
	f.Add(appendAdaptiveState(nil, &peermsg.AdaptiveState{Limit: 12.5, WindowAge: time.Second, Samples: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var spec, back adaptive.Spec
		if parseSpec(b, &spec) == nil {
			if err := parseSpec(appendSpec(nil, &spec), &back); err != nil || !sameSpec(back, spec) {
				t.Fatalf("spec %+v wrote and read back as %+v, %v", spec, back, err)
			}
		}
		var st peermsg.AdaptiveState
		_ = parseAdaptiveState(b, &st)
	})
}

// sameSpec is == with NaN equal to NaN.
func sameSpec(a, b adaptive.Spec) bool {
	nan := func(x, y float64) bool { return x == y || x != x && y != y }
	fa, fb := a, b
	fa.ErrorThreshold, fa.Backoff, fa.Tolerance, fa.Smoothing = 0, 0, 0, 0
	fb.ErrorThreshold, fb.Backoff, fb.Tolerance, fb.Smoothing = 0, 0, 0, 0
	return fa == fb && nan(a.ErrorThreshold, b.ErrorThreshold) && nan(a.Backoff, b.Backoff) &&
		nan(a.Tolerance, b.Tolerance) && nan(a.Smoothing, b.Smoothing)
}
