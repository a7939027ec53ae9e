// Package testkit is the test infrastructure every ringlimit test shares:
// a fake Clock that moves only when told, loopback addresses that refuse or
// never answer, polling with a deadline, and reading metrics from a
// registry or a /metrics page. The in-process cluster harness builds on it
// (internal/testkit/harness), and the fault-injecting network is
// internal/faultnet.
//
// Nothing here is used outside tests.
package testkit
