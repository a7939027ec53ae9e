#!/usr/bin/env bash
# Compares ringlimit with the Redis baseline on this machine, in one run.
#
#   scripts/bench-compare.sh                        # BENCH_DURATION per run (default 10s)
#   BENCH_BASE_REV=HEAD~1 scripts/bench-compare.sh  # and against the node of that revision
#   BENCH_BASE_REV=HEAD BENCH_BASE_NODE_FLAGS=--replication-factor=0 scripts/bench-compare.sh
#                                                   # this build against itself with other flags
#   BENCH_BASE_REV=HEAD BENCH_BASE_NODE_FLAGS="--insecure --tls-ca= --tls-cert= --tls-key=" \
#     scripts/bench-compare.sh                      # mutual TLS between nodes against peer links in clear
#
# Starts redis-server (loopback, no persistence) and a local 3-node cluster
# on their own ports, then for each workload runs ringlimit (through the
# project's Go client, 64 goroutines, round robin over the nodes) and Redis
# (go-redis + redis_rate, the same 64 goroutines) back to back, A B A B,
# and prints the ratio ringlimit/Redis per workload: uniform (10,000 keys),
# hot (one key), uniform-2m (2,000,000 keys: more than a client could keep
# owners for, and mostly keys not seen before; its rounds run after every
# other workload's, since a node holding those keys spends CPU on them even
# idle), hot-nolease and uniform-spent. Also measured in the
# same run: one plain unary gRPC call per check, round robin over the nodes
# (as a gateway that cannot route would send it) and through the Go client
# with coalescing off (one call per check, sent to the key's owner), and the
# floor of a bare grpc-go unary call (the standard health service). Results go to
# $OUT (default ${TMPDIR:-/tmp}/ringlimit-bench) as JSON lines, with a PNG
# chart of checks/s and p99 per run (bench-compare.png); the last lines
# printed are one JSON object per workload: the medians over the rounds,
# their ratio, and the ratio round by round (ratio_checks_by_round), since
# this machine's speed moves between rounds. Nothing is left running.
#
# BENCH_BASE_REV=<git rev> compares two builds of the node in the same run:
# the node of the working tree (as without it) and the node of that
# revision, built by that revision's own scripts/local-cluster.sh (so each
# build is started with the flags it knows) in a temporary git worktree,
# which is removed on exit. The base build runs its own 3-node cluster on
# its own ports (BENCH_BASE_HTTP_BASE, BENCH_BASE_GRPC_BASE,
# BENCH_BASE_GOSSIP_BASE, BENCH_BASE_PEER_BASE, default 30080, 31090, 30946
# and 31190), and every
# ringlimit workload runs against both clusters, one right after the other
# (the current build first in odd rounds, the base first in even ones), with
# the same bench binary, rounds and durations; Redis and the floor run once
# per round as before. The base's runs are named base-<workload>, and each
# workload's line also carries base_rev, the base's medians, the ratio
# current/base (ratio_checks_vs_base, ratio_p99_vs_base) and that ratio
# round by round (ratio_checks_vs_base_by_round). Every port is below 32768
# (above it the kernel picks outgoing source ports); the script refuses to
# start when two of its port ranges overlap. RINGLIMIT_NODE_FLAGS, if set,
# goes to the nodes of both builds. BENCH_BASE_NODE_FLAGS, if set, goes to
# the base build's nodes only, after RINGLIMIT_NODE_FLAGS (so a flag given
# in both takes the base's value there): the base's local-cluster.sh gets
# RINGLIMIT_NODE_FLAGS="$RINGLIMIT_NODE_FLAGS $BENCH_BASE_NODE_FLAGS", so the
# base revision's script must pass RINGLIMIT_NODE_FLAGS to its nodes (the
# script refuses to start otherwise, and checks each base node's command
# line for the flags). With BENCH_BASE_REV=HEAD it compares one build with
# two sets of flags; each workload's line then also carries base_node_flags.
#
# Issue 32's other operations, in core (current build only: the base build
# does not run them, since an older node may not know them), each against
# the plain check of the same round:
#   peek    ringlimit-peek: bench --op peek --proto client, the uniform
#           workload's 10,000 keys, 64 callers, the same duration, with
#           every check a peek (the owner answers, nothing is spent).
#   settle  ringlimit-settle: bench --op reserve-settle --proto client, the
#           same keys, callers and duration: each operation a reserve of 10
#           (Client.Check with reserve) then Client.Settle of its reservation
#           at a true cost drawn from 0 to 10; calls counts both. Its
#           reservations live 5 s (--reserve-ttl), so that they are gone
#           from the nodes' state files before the next round.
# They run after the workloads both builds run, in the same round as the
# uniform pair they are read against, with its limit (10^9 a second:
# nothing is refused, every call does the full work). Their lines, peek-vs-check and
# settle-vs-check, carry the medians of calls/s, p99 (a peek's; a settle
# workload's is the pair's) and server CPU microseconds per call, against
# ringlimit-uniform's checks, with ratio_calls (calls/s over checks/s),
# ratio_server_cpu_per_call and ratio_calls_by_round; settle-vs-check also
# the pairs/s and CPU microseconds per pair.
#
# The gateway workloads, measured in the same run (BENCH_WORKLOADS picks
# among core, rls, http, authz and acquire, comma-separated; default all
# five; core is every workload above; acquire is below):
#   rls    Envoy's rate limit service, RateLimitService/ShouldRateLimit on
#          each node's --grpc port (bench --proto rls: domain bench, one
#          descriptor {user_id: <key>}, 10,000 keys uniform, 64 callers,
#          round robin), against envoyproxy/ratelimit itself: three of its
#          processes sharing the script's redis-server, built from the
#          version cmd/bench/go.mod pins (a tool of that module) and started
#          with USE_STATSD=false DISABLE_STATS=true (no stats sink: without
#          one it logs every timer sample to stdout), LOG_LEVEL=warn,
#          BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=<that redis>,
#          RUNTIME_WATCH_ROOT=false and its ports (BENCH_ENVOY_RATELIMIT_GRPC_BASE,
#          BENCH_ENVOY_RATELIMIT_HTTP_BASE, BENCH_ENVOY_RATELIMIT_DEBUG_BASE,
#          default 25090, 25080 and 25070, process I on base+I); its other
#          settings (REDIS_POOL_SIZE, REDIS_PIPELINE_WINDOW, ...) are its
#          defaults unless set in the environment. Both read
#          scripts/bench-rls.yaml (a limit of 10^9 a second: nothing is
#          refused): the nodes through --rls-config (the current build's
#          nodes only, ahead of RINGLIMIT_NODE_FLAGS; the base build does not
#          run rls), envoyproxy/ratelimit from a copy in its runtime
#          directory ($OUT/envoy-ratelimit-runtime/ratelimit/config/). Its
#          server CPU is the three processes' and Redis's.
#   http   POST /v1/check (bench --proto http, round robin over the nodes'
#          HTTP ports) against three bare net/http servers run by bench
#          itself (--serve-bare-http, ports BENCH_BARE_HTTP_BASE+1..3,
#          default 24081..24083), which decode the same body and answer a
#          fixed admitting decision with the node's headers: the cost of the
#          node over net/http alone. Also run on the base build.
#   authz  the forward-auth call GET /v1/authz with X-API-Key: <key> (bench
#          --proto authz) against the same bare servers' /v1/authz. The
#          nodes then run scripts/bench-policy.yaml (RINGLIMIT_POLICY: one
#          tier that admits everything, as the bare server does) in every
#          workload, since they are started once: no other workload sends
#          a policy request, and an inline check never consults the
#          policy, so it changes none of their figures. The base build runs
#          its own copy of that file, if it has one.
# Each pair runs alternately, ringlimit first in odd rounds and the other
# first in even ones; the runs are ringlimit-rls and envoy-ratelimit-rls,
# ringlimit-http and nethttp-check, ringlimit-authz and nethttp-authz. Before the rounds, each side answers a short probe;
# a node that does not know --rls-config, or does not answer ShouldRateLimit
# or GET /v1/authz, stops the script there with the reason (leave that
# workload out of BENCH_WORKLOADS to run the others). Their lines: rls with
# envoy_ratelimit_* figures, ratio_checks and ratio_p99 (targets: at least 2
# and at most 0.5), http-vs-bare-http and authz-vs-bare-http with bare_http_*
# figures and ratio_checks (target: at least 0.85); each with the ratios
# round by round, the targets and whether the medians meet them (reported,
# never enforced).
#
# The in-flight workload, acquire (in the default set; run in each round
# after the core ones): a concurrency limit against the usual Redis
# semaphore, A B A B as the core pairs are (ringlimit first in odd rounds):
#   ringlimit-acquire  bench --proto client --op acquire-release on the
#          current build's nodes (the base build does not run it: an older
#          node may not know Acquire), through the Go client as a Go service
#          would call it: each operation a Client.Acquire of an inline
#          CONCURRENCY limit of 64 (--concurrency-limit 64, --lease-ttl 30s)
#          on one of 10,000 keys drawn uniformly (to the key's owner once an
#          answer named it), then, once granted, Client.Release of its lease
#          (outcome OK, its latency; to the next node in turn); 64 callers.
#   redis-semaphore    bench --target redis://<the script's redis> --op
#          acquire-release with the same flags and callers: an acquire is one
#          Lua script (EVALSHA: ZREMRANGEBYSCORE key -inf now-ttl, ZCARD key,
#          and ZADD key now <random member> when below the limit), a release
#          ZREM key member; go-redis, a pool of 64 connections.
# The limit equals the callers (64), so no acquire can be refused on either
# side: every operation is a granted acquire and its release, the full work
# (a refused acquire would be one call, and cheaper). Before the rounds a
# probe asks the nodes for an acquire and a release; a node that does not
# serve them stops the script there (leave acquire out of BENCH_WORKLOADS to
# run the others). Its line, acquire, gives the medians of pairs/s
# (ringlimit_pairs_per_s, redis_pairs_per_s; a pair is one operation),
# calls/s and p99 (a pair's) of both, ratio_pairs (ringlimit/Redis) and
# ratio_p99 with their values round by round, the refused shares and
# errors, and the targets: ratio_pairs at least 2, ratio_p99 at most 0.5
# (reported, never enforced).
#
# Where the processes run (BENCH_MODES, default pinned,shared). In
# production the gateway, the application and the load are on other
# machines; on one small machine the load generator takes the CPU the
# servers would use and pulls every ratio toward 1. So each mode is a whole
# run of everything above, with its own servers, and its own directory
# ($OUT/pinned, $OUT/shared):
#   pinned  every server of every pair (the nodes of both builds, Redis,
#           envoyproxy/ratelimit, the bare net/http and health servers) is
#           started with taskset on BENCH_SERVER_CPUS (default 0) and every
#           bench process on BENCH_LOAD_CPUS (default 1): both sides of a
#           pair alike, as if load and servers had machines of their own.
#   shared  no affinity: servers and load share every core.
#
# Every server is started with GODEBUG=$BENCH_SERVER_GODEBUG (default
# schedtrace=2147483647; empty leaves GODEBUG alone). A Go process whose
# processors all go idle puts its monitor thread (sysmon) to sleep, and its
# next system call wakes it to poll every 20 microseconds. Three Go servers
# on one CPU go idle and wake thousands of times a second, and each wake of
# each monitor queues on that CPU behind the servers' own work: measured
# with three nodes at 2,000,000 keys, half of every node's thread switches
# and 12% of the CPU. Any schedtrace setting keeps the monitor out of that
# sleep, so it backs off to a wake every 10 ms when it finds nothing to do;
# at this interval (24.8 days) it prints no trace, except one line
# at start on a machine up longer than that. It changes nothing for Redis,
# which is not Go, and applies alike to every Go server of every pair: the
# nodes, envoyproxy/ratelimit, the bare net/http and health servers.
#
# Before the first round, every server gets BENCH_WARM (default 10s; 0
# skips it) of load that is not measured: the nodes of both builds the RLS
# load (the core load without rls), envoyproxy/ratelimit the RLS load, the
# bare net/http servers the HTTP load, Redis the core load and the health
# server its calls. A node's heap grows to its --gc-headroom (128 MiB)
# under its first load, and until it has, each fresh page costs a minor
# fault, dear on a virtual machine: without the pass, the first run on a
# fresh cluster took 46,534 faults on the servers' CPU in 3 s and cost
# 79 µs of server CPU a call, against about 2,300 and 36 µs in the next
# run. Every run reports the faults its servers took in its window
# (server_minor_faults), and every pair's line the faults of each side
# round by round (*_server_minor_faults_by_round).
# The pinned run goes first. The summary lines of both are printed at the
# end, each with its "mode"; every pair's line also carries the server CPU
# microseconds per decision of each side (*_server_cpu_us_per_check, from
# the server processes' CPU time in the window), which a shared machine
# moves far less than checks/s.
set -euo pipefail
cd "$(dirname "$0")/.."

