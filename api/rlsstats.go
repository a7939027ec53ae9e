package api

import (
	"log/slog"
	"math"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlimit/ringlimit/bucket"
)

// DefaultRLSNearLimitRatio is envoyproxy/ratelimit's NEAR_LIMIT_RATIO: a
// hit is near its limit once the count passes this share of it.
const DefaultRLSNearLimitRatio = 0.8

// DefaultRLSStatKeys is the default of Config.RLSStatKeys.
const DefaultRLSStatKeys = 1000

// RLSOtherKey is the key label of the per-descriptor RLS counters that
// holds the counts of the descriptors without a series of their own: once
// Config.RLSStatKeys keys have one, every other key of the domain (and
// every key longer than bucket.MaxKeyLen bytes) is counted here.
const RLSOtherKey = "_other"

// rlsStats are the per-descriptor counters of the rate limit service,
// envoyproxy/ratelimit's ratelimit.service.rate_limit.DOMAIN.KEY.STAT as
// Prometheus counters labelled by domain and key. The number of keys with
// a series of their own is capped, so that requests cannot grow it: at
// most maxKeys keys (each at most bucket.MaxKeyLen bytes), plus one
// RLSOtherKey series per domain. It is safe for concurrent use.
type rlsStats struct {
	ratio   float32 // near limit ratio
	maxKeys int
	log     *slog.Logger

	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	globalShadow                                             prometheus.Counter // requests the global shadow mode answered OK
	folded                                                   prometheus.Counter // descriptors counted under RLSOtherKey
	keys                                                     prometheus.Gauge   // keys with a series of their own

	mu     sync.RWMutex
	series map[rlsStatKey]*rlsSeries // guarded by mu; only grows
	own    int                       // guarded by mu: series that are not RLSOtherKey's
	capped bool                      // guarded by mu: the cap was logged
}

// rlsStatKey names one series: a domain and a key.
type rlsStatKey struct{ domain, key string }

// rlsSeries are the five counters of one (domain, key).
type rlsSeries struct {
	total, over, near, within, shadow prometheus.Counter
}

func newRLSStats(reg prometheus.Registerer, maxKeys int, ratio float64, log *slog.Logger) (*rlsStats, error) {
	labels := []string{"domain", "key"}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	const by = ` By domain and key: the matched rule's entries as envoyproxy/ratelimit names them ("key_value.key2"; every entry's value with detailed_metric), or "` + RLSOtherKey + `" past --rls-stats-keys keys.`
	s := &rlsStats{
		ratio:       float32(ratio),
		maxKeys:     maxKeys,
		log:         log,
		totalHits:   vec("ringlimit_rls_total_hits_total", "Hits (hits_addend) of the descriptors a rate limit rule matched (envoyproxy/ratelimit's total_hits)."+by),
		overLimit:   vec("ringlimit_rls_over_limit_total", "Hits over the limit (envoyproxy/ratelimit's over_limit), shadow mode included."+by),
		nearLimit:   vec("ringlimit_rls_near_limit_total", "Hits within the limit past --rls-near-limit-ratio of it (envoyproxy/ratelimit's near_limit)."+by),
		withinLimit: vec("ringlimit_rls_within_limit_total", "Hits of answers within the limit (envoyproxy/ratelimit's within_limit)."+by),
		shadowMode:  vec("ringlimit_rls_shadow_mode_total", "Hits over the limit answered OK by shadow_mode or --rls-shadow-mode (envoyproxy/ratelimit's shadow_mode)."+by),
		globalShadow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_rls_global_shadow_mode_total",
			Help: "ShouldRateLimit answers that would have been OVER_LIMIT and were OK under --rls-shadow-mode (envoyproxy/ratelimit's global_shadow_mode).",
		}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ringlimit_rls_stat_keys_folded_total",
			Help: `Descriptors counted under key="` + RLSOtherKey + `" of the per-descriptor RLS counters: --rls-stats-keys keys already had a series, or the key was longer than 1024 bytes.`,
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ringlimit_rls_stat_keys",
			Help: `Keys with a series of their own in the per-descriptor RLS counters (at most --rls-stats-keys; "` + RLSOtherKey + `" not counted).`,
		}),
		series: map[rlsStatKey]*rlsSeries{},
	}
	for _, c := range []prometheus.Collector{s.totalHits, s.overLimit, s.nearLimit, s.withinLimit, s.shadowMode, s.globalShadow, s.folded, s.keys} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// rlsCounts is what one descriptor adds to its counters.
