// Package rls reads envoyproxy/ratelimit's configuration format (a domain,
// nested descriptors, their rate limits) and matches the descriptors of an
// Envoy rate limit request (envoy.service.ratelimit.v3) against it, with
// the same rules: an entry's key and value before a wildcard value, before
// its key alone; nested descriptors by prefix; the limit of the last entry
// only. Each matched descriptor becomes a Rule: a bucket key on the ring
// and its limit.
//
// # The file format
//
// Each file is one YAML document for one domain, as envoyproxy/ratelimit
// reads it:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type
//	    value: marketing
//	    descriptors:
//	      - key: to_number
//	        rate_limit: {unit: day, requests_per_unit: 5}
//
// A descriptor has key, value (optional; a value ending in '*' matches
// every value with that prefix), rate_limit (unit, requests_per_unit,
// unlimited, name, replaces: [{name}]), shadow_mode, detailed_metric and
// nested descriptors. The checks are envoyproxy/ratelimit's: unknown keys,
// an empty domain, a domain defined twice, an empty key, a key (and value)
// defined twice at one level, an invalid unit, a unit with unlimited, an
// empty replaces name or one naming its own rule. Errors name the file and
// line; an unknown key names the closest known one (did you mean "descriptors"?).
//
// quota_mode, value_to_metric and share_threshold are accepted, their types
// checked, and recorded, but ringlimit does not act on them (Config.Warnings
// lists where they are set); share_threshold keeps its one rule: only on a
// wildcard value. As in envoyproxy/ratelimit, a known key in a place where
// it means nothing (unit directly on a descriptor) is ignored; ringlimit
// also lists it in Config.Warnings.
//
// # The ringlimit extension
//
// rate_limit.algorithm picks the bucket algorithm: token_bucket,
// leaky_bucket, fixed_window, sliding_window_log or sliding_window_counter
// (bucket.ParseAlgorithm). The default is fixed_window, which counts as
// envoyproxy/ratelimit does. Units are SECOND to YEAR, a month being 30
// days and a year 365. envoyproxy/ratelimit ignores the key's meaning, so a
// file with algorithm set does not load there.
//
// Where ringlimit is stricter: requests_per_unit above bucket.MaxCount
// (2^31-1) with an algorithm other than fixed_window (a fixed window holds
// every uint32), a second YAML document in a file, a key repeated in one
// mapping, YAML merge keys (<<), nesting deeper than 64 levels and aliases
// that expand past 2^20 nodes are refused. Decimals are refused where
// envoyproxy/ratelimit refuses them too: anywhere.
//
// # Invariants
//
//   - Parse is pure: it reads only its arguments, and an error leaves
//     nothing changed. A Config is immutable and safe for concurrent use.
//   - Match allocates only the returned Rule's bucket key (and, with
//     detailed_metric or an override, its statistics name).
//   - Manager swaps a whole validated Config in at once; a bad file is
//     refused, logged and counted, and the running Config stays.
package rls
