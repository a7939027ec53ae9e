// Package envoyratelimit is a module of its own that pins
// envoyproxy/ratelimit, the baseline of the Envoy rate limit service in
// scripts/bench-compare.sh, as a tool with the dependency versions its own
// go.mod asks for (ringlimit's newer OpenTelemetry would not build it):
//
//	cd cmd/bench/envoyratelimit && go build -o /tmp/envoy-ratelimit github.com/envoyproxy/ratelimit/src/service_cmd
package envoyratelimit
