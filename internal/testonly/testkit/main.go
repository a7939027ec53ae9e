package testkit

import (
	"go.uber.org/goleak"
)

// M is what Main runs: *testing.M, or a wrapper around it.
type M interface{ Run() int }

// Main runs a package's tests and then fails the run if any goroutine is
// left running (goleak), except those ignore names and those every
// ringlimit package tolerates (see Ignored). It removes the binaries Build
// made. Call it from TestMain:
//
//	func TestMain(m *testing.M) { testkit.Main(m) }
func Main(m M, ignore ...goleak.Option) {
	opts := append(Ignored(), ignore...)
	opts = append(opts, goleak.Cleanup(func(int) { RemoveBuilds() }))
	goleak.VerifyTestMain(m, opts...)
}

// Ignored are the goroutines no ringlimit test can wait for, which goleak
// is told to ignore: memberlist's probe of a member, which waits out its
// probe timeout (time.After) after the member shut down, and its fallback
// TCP ping, which waits out its dial; both end by themselves a moment
// later (memberlist's Shutdown does not wait for them).
func Ignored() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode.func3"),
	}
}