modes=${BENCH_MODES:-pinned,shared}
for m in ${modes//,/ }; do
	case "$m" in pinned | shared) ;; *)
		echo "BENCH_MODES: pinned, shared or both, comma-separated; got $m" >&2
		exit 2
		;;
	esac
done
if [ -z "${BENCH_MODE:-}" ]; then
	# The outer run: one whole inner run per mode, then their summaries.
	top=${OUT:-${TMPDIR:-/tmp}/ringlimit-bench}
	mkdir -p "$top"
	for m in ${modes//,/ }; do
		echo "== mode $m: $top/$m" >&2
		BENCH_MODE=$m OUT="$top/$m" "$0" "$@" >"$top/$m.summary.jsonl"
	done
	for m in ${modes//,/ }; do cat "$top/$m.summary.jsonl"; done
	exit 0
fi
mode=$BENCH_MODE
server_cpus=${BENCH_SERVER_CPUS:-0}
load_cpus=${BENCH_LOAD_CPUS:-1}
srv=()
load=()
server_godebug=${BENCH_SERVER_GODEBUG-schedtrace=2147483647}
if [ -n "$server_godebug" ]; then
	srv=(env "GODEBUG=$server_godebug")
fi
if [ "$mode" = pinned ]; then
	command -v taskset >/dev/null || { echo "pinned mode needs taskset (util-linux); BENCH_MODES=shared runs without it" >&2; exit 2; }
	if [ "$(getconf _NPROCESSORS_ONLN)" -lt 2 ]; then
		echo "pinned mode needs two CPUs, one for the servers and one for the load; BENCH_MODES=shared runs on one" >&2
		exit 2
	fi
	srv+=(taskset -c "$server_cpus")
	load=(taskset -c "$load_cpus")
	echo "pinned: servers on CPU $server_cpus, load on CPU $load_cpus" >&2
fi

duration=${BENCH_DURATION:-10s}
warmup=${BENCH_WARMUP:-2s}
warm=${BENCH_WARM:-10s}
# BENCH_ROUNDS (default 4): how many rounds every pair runs. Four, not two:
# one build against itself (two clusters of one binary on CPU 0, POST
# /v1/check in twelve alternating 4 s windows) gave window ratios from 0.797
# to 1.511, a standard deviation of 0.22, so the median of two rounds cannot
# tell a 0.7x pair from a 0.8x one; the median of four leaves out the
# highest and the lowest round, a disturbed one among them. A pinned mode
# takes about 19 minutes with four rounds, 12 with BENCH_ROUNDS=2.
rounds=${BENCH_ROUNDS:-4}
out=${OUT:-${TMPDIR:-/tmp}/ringlimit-bench}
redis_port=${BENCH_REDIS_PORT:-26379}
health_port=${BENCH_HEALTH_PORT:-29190}
health_addr=127.0.0.1:$health_port
envoy_grpc=${BENCH_ENVOY_RATELIMIT_GRPC_BASE:-25090}
envoy_http=${BENCH_ENVOY_RATELIMIT_HTTP_BASE:-25080}
envoy_debug=${BENCH_ENVOY_RATELIMIT_DEBUG_BASE:-25070}
bare_base=${BENCH_BARE_HTTP_BASE:-24080}
rls_yaml=$(pwd)/scripts/bench-rls.yaml
workloads=${BENCH_WORKLOADS:-core,rls,http,authz,acquire}
for w in ${workloads//,/ }; do
	case "$w" in core | rls | http | authz | acquire) ;; *)
		echo "BENCH_WORKLOADS: core, rls, http, authz or acquire, comma-separated; got $w" >&2
		exit 2
		;;
	esac
done
has() { case ",$workloads," in *",$1,"*) return 0 ;; esac; return 1; }
# leave_out W: how to run the other workloads, for the messages that stop
# the script because W cannot run.
leave_out() {
	local w r=""
	for w in ${workloads//,/ }; do [ "$w" = "$1" ] || r+="${r:+,}$w"; done
	if [ -n "$r" ]; then echo "BENCH_WORKLOADS=$r runs the other workloads"; else echo "leave $1 out of BENCH_WORKLOADS"; fi
}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export RINGLIMIT_CLUSTER_DIR="$out/cluster"
export RINGLIMIT_HTTP_BASE=${RINGLIMIT_HTTP_BASE:-28080}
export RINGLIMIT_GRPC_BASE=${RINGLIMIT_GRPC_BASE:-29090}
export RINGLIMIT_GOSSIP_BASE=${RINGLIMIT_GOSSIP_BASE:-27946}
export RINGLIMIT_PEER_BASE=${RINGLIMIT_PEER_BASE:-$((RINGLIMIT_GRPC_BASE + 100))}
# GET /v1/authz resolves examples/policy.yaml's api policy; no other
# workload sends a policy request (see above).
if has authz; then
	export RINGLIMIT_POLICY=scripts/bench-policy.yaml
else
	export RINGLIMIT_POLICY=""
fi
base_policy=""
base_rev=""
base_flags=${BENCH_BASE_NODE_FLAGS:-}
base_dir="$out/cluster-base"
base_http=${BENCH_BASE_HTTP_BASE:-30080}
base_grpc=${BENCH_BASE_GRPC_BASE:-31090}
base_gossip=${BENCH_BASE_GOSSIP_BASE:-30946}
base_peer=${BENCH_BASE_PEER_BASE:-$((base_grpc + 100))}
if [ -n "${BENCH_BASE_REV:-}" ]; then
	base_rev=$(git rev-parse --verify --quiet "${BENCH_BASE_REV}^{commit}") ||
		{ echo "BENCH_BASE_REV=$BENCH_BASE_REV is not a commit" >&2; exit 2; }
elif [ -n "$base_flags" ]; then
	echo "BENCH_BASE_NODE_FLAGS needs BENCH_BASE_REV (BENCH_BASE_REV=HEAD for this build with other flags)" >&2
	exit 2
fi

# The ports every process of the run listens on (node I of a cluster on
# base+I), none twice.
ports=("$redis_port" "$health_port")
for b in "$RINGLIMIT_HTTP_BASE" "$RINGLIMIT_GRPC_BASE" "$RINGLIMIT_PEER_BASE" "$RINGLIMIT_GOSSIP_BASE"; do ports+=($((b + 1)) $((b + 2)) $((b + 3))); done
if [ -n "$base_rev" ]; then
	for b in "$base_http" "$base_grpc" "$base_peer" "$base_gossip"; do ports+=($((b + 1)) $((b + 2)) $((b + 3))); done
fi
if has rls; then
	for b in "$envoy_grpc" "$envoy_http" "$envoy_debug"; do ports+=($((b + 1)) $((b + 2)) $((b + 3))); done
fi
if has http || has authz; then
	ports+=($((bare_base + 1)) $((bare_base + 2)) $((bare_base + 3)))
fi
if dup=$(printf '%s\n' "${ports[@]}" | sort -n | uniq -d | paste -sd,) && [ -n "$dup" ]; then
	echo "port(s) $dup used twice; change RINGLIMIT_*_BASE, BENCH_BASE_*_BASE, BENCH_ENVOY_RATELIMIT_*_BASE, BENCH_BARE_HTTP_BASE or BENCH_*_PORT" >&2
	exit 2
fi
if high=$(printf '%s\n' "${ports[@]}" | awk '$1 >= 32768' | paste -sd,) && [ -n "$high" ]; then
	echo "port(s) $high at or above 32768, where the kernel picks outgoing source ports" >&2
	exit 2
fi

results="$out/results.jsonl"
: >"$results"

if ! command -v redis-server >/dev/null; then
	echo "installing redis-server" >&2
	apt-get install -y redis-server >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y redis-server >/dev/null; }
