package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Algorithm names a controller.
type Algorithm uint8

const (
	// AIMD adds one per healthy window and multiplies by Backoff after
	// a window with too many errors or too slow an average latency.
	AIMD Algorithm = iota + 1
	// Gradient2 scales the limit by the ratio of a long-term RTT to the
	// window's RTT, as Netflix concurrency-limits' Gradient2Limit.
	Gradient2
)

// String returns the algorithm's name in a policy file: aimd, gradient2.
func (a Algorithm) String() string {
	switch a {
	case AIMD:
		return "aimd"
	case Gradient2:
		return "gradient2"
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm reads an algorithm's name as String writes it.
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "aimd":
		return AIMD, nil
	case "gradient2":
		return Gradient2, nil
	}
	return 0, fmt.Errorf("adaptive.algorithm: want aimd or gradient2, got %q", s)
}

// MaxLimit is the largest Max a Spec may give: limits are kept as
// float64, exact for whole numbers far beyond it.
const MaxLimit = 1_000_000_000

// Spec is one adaptive limit: a policy layer's adaptive block, parsed.
// A zero field means its default, as each field's comment says. A Spec is
// a value; it is safe to share.
type Spec struct {
	// Algorithm is AIMD or Gradient2. Required.
	Algorithm Algorithm
	// Min and Max bound the limit (1 ≤ Min ≤ Max ≤ MaxLimit); Initial is
	// where it starts (Min ≤ Initial ≤ Max; 0 means Min, the cautious
	// start).
	Min, Max, Initial int64
	// Window is how often the limit may move: samples are gathered for a
	// Window and judged together when it closes. Default 1s; at least
	// 10ms, at most 1h.
	Window time.Duration
	// MinSamples is how many samples (outcomes ok or error) a window needs
	// for the limit to move; a window with fewer holds. Default 10.
	MinSamples int
	// ErrorThreshold (AIMD): a window whose error fraction is above it
	// cuts the limit. In [0, 1); default 0.1 (0 means the default, so a
	// controller that cuts on any error says a small value such as 0.001).
	ErrorThreshold float64
	// LatencyThreshold (AIMD): a window whose average latency is above it
	// cuts the limit. 0: latency never cuts.
	LatencyThreshold time.Duration
	// Backoff (AIMD) multiplies the limit on a cut. In (0.5, 1); default
	// 0.9.
	Backoff float64
	// Tolerance (Gradient2): how many times the long-term RTT a window's
	// RTT may reach before the limit falls. At least 1; default 1.5.
	Tolerance float64
	// Smoothing (Gradient2): the weight of a window's new limit against
	// the old one. In (0, 1]; default 0.2.
	Smoothing float64
	// LongWindow (Gradient2): the long-term RTT is an exponential average
	// over this many windows. Default 600.
	LongWindow int
	// Fallback is the limit applied once no sample has arrived for
	// FallbackAfter, until samples come back (Min ≤ Fallback ≤ Max). 0:
	// the limit holds where it is.
	Fallback int64
	// FallbackAfter is how long without samples applies Fallback. Default
	// 10 × Window; at least Window.
	FallbackAfter time.Duration
}

// Defaults of the Spec fields whose zero means a default.
const (
	DefaultWindow         = time.Second
	DefaultMinSamples     = 10
	DefaultErrorThreshold = 0.1
	DefaultBackoff        = 0.9
	DefaultTolerance      = 1.5
	DefaultSmoothing      = 0.2
	DefaultLongWindow     = 600
	fallbackWindows       = 10
	maxMinSamples         = 1_000_000
	maxLongWindow         = 1_000_000
	maxTolerance          = 100
)

// WithDefaults returns s with every zero field that has a default set to
// it. It does not validate.
func (s Spec) WithDefaults() Spec {
	if s.Initial == 0 {
		s.Initial = s.Min
	}
	if s.Window == 0 {
		s.Window = DefaultWindow
	}
	if s.MinSamples == 0 {
		s.MinSamples = DefaultMinSamples
	}
	if s.ErrorThreshold == 0 {
		s.ErrorThreshold = DefaultErrorThreshold
	}
	if s.Backoff == 0 {
		s.Backoff = DefaultBackoff
	}
	if s.Tolerance == 0 {
		s.Tolerance = DefaultTolerance
	}
	if s.Smoothing == 0 {
		s.Smoothing = DefaultSmoothing
	}
	if s.LongWindow == 0 {
		s.LongWindow = DefaultLongWindow
	}
	if s.FallbackAfter == 0 {
		s.FallbackAfter = fallbackWindows * s.Window
	}
	return s
}

