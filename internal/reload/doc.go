// Package reload keeps a running configuration in step with its files: the
// one reload loop of the node, used for the policy file, the RLS
// configuration, the TLS certificates, the gossip key file and the admin
// token file.
//
// A Watcher watches files and directories with fsnotify (a file through its
// directory, so that a file renamed over it and a Kubernetes ConfigMap's
// symbolic link swap are seen) and polls them every Config.Poll as a safety
// net for changes that are not notified (network file systems, bind mounts,
// a file system that cannot be watched). Events close together are one
// load (Config.Debounce). The load function reads, validates and installs
// the new content or refuses it; a refusal keeps what runs.
//
// Invariants:
//   - Loads never run concurrently; the last one read is the one installed.
//   - A refusal is logged and counted (result "error"); the same refusal
//     found again by a file event or a poll is neither logged nor counted
//     until the error changes or a load succeeds. An explicit Reload (SIGHUP,
//     the admin API) logs and counts every refusal: someone asked.
//   - A load that changed something counts as result "ok"; one that found
//     the content already running counts nothing.
//   - Time (debounce, polling) is read from Config.Clock only.
//
// Usage:
//
//	w, err := reload.New(reload.Config{What: "policy", Paths: []string{path},
//		Load: m.load, Clock: clk, Logger: log})
//	...
//	go reload.Run(ctx, w) // watches until ctx ends; SIGHUP reloads w
package reload