fi

pids=()
base_tmp=""
base_src=""
# base_cluster runs the base revision's own scripts/local-cluster.sh on the
# base cluster's directory and ports, with BENCH_BASE_NODE_FLAGS after
# RINGLIMIT_NODE_FLAGS for its nodes, on the servers' CPUs when pinned.
base_cluster() {
	RINGLIMIT_CLUSTER_DIR="$base_dir" RINGLIMIT_HTTP_BASE="$base_http" RINGLIMIT_GRPC_BASE="$base_grpc" \
		RINGLIMIT_GOSSIP_BASE="$base_gossip" RINGLIMIT_PEER_BASE="$base_peer" \
		RINGLIMIT_NODE_FLAGS="${RINGLIMIT_NODE_FLAGS:-}${base_flags:+ $base_flags}" RINGLIMIT_POLICY="$base_policy" \
		"${srv[@]}" "$base_src/scripts/local-cluster.sh" "$@"
}
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	scripts/local-cluster.sh down >/dev/null 2>&1 || true
	if [ -n "$base_tmp" ]; then
		[ -x "$base_src/scripts/local-cluster.sh" ] && base_cluster down >/dev/null 2>&1 || true
		# Whatever the base's script did not stop (it may not know "down").
		for f in "$base_dir"/node-*.pid; do
			[ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
		done
		git worktree remove --force "$base_src" >/dev/null 2>&1 || true
		rm -rf "$base_tmp"
		git worktree prune >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

# cmd/bench is its own Go module: built from its directory.
(cd cmd/bench && go build -o "$out/bench" .)
if has rls; then
	# envoyproxy/ratelimit at the version, and with the dependencies,
	# cmd/bench/envoyratelimit/go.mod pins (a module of its own: ringlimit's
	# OpenTelemetry is too new for it).
	(cd cmd/bench/envoyratelimit && go build -o "$out/envoy-ratelimit" github.com/envoyproxy/ratelimit/src/service_cmd)
	# A node that does not know --rls-config would not start, and say so
	# only in its log: ask it first (local-cluster.sh builds the same binary).
	mkdir -p "$RINGLIMIT_CLUSTER_DIR"
	go build -o "$RINGLIMIT_CLUSTER_DIR/ringlimit-node" ./cmd/node
	usage=$("$RINGLIMIT_CLUSTER_DIR/ringlimit-node" -h 2>&1 || true)
	if ! grep -q -- '-rls-config' <<<"$usage"; then
		echo "the node of this tree has no --rls-config flag, so ringlimit cannot run the rls workload; $(leave_out rls)" >&2
		exit 2
	fi
fi
if [ -n "$base_rev" ]; then
	# Pid files left by an earlier run name nothing of this one.
	mkdir -p "$base_dir"
	rm -f "$base_dir"/node-*.pid
	base_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-base.XXXXXX")
	base_src="$base_tmp/src"
	git worktree add --quiet --detach "$base_src" "$base_rev"
	if has authz && [ -e "$base_src/$RINGLIMIT_POLICY" ]; then
		base_policy=$RINGLIMIT_POLICY
	fi
	if [ ! -x "$base_src/scripts/local-cluster.sh" ]; then
		echo "BENCH_BASE_REV=$BENCH_BASE_REV has no scripts/local-cluster.sh to start its nodes with" >&2
		exit 2
	fi
	if [ -n "$base_flags" ] && ! grep -q RINGLIMIT_NODE_FLAGS "$base_src/scripts/local-cluster.sh"; then
		echo "BENCH_BASE_REV=$BENCH_BASE_REV: its scripts/local-cluster.sh does not read RINGLIMIT_NODE_FLAGS, so BENCH_BASE_NODE_FLAGS cannot reach its nodes" >&2
		exit 2
	fi
	current="working tree at $(git rev-parse --short HEAD)"
	[ -n "$(git status --porcelain --untracked-files=no)" ] && current+=" with uncommitted changes"
	echo "current build: $current${RINGLIMIT_NODE_FLAGS:+, node flags: $RINGLIMIT_NODE_FLAGS};" \
		"base build: $(git rev-parse --short "$base_rev") ($BENCH_BASE_REV)${RINGLIMIT_NODE_FLAGS:+, node flags: $RINGLIMIT_NODE_FLAGS}${base_flags:+, base-only node flags: $base_flags}" >&2
fi
# wait_up WHAT PID LOG URL [CURL ARGS]: waits until URL answers 2xx, and
# stops the script with the end of LOG if PID exits or 15 s pass first.
wait_up() {
	local what=$1 pid=$2 log=$3 url=$4 deadline=$((SECONDS + 15))
	shift 4
	until curl -fsS -o /dev/null "$@" "$url" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			echo "$what did not start; the end of $log:" >&2
			tail -5 "$log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

"${srv[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/redis.log" 2>&1 &
pids+=($!)
redis_pid=${pids[0]}
"${srv[@]}" "$out/bench" --serve-health "$health_addr" >"$out/health.log" 2>&1 &
pids+=($!)
health_pid=${pids[1]}
for _ in $(seq 1 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

# envoyproxy/ratelimit, three processes on the one Redis, each reading the
# config directory RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config. Its settings
# are environment variables (src/settings/settings.go); those not set here
# keep their defaults unless the environment sets them.
envoy_targets=""
envoy_pids=""
if has rls; then
	rt="$out/envoy-ratelimit-runtime"
	rm -rf "$rt"
	mkdir -p "$rt/ratelimit/config"
	cp "$rls_yaml" "$rt/ratelimit/config/bench-rls.yaml"
	for i in 1 2 3; do
		env RUNTIME_ROOT="$rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_APPDIRECTORY=config \
			RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true \
			BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_TYPE=SINGLE REDIS_URL="127.0.0.1:$redis_port" \
			USE_STATSD=false DISABLE_STATS=true LOG_LEVEL=warn \
			HOST=127.0.0.1 PORT=$((envoy_http + i)) GRPC_HOST=127.0.0.1 GRPC_PORT=$((envoy_grpc + i)) \
			DEBUG_HOST=127.0.0.1 DEBUG_PORT=$((envoy_debug + i)) \
			"${srv[@]}" "$out/envoy-ratelimit" >"$out/envoy-ratelimit-$i.log" 2>&1 &
		pids+=($!)
		envoy_pids+="${envoy_pids:+,}$!"
		envoy_targets+="${envoy_targets:+,}127.0.0.1:$((envoy_grpc + i))"
	done
	i=1
	for p in ${envoy_pids//,/ }; do
		# Healthy once its configuration is loaded and Redis answers.
		wait_up "envoyproxy/ratelimit $i (pid $p)" "$p" "$out/envoy-ratelimit-$i.log" "http://127.0.0.1:$((envoy_http + i))/healthcheck"
		i=$((i + 1))
	done
fi

# The bare net/http servers of the http and authz pairs.
bare_targets=""
bare_pids=""
if has http || has authz; then
	for i in 1 2 3; do
		"${srv[@]}" "$out/bench" --serve-bare-http "127.0.0.1:$((bare_base + i))" >"$out/bare-http-$i.log" 2>&1 &
		pids+=($!)
		bare_pids+="${bare_pids:+,}$!"
		bare_targets+="${bare_targets:+,}127.0.0.1:$((bare_base + i))"
		wait_up "bare HTTP server $i (pid $!)" "$!" "$out/bare-http-$i.log" "http://127.0.0.1:$((bare_base + i))/v1/authz" -H "X-API-Key: probe" -H "X-Original-URI: /items"
	done
fi

# --rls-config for the current build's nodes only, before
# RINGLIMIT_NODE_FLAGS (whose flags come last and win).
node_flags=${RINGLIMIT_NODE_FLAGS:-}
if has rls; then
	node_flags="--rls-config $rls_yaml${node_flags:+ $node_flags}"
fi
RINGLIMIT_NODE_FLAGS="$node_flags" "${srv[@]}" scripts/local-cluster.sh up 3 >/dev/null
if [ -n "$base_rev" ]; then
	base_cluster up 3 >/dev/null
fi

targets=""
http_targets=""
metrics=""
for i in 1 2 3; do
	targets+="${targets:+,}127.0.0.1:$((RINGLIMIT_GRPC_BASE + i))"
	http_targets+="${http_targets:+,}127.0.0.1:$((RINGLIMIT_HTTP_BASE + i))"
	metrics+="${metrics:+,}http://127.0.0.1:$((RINGLIMIT_HTTP_BASE + i))/metrics"
done
node_pids=$(cat "$RINGLIMIT_CLUSTER_DIR"/node-*.pid | paste -sd,)
base_targets=""
base_http_targets=""
base_metrics=""
base_node_pids=""
if [ -n "$base_rev" ]; then
	for i in 1 2 3; do
		base_targets+="${base_targets:+,}127.0.0.1:$((base_grpc + i))"
		base_http_targets+="${base_http_targets:+,}127.0.0.1:$((base_http + i))"
		base_metrics+="${base_metrics:+,}http://127.0.0.1:$((base_http + i))/metrics"
	done
	base_node_pids=$(cat "$base_dir"/node-*.pid | paste -sd,)
	# The base-only flags must be on every base node's command line and on
	# none of the current build's (unless RINGLIMIT_NODE_FLAGS has them too).
	if [ -n "$base_flags" ]; then
		cmdline() { tr '\0' ' ' <"/proc/$1/cmdline"; }
		read -ra words <<<"$base_flags"
		want=" ${words[*]} "
		for p in ${base_node_pids//,/ }; do
			case " $(cmdline "$p")" in *"$want"*) ;; *)
				echo "base node (pid $p) was started without$want; its command line: $(cmdline "$p")" >&2
				exit 1
				;;
			esac
		done
		read -ra words <<<"${RINGLIMIT_NODE_FLAGS:-}"
		case " ${words[*]} " in *"$want"*) ;; *)
			for p in ${node_pids//,/ }; do
				case " $(cmdline "$p")" in *"$want"*)
					echo "current node (pid $p) has the base-only flags$want" >&2
					exit 1
					;;
				esac
			done
			;;
		esac
	fi
fi

run() { # name, extra flags...
	local name=$1
	shift
	"${load[@]}" "$out/bench" --json --name "$name" --duration "$duration" --warmup "$warmup" --concurrency 64 "$@" >>"$results"
}

# ringlimit runs workload $1 (bench flags follow) as ringlimit-$1 on the
# current build's cluster and, with BENCH_BASE_REV, as base-$1 on the base
# build's, right after or right before it (alternating with the round).
ringlimit() {
	local w=$1
	shift
	local cur=(run "ringlimit-$w" --targets "$targets" --http-targets "$http_targets" --pids "$node_pids" --metrics-urls "$metrics" "$@")
	if [ -z "$base_rev" ]; then
		"${cur[@]}"
		return
	fi
	local base=(run "base-$w" --targets "$base_targets" --http-targets "$base_http_targets" --pids "$base_node_pids" --metrics-urls "$base_metrics" "$@")
	if [ $((round % 2)) = 1 ]; then
		"${cur[@]}"
		"${base[@]}"
	else
		"${base[@]}"
		"${cur[@]}"
	fi
}

# current W FLAGS...: workload W as ringlimit-W on the current build's
# cluster only.
current() {
	local w=$1
	shift
	run "ringlimit-$w" --targets "$targets" --http-targets "$http_targets" --pids "$node_pids" --metrics-urls "$metrics" "$@"
}

# probe WHAT HINT BENCH-FLAGS...: one caller for 300 ms; a side that fails
# more than 1% of its calls stops the script here, with bench's reason.
probe() {
	local what=$1 hint=$2
	shift 2
	if ! "${load[@]}" "$out/bench" --duration 300ms --warmup 0s --concurrency 1 --keys 10 "$@" >"$out/probe.log" 2>&1; then
		echo "$what does not answer: $(tail -1 "$out/probe.log")" >&2
		echo "$hint" >&2
		exit 1
	fi
}
if has rls; then
	probe "ringlimit's RateLimitService/ShouldRateLimit (--rls-config $rls_yaml)" \
		"$(leave_out rls); the nodes' logs are in $RINGLIMIT_CLUSTER_DIR" \
		--proto rls --targets "$targets"
	probe "envoyproxy/ratelimit's ShouldRateLimit" "its logs: $out/envoy-ratelimit-*.log" --proto rls --targets "$envoy_targets"
fi
if has http || has authz; then
	probe "the bare HTTP servers' POST /v1/check" "their logs: $out/bare-http-*.log" --proto http --http-targets "$bare_targets"
fi
if has authz; then
	probe "ringlimit's GET /v1/authz (policy $RINGLIMIT_POLICY)" \
		"$(leave_out authz); the nodes' logs are in $RINGLIMIT_CLUSTER_DIR" \
		--proto authz --http-targets "$http_targets"
fi
if has acquire; then
	probe "ringlimit's Acquire and Release (through the Go client)" \
		"$(leave_out acquire); the nodes' logs are in $RINGLIMIT_CLUSTER_DIR" \
		--proto client --op acquire-release --targets "$targets"
	probe "the Redis semaphore" "its log: $out/redis.log" --target "redis://127.0.0.1:$redis_port" --op acquire-release
fi

# warm_up WHAT BENCH-FLAGS...: BENCH_WARM of unmeasured load on a server
# set before the first round (see the top of this file).
warm_up() {
	local what=$1
	shift
	if ! "${load[@]}" "$out/bench" --duration "$warm" --warmup 0s --concurrency 64 "$@" >"$out/warm.log" 2>&1; then
		echo "the warm-up of $what failed: $(tail -1 "$out/warm.log")" >&2
		exit 1
	fi
}
if [ "$warm" != 0 ] && [ "$warm" != 0s ]; then
	echo "warming every server for $warm" >&2
	if has rls; then
		node_load=(--proto rls --dist uniform --keys 10000)
	else
		node_load=(--proto client --dist uniform --keys 10000)
	fi
	warm_up "the current build's nodes" --targets "$targets" --http-targets "$http_targets" "${node_load[@]}"
	if [ -n "$base_rev" ]; then
		warm_up "the base build's nodes" --targets "$base_targets" --http-targets "$base_http_targets" "${node_load[@]}"
	fi
	if has rls; then
		warm_up envoyproxy/ratelimit --proto rls --targets "$envoy_targets" --dist uniform --keys 10000
	fi
	if has http || has authz; then
		warm_up "the bare HTTP servers" --proto http --http-targets "$bare_targets" --dist uniform --keys 10000
	fi
	if has core || has acquire; then
		warm_up Redis --target "redis://127.0.0.1:$redis_port" --dist uniform --keys 10000
	fi
	if has core; then
		warm_up "the health server" --target-health --targets "$health_addr"
	fi
fi

# ab A B runs the commands A and B (each a function), A first in odd
# rounds and B first in even ones.
ab() {
	if [ $((round % 2)) = 1 ]; then
		"$1"
		"$2"
	else
		"$2"
		"$1"
	fi
}
uniform=(--dist uniform --keys 10000)
rls_ringlimit() { run ringlimit-rls --proto rls --targets "$targets" --pids "$node_pids" --metrics-urls "$metrics" "${uniform[@]}"; }
rls_envoy() { run envoy-ratelimit-rls --proto rls --targets "$envoy_targets" --pids "$envoy_pids,$redis_pid" "${uniform[@]}"; }
http_ringlimit() { ringlimit http --proto http "${uniform[@]}"; }
http_bare() { run nethttp-check --proto http --http-targets "$bare_targets" --pids "$bare_pids" "${uniform[@]}"; }
authz_ringlimit() { ringlimit authz --proto authz "${uniform[@]}"; }
authz_bare() { run nethttp-authz --proto authz --http-targets "$bare_targets" --pids "$bare_pids" "${uniform[@]}"; }
# The acquire pair: 64 callers, a limit of 64 (nothing refused), uniform
# keys; ringlimit through the Go client.
acquire=(--op acquire-release --concurrency-limit 64 --lease-ttl 30s "${uniform[@]}")
acquire_ringlimit() { current acquire --proto client "${acquire[@]}"; }
acquire_redis() { run redis-semaphore --target "redis://127.0.0.1:$redis_port" --pids "$redis_pid" "${acquire[@]}"; }
acquire_round() { if has acquire; then ab acquire_ringlimit acquire_redis; fi; }

# core_pair W BENCH-FLAGS...: workload W through the Go client on the
# node builds and on Redis, A B A B.
core_pair() {
	local w=$1
	shift
	local flags=("$@") rflags=() f
	for f in "$@"; do [ "$f" = --lease ] || rflags+=("$f"); done # Redis has no leases
	core_ringlimit() { ringlimit "$w" --proto client "${flags[@]}"; }
	core_redis() { run "redis-$w" --target "redis://127.0.0.1:$redis_port" --pids "$redis_pid" "${rflags[@]}"; }
	ab core_ringlimit core_redis
}

for round in $(seq 1 "$rounds"); do
	echo "round $round of $rounds" >&2
	if has rls; then ab rls_ringlimit rls_envoy; fi
	if has http; then ab http_ringlimit http_bare; fi
	if has authz; then ab authz_ringlimit authz_bare; fi
	if ! has core; then
		acquire_round
		continue
	fi
	core_pair uniform --dist uniform --keys 10000
	core_pair hot --dist hot --lease
	ringlimit hot-nolease --proto client --dist hot
	# Uniform keys that keep what they spend (10,000 an hour: about 10
	# checks a second per key, 2.8 refilled): every check changes a key's
	# spend, so replication sends every key checked.
	ringlimit uniform-spent --proto client --dist uniform --keys 10000 --limit 10000 --per 1h
	# The floor runs between the two runs compared with it, next to each.
	ringlimit unary-uniform --proto grpc --dist uniform --keys 10000
	run "grpc-floor" --target-health --targets "$health_addr" --pids "$health_pid"
	ringlimit unary-routed --proto client --unbatched --dist uniform --keys 10000
	# Last, what leaves the builds' stores unlike each other, so that it
	# weighs on no comparison of the builds in this round: peek and
	# reserve-settle against the round's uniform check (the same keys,
	# callers and duration; current build only).
	current peek --proto client --op peek --dist uniform --keys 10000
	# Its reservations live 5 s, not the default 5 min: a node keeps every
	# live reservation in its state file, written each second, and the
	# about 27,000 of a run kept the current build's cluster at 11% of a
	# core (55 ticks in 5 s against 15 empty) through the next round's
	# runs, Redis's included, while the base's cluster ran none.
	current settle --proto client --op reserve-settle --reserve-cost 10 --reserve-ttl 5s --dist uniform --keys 10000
	acquire_round
done
# 2,000,000 keys after every other round: a node keeps a key after its
# spend refilled and walks every key it holds for its state file once a
# second, so a cluster left holding these keys is not idle (an idle 3-node
# cluster took 18.5% of a core after them, 3.4% empty) and would slow
# every run after it on the servers' CPU, Redis's included. A faster build
# creates more keys, so this is also what leaves the builds unlike.
if has core; then
	for round in $(seq 1 "$rounds"); do
		echo "uniform-2m, round $round of $rounds" >&2
		core_pair uniform-2m --dist uniform --keys 2000000 # more keys than any owner cache holds
	done
fi

"$out/bench" --plot "$results" --plot-out "$out/bench-compare.png" >&2
python3 - "$results" "$base_rev" "$base_flags" "$mode" "$server_godebug" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base_rev = sys.argv[2]
base_flags = sys.argv[3]
mode = sys.argv[4]
server_godebug = sys.argv[5]
def per_call_us(name, field):
    # Server CPU microseconds per call (field: the calls per CPU-second).
    v = [1e6 / x for x in vals(name, field) if x]
    return round(statistics.median(v), 3) if v else None
def vals(name, field):
    return [r[field] for r in runs if r["name"] == name]
def med(name, field):
    v = vals(name, field)
    return statistics.median(v) if v else None
def row(workload, a, b, base):
    # Medians of each side, their ratio, and the ratio round by round (the
    # i-th run of a over the i-th run of b, measured back to back).
    # base is "redis" (checks/s and p99 compared) or "grpc_floor" (calls/s).
    per_s = "redis_checks_per_s" if base == "redis" else "grpc_floor_calls_per_s"
    r = {"workload": workload,
         "ringlimit_checks_per_s": med(a, "checks_per_s"), per_s: med(b, "checks_per_s"),
         "ratio_checks": round(med(a, "checks_per_s") / med(b, "checks_per_s"), 3),
         "ratio_checks_by_round": [round(x / y, 3) for x, y in zip(vals(a, "checks_per_s"), vals(b, "checks_per_s"))],
         "ringlimit_p99_ms": med(a, "p99_ms"), f"{base}_p99_ms": med(b, "p99_ms")}
    if base == "redis":
        r["ratio_p99"] = round(med(a, "p99_ms") / med(b, "p99_ms"), 3)
    cpu(r, a, b, base)
    add_base(r, a)
    return r
def cpu(r, a, b, other):
    # Server CPU per decision of each side, and their ratio.
    r["ringlimit_server_cpu_us_per_check"] = per_call_us(a, "checks_per_cpu_s")
    r[f"{other}_server_cpu_us_per_check"] = per_call_us(b, "checks_per_cpu_s")
    r["ratio_server_cpu_per_check"] = ratio(r["ringlimit_server_cpu_us_per_check"], r[f"{other}_server_cpu_us_per_check"])
    r["ringlimit_server_minor_faults_by_round"] = faults(a)
    r[f"{other}_server_minor_faults_by_round"] = faults(b)
def faults(name):
    # The minor page faults each run's servers took in its window.
    return [r.get("server_minor_faults") for r in runs if r["name"] == name]
def add_base(r, a):
    if base_rev and vals("base-" + a.removeprefix("ringlimit-"), "checks_per_s"):
        # The same workload on the base build: ringlimit-X against base-X,
        # and round by round (the two runs of a round are back to back).
        c = "base-" + a.removeprefix("ringlimit-")
        r["base_rev"] = base_rev[:12]
        if base_flags:
            r["base_node_flags"] = base_flags
        r["base_checks_per_s"] = med(c, "checks_per_s")
        r["ratio_checks_vs_base"] = ratio(med(a, "checks_per_s"), med(c, "checks_per_s"))
        r["ratio_checks_vs_base_by_round"] = [ratio(x, y) for x, y in zip(vals(a, "checks_per_s"), vals(c, "checks_per_s"))]
        r["base_p99_ms"] = med(c, "p99_ms")
        r["ratio_p99_vs_base"] = ratio(med(a, "p99_ms"), med(c, "p99_ms"))
def ratio(x, y):
    return round(x / y, 3) if x is not None and y else None
def pair(workload, a, b, other, min_checks, max_p99=None):
    # ringlimit (a) against another server (b) in the same rounds, the two
    # runs of a round back to back in alternating order: medians, their
    # ratios, the ratios round by round, and the targets the ratios are
    # read against (reported, not enforced).
    r = {"workload": workload,
         "ringlimit_checks_per_s": med(a, "checks_per_s"), f"{other}_checks_per_s": med(b, "checks_per_s"),
         "ratio_checks": ratio(med(a, "checks_per_s"), med(b, "checks_per_s")),
         "ratio_checks_by_round": [ratio(x, y) for x, y in zip(vals(a, "checks_per_s"), vals(b, "checks_per_s"))],
         "ringlimit_p99_ms": med(a, "p99_ms"), f"{other}_p99_ms": med(b, "p99_ms"),
         "ratio_p99": ratio(med(a, "p99_ms"), med(b, "p99_ms")),
         "ratio_p99_by_round": [ratio(x, y) for x, y in zip(vals(a, "p99_ms"), vals(b, "p99_ms"))],
         # Refusals are decisions too (a check counts either way), but a
         # side that refuses much is measuring another path.
         "ringlimit_rejected_share": ratio(sum(vals(a, "rejected")), sum(vals(a, "checks"))),
         "target_ratio_checks_min": min_checks}
    cpu(r, a, b, other)
    meets = r["ratio_checks"] is not None and r["ratio_checks"] >= min_checks
    if max_p99 is not None:
        r["target_ratio_p99_max"] = max_p99
        meets = meets and r["ratio_p99"] is not None and r["ratio_p99"] <= max_p99
    r["meets_targets"] = meets
    add_base(r, a)
    return r
def measured(*names):
    return all(vals(n, "checks_per_s") for n in names)
rows = [row(w, a, b, base) for w, a, b, base in [
            ("uniform", "ringlimit-uniform", "redis-uniform", "redis"),
            ("hot", "ringlimit-hot", "redis-hot", "redis"),
            ("uniform-2m", "ringlimit-uniform-2m", "redis-uniform-2m", "redis"),
            ("hot-nolease", "ringlimit-hot-nolease", "redis-hot", "redis"),
            ("uniform-spent", "ringlimit-uniform-spent", "redis-uniform", "redis"),
            ("unary-routed-vs-grpc-floor", "ringlimit-unary-routed", "grpc-floor", "grpc_floor"),
            ("unary-vs-grpc-floor", "ringlimit-unary-uniform", "grpc-floor", "grpc_floor")]
        if measured(a, b)]
rows += [pair(w, a, b, other, *targets) for w, a, b, other, targets in [
             ("rls", "ringlimit-rls", "envoy-ratelimit-rls", "envoy_ratelimit", (2, 0.5)),
             # POST /v1/check: 0.7x the bare servers pinned (the servers with
             # a CPU of their own, as on separate machines), 0.85x shared.
             ("http-vs-bare-http", "ringlimit-http", "nethttp-check", "bare_http", (0.7 if mode == "pinned" else 0.85,)),
             ("authz-vs-bare-http", "ringlimit-authz", "nethttp-authz", "bare_http", (0.85,))]
         if measured(a) or measured(b)]
def op_row(workload, a, op, check="ringlimit-uniform"):
    # An operation (a: calls counted by bench) against the plain check of
    # the same rounds (check: one call per check): calls/s, p99, server CPU
    # per call, their ratios, and calls/s round by round.
    r = {"workload": workload,
         "check_checks_per_s": med(check, "checks_per_s"), f"{op}_calls_per_s": med(a, "calls_per_s"),
         "ratio_calls": ratio(med(a, "calls_per_s"), med(check, "checks_per_s")),
         "ratio_calls_by_round": [ratio(x, y) for x, y in zip(vals(a, "calls_per_s"), vals(check, "checks_per_s"))],
         "check_p99_ms": med(check, "p99_ms"), f"{op}_p99_ms": med(a, "p99_ms"),
         "check_server_cpu_us_per_call": per_call_us(check, "checks_per_cpu_s"),
         f"{op}_server_cpu_us_per_call": per_call_us(a, "calls_per_cpu_s")}
    r["ratio_server_cpu_per_call"] = ratio(r[f"{op}_server_cpu_us_per_call"], r["check_server_cpu_us_per_call"])
    if op == "settle":
        # A pair is a reserve and its settle (two calls; p99 above is the pair's).
        r["settle_pairs_per_s"] = med(a, "requests_per_s")
        r["ratio_pairs"] = ratio(med(a, "requests_per_s"), med(check, "checks_per_s"))
        r["settle_server_cpu_us_per_pair"] = per_call_us(a, "checks_per_cpu_s")
    r["errors"] = sum(vals(a, "errors"))
    return r
rows += [op_row(w, a, op) for w, a, op in [
             ("peek-vs-check", "ringlimit-peek", "peek"),
             ("settle-vs-check", "ringlimit-settle", "settle")]
         if measured(a, "ringlimit-uniform")]
def acquire_row(a="ringlimit-acquire", b="redis-semaphore"):
    # Acquire+release pairs (a run's requests) through ringlimit against the
    # Redis semaphore, the two runs of a round back to back.
    r = {"workload": "acquire",
         "ringlimit_pairs_per_s": med(a, "requests_per_s"), "redis_pairs_per_s": med(b, "requests_per_s"),
         "ratio_pairs": ratio(med(a, "requests_per_s"), med(b, "requests_per_s")),
         "ratio_pairs_by_round": [ratio(x, y) for x, y in zip(vals(a, "requests_per_s"), vals(b, "requests_per_s"))],
         "ringlimit_calls_per_s": med(a, "calls_per_s"), "redis_calls_per_s": med(b, "calls_per_s"),
         "ringlimit_p99_ms": med(a, "p99_ms"), "redis_p99_ms": med(b, "p99_ms"),
         "ratio_p99": ratio(med(a, "p99_ms"), med(b, "p99_ms")),
         "ratio_p99_by_round": [ratio(x, y) for x, y in zip(vals(a, "p99_ms"), vals(b, "p99_ms"))],
         "ringlimit_rejected_share": ratio(sum(vals(a, "rejected")), sum(vals(a, "checks"))),
         "redis_rejected_share": ratio(sum(vals(b, "rejected")), sum(vals(b, "checks"))),
         "ringlimit_errors": sum(vals(a, "errors")), "redis_errors": sum(vals(b, "errors")),
         "target_ratio_pairs_min": 2, "target_ratio_p99_max": 0.5}
    r["meets_targets"] = (r["ratio_pairs"] is not None and r["ratio_pairs"] >= 2 and
                          r["ratio_p99"] is not None and r["ratio_p99"] <= 0.5)
    return r
if measured("ringlimit-acquire") or measured("redis-semaphore"):
    rows.append(acquire_row())
for r in rows:
    print(json.dumps({"mode": mode, "server_godebug": server_godebug, **r}))
PY