// Validate reports the first field of s that is out of range, naming it as
// a policy file does: "adaptive.min: must be at least 1, got 0". Zero
// fields are checked as their defaults.
func (s Spec) Validate() error {
	d := s.WithDefaults()
	switch {
	case s.Algorithm != AIMD && s.Algorithm != Gradient2:
		return fmt.Errorf("adaptive.algorithm: want aimd or gradient2, got %v", s.Algorithm)
	case s.Min < 1:
		return fmt.Errorf("adaptive.min: must be at least 1, got %d", s.Min)
	case s.Max < s.Min || s.Max > MaxLimit:
		return fmt.Errorf("adaptive.max: must be from min (%d) to %d, got %d", s.Min, MaxLimit, s.Max)
	case d.Initial < s.Min || d.Initial > s.Max:
		return fmt.Errorf("adaptive.initial: must be from min (%d) to max (%d), got %d", s.Min, s.Max, s.Initial)
	case d.Window < 10*time.Millisecond || d.Window > time.Hour:
		return fmt.Errorf("adaptive.window: must be from 10ms to 1h, got %v", s.Window)
	case d.MinSamples < 1 || d.MinSamples > maxMinSamples:
		return fmt.Errorf("adaptive.min_samples: must be from 1 to %d, got %d", maxMinSamples, s.MinSamples)
	case !(d.ErrorThreshold > 0 && d.ErrorThreshold < 1):
		return fmt.Errorf("adaptive.error_threshold: must be in (0, 1), got %v", s.ErrorThreshold)
	case s.LatencyThreshold < 0:
		return fmt.Errorf("adaptive.latency_threshold: must not be negative, got %v", s.LatencyThreshold)
	case !(d.Backoff > 0.5 && d.Backoff < 1):
		return fmt.Errorf("adaptive.backoff: must be in (0.5, 1), got %v", s.Backoff)
	case !(d.Tolerance >= 1 && d.Tolerance <= maxTolerance):
		return fmt.Errorf("adaptive.tolerance: must be from 1 to %d, got %v", maxTolerance, s.Tolerance)
	case !(d.Smoothing > 0 && d.Smoothing <= 1):
		return fmt.Errorf("adaptive.smoothing: must be in (0, 1], got %v", s.Smoothing)
	case d.LongWindow < 1 || d.LongWindow > maxLongWindow:
		return fmt.Errorf("adaptive.long_window: must be from 1 to %d, got %d", maxLongWindow, s.LongWindow)
	case s.Fallback != 0 && (s.Fallback < s.Min || s.Fallback > s.Max):
		return fmt.Errorf("adaptive.fallback: must be 0 (hold) or from min (%d) to max (%d), got %d", s.Min, s.Max, s.Fallback)
	case d.FallbackAfter < d.Window:
		return fmt.Errorf("adaptive.fallback_after: must be at least the window (%v), got %v", d.Window, s.FallbackAfter)
	}
	if s.Algorithm == AIMD {
		if s.Tolerance != 0 || s.Smoothing != 0 || s.LongWindow != 0 {
			return fmt.Errorf("adaptive: tolerance, smoothing and long_window are for gradient2, not aimd")
		}
	} else if s.ErrorThreshold != 0 || s.LatencyThreshold != 0 || s.Backoff != 0 {
		return fmt.Errorf("adaptive: error_threshold, latency_threshold and backoff are for aimd, not gradient2")
	}
	return nil
}

// sane makes any Spec usable, so that New never panics on one that was not
// validated: bounds ordered and finite, parameters in their ranges.
func (s Spec) sane() Spec {
	s = s.WithDefaults()
	s.Min = min(max(s.Min, 1), MaxLimit)
	s.Max = min(max(s.Max, s.Min), MaxLimit)
	s.Initial = min(max(s.Initial, s.Min), s.Max)
	if s.Fallback != 0 {
		s.Fallback = min(max(s.Fallback, s.Min), s.Max)
	}
	s.Window = min(max(s.Window, 10*time.Millisecond), time.Hour)
	s.MinSamples = min(max(s.MinSamples, 1), maxMinSamples)
	s.ErrorThreshold = inRange(s.ErrorThreshold, 0, 1, DefaultErrorThreshold)
	s.Backoff = inRange(s.Backoff, 0.5, 1, DefaultBackoff)
	s.Tolerance = inRange(s.Tolerance, 1, maxTolerance, DefaultTolerance)
	s.Smoothing = inRange(s.Smoothing, 0, 1, DefaultSmoothing)
	s.LongWindow = min(max(s.LongWindow, 1), maxLongWindow)
	s.LatencyThreshold = max(s.LatencyThreshold, 0)
	s.FallbackAfter = max(s.FallbackAfter, s.Window)
	return s
}

// inRange returns v when it is a number in [lo, hi], else def.
func inRange(v, lo, hi, def float64) float64 {
	if math.IsNaN(v) || v < lo || v > hi {
		return def
	}
	return v
}
