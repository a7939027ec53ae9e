package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/adaptive"
)

const adaptiveTier = `policies:
  api:
    prelimit: 2
    tiers:
      free:
        algorithm: fixed_window
        limit: 20
        per: 1m
        adaptive: {algorithm: aimd, min: 5, max: 50, initial: 20, window: 1s, min_samples: 5, backoff: 0.51}
`

// A layer's adaptive block is parsed into its Spec; the layer keeps its
// scope and limit.
func TestParseAdaptiveLayer(t *testing.T) {
	set := parseOK(t, "adaptive", []byte(adaptiveTier))
	l := set.Policies["api"].Tiers["free"]
	want := adaptive.Spec{Algorithm: adaptive.AIMD, Min: 5, Max: 50, Initial: 20, Window: time.Second, MinSamples: 5, Backoff: 0.51}
	if l.Adaptive == nil || *l.Adaptive != want {
		t.Fatalf("adaptive spec %+v, want %+v", l.Adaptive, want)
	}
	if l.Scope != "tier:free" || l.Limit.Count() != 20 || l.Prelimit != 0 {
		t.Fatalf("layer %s limit %v", l.Scope, l.Limit)
	}
	if set := parseOK(t, "plain", []byte(strings.Replace(adaptiveTier, "        adaptive: {algorithm: aimd, min: 5, max: 50, initial: 20, window: 1s, min_samples: 5, backoff: 0.51}\n", "", 1))); set.Policies["api"].Tiers["free"].Adaptive != nil {
		t.Fatal("a layer without an adaptive block has a spec")
	}
}

// Errors in the adaptive block name their place and field.
func TestParseAdaptiveErrors(t *testing.T) {
	block := "        adaptive: {algorithm: aimd, min: 5, max: 50, initial: 20, window: 1s, min_samples: 5, backoff: 0.51}\n"
	for _, tc := range []struct{ name, block, want string }{
		{"bad window", strings.Replace(block, "window: 1s", "window: soon", 1),
			`policies.api.tiers.free.adaptive.window: want a positive duration such as "1s", got "soon"`},
		{"initial above max", strings.Replace(block, "initial: 20", "initial: 60", 1),
			"policies.api.tiers.free.adaptive.initial: must be from min (5) to max (50), got 60"},
		{"unknown algorithm", strings.Replace(block, "aimd", "vegas", 1),
			`policies.api.tiers.free.adaptive.algorithm: want aimd or gradient2, got "vegas"`},
		{"misspelt field", strings.Replace(block, "backoff", "backof", 1),
			`unknown field "backof" in adaptive (did you mean "backoff"?)`},
	} {
		data := strings.Replace(adaptiveTier, block, tc.block, 1)
		_, err := Parse([]byte(data), "bad.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	leased := strings.Replace(adaptiveTier, "fixed_window", "token_bucket", 1) + "        lease: true\n"
	want := "policies.api.tiers.free.adaptive: a hot-key lease (lease: true) cannot follow an adaptive limit"
	if _, err := Parse([]byte(leased), "bad.yaml"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("with a lease: error %v, want it to contain %q", err, want)
	}
}

// A concurrency layer takes an adaptive block as a rate layer does.
func TestParseAdaptiveConcurrency(t *testing.T) {
	y := "policies:\n  api:\n    tiers:\n      free:\n        algorithm: concurrency\n        limit: 8\n" +
		"        adaptive: {algorithm: gradient2, min: 2, max: 20, initial: 8}\n"
	l := parseOK(t, "concurrency", []byte(y)).Policies["api"].Tiers["free"]
	want := adaptive.Spec{Algorithm: adaptive.Gradient2, Min: 2, Max: 20, Initial: 8}
	if l.Adaptive == nil || *l.Adaptive != want || l.Limit.Count() != 8 {
		t.Fatalf("layer %v adaptive %+v, want %+v", l.Limit, l.Adaptive, want)
	}
}
