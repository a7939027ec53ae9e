package adaptive

import (
	"fmt"
	"math"
	"time"
)

// YAML is the adaptive block of a policy layer as a YAML decoder fills
// it (go.yaml.in/yaml/v3, with KnownFields): durations are Go duration
// strings ("1s", "250ms"), counts whole numbers. ParseSpec turns it into a
// Spec. An absent field is its zero, which means its default.
//
//	adaptive:
//	  algorithm: gradient2
//	  min: 5
//	  max: 200
//	  initial: 20
//	  window: 1s
type YAML struct {
	Algorithm        string  `yaml:"algorithm"`
	Min              Whole   `yaml:"min"`
	Max              Whole   `yaml:"max"`
	Initial          Whole   `yaml:"initial"`
	Window           string  `yaml:"window"`
	MinSamples       Whole   `yaml:"min_samples"`
	ErrorThreshold   float64 `yaml:"error_threshold"`
	LatencyThreshold string  `yaml:"latency_threshold"`
	Backoff          float64 `yaml:"backoff"`
	Tolerance        float64 `yaml:"tolerance"`
	Smoothing        float64 `yaml:"smoothing"`
	LongWindow       Whole   `yaml:"long_window"`
	Fallback         Whole   `yaml:"fallback"`
	FallbackAfter    string  `yaml:"fallback_after"`
}

// Whole is a YAML count that refuses decimals and strings (2.5 would
// otherwise become 2). It decodes through the unmarshal-function form
// yaml.v3 still honours, so that this package needs no YAML import.
type Whole int64

// wholeFields says which fields a Whole error is about: yaml.v3 gives an
// unmarshaler neither the field's name nor its line.
const wholeFields = "min, max, initial, min_samples, long_window and fallback are whole numbers"

// UnmarshalYAML accepts a YAML integer only.
func (w *Whole) UnmarshalYAML(unmarshal func(any) error) error {
	var v any
	if err := unmarshal(&v); err != nil {
		return err
	}
	switch n := v.(type) {
	case int:
		*w = Whole(n)
	case int64:
		*w = Whole(n)
	case uint64:
		if n > math.MaxInt64 {
			return fmt.Errorf("adaptive: %s up to %d, got %d", wholeFields, int64(math.MaxInt64), n)
		}
		*w = Whole(n)
	default:
		return fmt.Errorf("adaptive: %s, got %v", wholeFields, v)
	}
	return nil
}

// ParseSpec turns a decoded adaptive block into a validated Spec. Errors
// name the field: "adaptive.window: ...". A policy prefixes its own place
// (policies.api.tiers.free.) as it does for a limit's fields.
func ParseSpec(y YAML) (Spec, error) {
	a, err := ParseAlgorithm(y.Algorithm)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{Algorithm: a, Min: int64(y.Min), Max: int64(y.Max), Initial: int64(y.Initial),
		MinSamples: clampInt(int64(y.MinSamples)), ErrorThreshold: y.ErrorThreshold, Backoff: y.Backoff,
		Tolerance: y.Tolerance, Smoothing: y.Smoothing, LongWindow: clampInt(int64(y.LongWindow)),
		Fallback: int64(y.Fallback)}
	for _, d := range []struct {
		name string
		text string
		to   *time.Duration
	}{{"window", y.Window, &s.Window}, {"latency_threshold", y.LatencyThreshold, &s.LatencyThreshold},
		{"fallback_after", y.FallbackAfter, &s.FallbackAfter}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return Spec{}, fmt.Errorf("adaptive.%s: want a positive duration such as \"1s\", got %q", d.name, d.text)
		}
		*d.to = v
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// clampInt keeps a count within int32, so that an absurd count fails
// validation rather than wrapping.
func clampInt(v int64) int {
	return int(min(max(v, math.MinInt32), math.MaxInt32))
}