type rlsCounts struct{ total, over, near, within, shadow uint64 }

// tallyRLS counts the hits of one descriptor as envoyproxy/ratelimit's
// base limiter does, from its limit (requests_per_unit), the count before
// the hits, whether it was answered over the limit, and whether shadow
// mode answered it OK instead:
//
//   - total: every hit.
//   - Within the limit: within counts every hit; near those that took the
//     count past floor(limit × ratio) (ratio a float32, as there).
//   - Over the limit: over counts the hits past the limit (all of them
//     when the count was at the limit already); the hits before it that
//     took the count past the near threshold are near. shadow counts what
//     over counts when shadow mode answered OK.
//
// An answer over the limit whose hits would have fit (an algorithm whose
// remaining is not a count) counts all its hits over.
func tallyRLS(limit, before, hits uint64, over, shadow bool, ratio float32) rlsCounts {
	c := rlsCounts{total: hits}
	after := before + hits
	if after < before {
		after = math.MaxUint64
	}
	near := uint64(math.Floor(float64(float32(limit) * ratio)))
	if over {
		if before >= limit || after <= limit {
			c.over = hits
		} else {
			c.over = after - limit
			c.near = limit - max(near, before)
		}
		if shadow {
			c.shadow = c.over
		}
		return c
	}
	if after > near {
		if before >= near {
			c.near = hits
		} else {
			c.near = after - near
		}
	}
	c.within = hits
	return c
}

// count adds c to the series of key in domain, or of RLSOtherKey when key
// has none and cannot have one.
func (s *rlsStats) count(domain, key string, c rlsCounts) {
	if c.total == 0 {
		return
	}
	sr := s.get(domain, key)
	for _, a := range [...]struct {
		ctr prometheus.Counter
		n   uint64
	}{{sr.total, c.total}, {sr.over, c.over}, {sr.near, c.near}, {sr.within, c.within}, {sr.shadow, c.shadow}} {
		if a.n > 0 {
			a.ctr.Add(float64(a.n))
		}
	}
}

// get returns the series of key in domain, making it while fewer than
// maxKeys keys have one; else domain's RLSOtherKey series.
func (s *rlsStats) get(domain, key string) *rlsSeries {
	k := rlsStatKey{domain, key}
	if len(key) > bucket.MaxKeyLen || !utf8.ValidString(key) {
		k.key = RLSOtherKey
	}
	if !utf8.ValidString(domain) { // a configured domain is valid: YAML is UTF-8
		k.domain = strings.ToValidUTF8(domain, "\uFFFD")
	}
	s.mu.RLock()
	sr := s.series[k]
	s.mu.RUnlock()
	if sr != nil {
		if k.key == RLSOtherKey && key != RLSOtherKey {
			s.folded.Inc()
		}
		return sr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.key != RLSOtherKey && s.series[k] == nil && s.own >= s.maxKeys {
		if !s.capped && s.maxKeys > 0 {
			s.capped = true
			s.log.Warn("rls statistics: --rls-stats-keys keys have their own series; the others are counted under key=\""+RLSOtherKey+"\"",
				"max", s.maxKeys, "domain", domain, "key", key)
		}
		k.key = RLSOtherKey
	}
	if k.key == RLSOtherKey && key != RLSOtherKey {
		s.folded.Inc()
	}
	if sr = s.series[k]; sr != nil {
		return sr
	}
	sr = &rlsSeries{
		total:  s.totalHits.WithLabelValues(k.domain, k.key),
		over:   s.overLimit.WithLabelValues(k.domain, k.key),
		near:   s.nearLimit.WithLabelValues(k.domain, k.key),
		within: s.withinLimit.WithLabelValues(k.domain, k.key),
		shadow: s.shadowMode.WithLabelValues(k.domain, k.key),
	}
	s.series[k] = sr
	if k.key != RLSOtherKey {
		s.own++
		s.keys.Set(float64(s.own))
	}
	return sr
}

// rlsStatName is the key label of a rule's statistics name
// ("domain.key_value.key2"): the name without its domain.
func rlsStatName(domain, fullKey string) string {
	if len(fullKey) > len(domain) && fullKey[len(domain)] == '.' && fullKey[:len(domain)] == domain {
		return fullKey[len(domain)+1:]
	}
	return fullKey
}
