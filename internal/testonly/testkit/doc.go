// Package testkit is the test infrastructure every ringlimit test shares:
// a fake Clock that moves only when told; loopback addresses that refuse or
// never answer; WaitFor, Eventually and Poll, the one way a test waits for
// something to happen (a condition with a deadline, never a fixed sleep);
// SlowServer, a gRPC server that holds every call; PKI, a certificate
// authority writing certificates to files; Build, which builds a binary
// once per test run; Main, a TestMain that fails a run leaving goroutines
// behind (goleak, with the few ringlimit ignores); and reading metrics from
// a registry or a /metrics page. The in-process cluster harness builds on
// it (internal/testonly/harness), and the fault-injecting network is
// internal/testonly/faultnet.
//
// Nothing here is used outside tests.
package testkit
