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
# and prints the ratio ringlimit/Redis per workload. Also measured in the
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
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${BENCH_DURATION:-10s}
warmup=${BENCH_WARMUP:-2s}
rounds=${BENCH_ROUNDS:-2}
out=${OUT:-${TMPDIR:-/tmp}/ringlimit-bench}
redis_port=${BENCH_REDIS_PORT:-26379}
health_port=${BENCH_HEALTH_PORT:-29190}
health_addr=127.0.0.1:$health_port
mkdir -p "$out"
out=$(cd "$out" && pwd)
export RINGLIMIT_CLUSTER_DIR="$out/cluster"
export RINGLIMIT_HTTP_BASE=${RINGLIMIT_HTTP_BASE:-28080}
export RINGLIMIT_GRPC_BASE=${RINGLIMIT_GRPC_BASE:-29090}
export RINGLIMIT_GOSSIP_BASE=${RINGLIMIT_GOSSIP_BASE:-27946}
export RINGLIMIT_PEER_BASE=${RINGLIMIT_PEER_BASE:-$((RINGLIMIT_GRPC_BASE + 100))}
export RINGLIMIT_POLICY=""
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
if dup=$(printf '%s\n' "${ports[@]}" | sort -n | uniq -d | paste -sd,) && [ -n "$dup" ]; then
	echo "port(s) $dup used twice; change RINGLIMIT_*_BASE, BENCH_BASE_*_BASE or BENCH_*_PORT" >&2
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
# RINGLIMIT_NODE_FLAGS for its nodes.
base_cluster() {
	RINGLIMIT_CLUSTER_DIR="$base_dir" RINGLIMIT_HTTP_BASE="$base_http" RINGLIMIT_GRPC_BASE="$base_grpc" \
		RINGLIMIT_GOSSIP_BASE="$base_gossip" RINGLIMIT_PEER_BASE="$base_peer" \
		RINGLIMIT_NODE_FLAGS="${RINGLIMIT_NODE_FLAGS:-}${base_flags:+ $base_flags}" \
		"$base_src/scripts/local-cluster.sh" "$@"
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
if [ -n "$base_rev" ]; then
	# Pid files left by an earlier run name nothing of this one.
	mkdir -p "$base_dir"
	rm -f "$base_dir"/node-*.pid
	base_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-base.XXXXXX")
	base_src="$base_tmp/src"
	git worktree add --quiet --detach "$base_src" "$base_rev"
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
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/redis.log" 2>&1 &
pids+=($!)
"$out/bench" --serve-health "$health_addr" >"$out/health.log" 2>&1 &
pids+=($!)
scripts/local-cluster.sh up 3 >/dev/null
if [ -n "$base_rev" ]; then
	base_cluster up 3 >/dev/null
fi
for _ in $(seq 1 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

targets=""
metrics=""
for i in 1 2 3; do
	targets+="${targets:+,}127.0.0.1:$((RINGLIMIT_GRPC_BASE + i))"
	metrics+="${metrics:+,}http://127.0.0.1:$((RINGLIMIT_HTTP_BASE + i))/metrics"
done
node_pids=$(cat "$RINGLIMIT_CLUSTER_DIR"/node-*.pid | paste -sd,)
redis_pid=${pids[0]}
base_targets=""
base_metrics=""
base_node_pids=""
if [ -n "$base_rev" ]; then
	for i in 1 2 3; do
		base_targets+="${base_targets:+,}127.0.0.1:$((base_grpc + i))"
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
	"$out/bench" --json --name "$name" --duration "$duration" --warmup "$warmup" --concurrency 64 "$@" >>"$results"
}

# ringlimit runs workload $1 (bench flags follow) as ringlimit-$1 on the
# current build's cluster and, with BENCH_BASE_REV, as base-$1 on the base
# build's, right after or right before it (alternating with the round).
ringlimit() {
	local w=$1
	shift
	local cur=(run "ringlimit-$w" --targets "$targets" --pids "$node_pids" --metrics-urls "$metrics" "$@")
	if [ -z "$base_rev" ]; then
		"${cur[@]}"
		return
	fi
	local base=(run "base-$w" --targets "$base_targets" --pids "$base_node_pids" --metrics-urls "$base_metrics" "$@")
	if [ $((round % 2)) = 1 ]; then
		"${cur[@]}"
		"${base[@]}"
	else
		"${base[@]}"
		"${cur[@]}"
	fi
}

for round in $(seq 1 "$rounds"); do
	echo "round $round of $rounds" >&2
	for w in uniform hot; do
		dist=(--dist uniform --keys 10000)
		lease=()
		if [ "$w" = hot ]; then
			dist=(--dist hot)
			lease=(--lease)
		fi
		ringlimit "$w" --proto client "${dist[@]}" "${lease[@]}"
		run "redis-$w" --target "redis://127.0.0.1:$redis_port" --pids "$redis_pid" "${dist[@]}"
	done
	ringlimit hot-nolease --proto client --dist hot
	# Uniform keys that keep what they spend (10,000 an hour: about 10
	# checks a second per key, 2.8 refilled): every check changes a key's
	# spend, so replication sends every key checked.
	ringlimit uniform-spent --proto client --dist uniform --keys 10000 --limit 10000 --per 1h
	# The floor runs between the two runs compared with it, next to each.
	ringlimit unary-uniform --proto grpc --dist uniform --keys 10000
	run "grpc-floor" --target-health --targets "$health_addr" --pids "${pids[1]}"
	ringlimit unary-routed --proto client --unbatched --dist uniform --keys 10000
done

"$out/bench" --plot "$results" --plot-out "$out/bench-compare.png" >&2
python3 - "$results" "$base_rev" "$base_flags" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base_rev = sys.argv[2]
base_flags = sys.argv[3]
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
    if base_rev:
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
    return r
def ratio(x, y):
    return round(x / y, 3) if x is not None and y else None
rows = [row("uniform", "ringlimit-uniform", "redis-uniform", "redis"),
        row("hot", "ringlimit-hot", "redis-hot", "redis"),
        row("hot-nolease", "ringlimit-hot-nolease", "redis-hot", "redis"),
        row("uniform-spent", "ringlimit-uniform-spent", "redis-uniform", "redis"),
        row("unary-routed-vs-grpc-floor", "ringlimit-unary-routed", "grpc-floor", "grpc_floor"),
        row("unary-vs-grpc-floor", "ringlimit-unary-uniform", "grpc-floor", "grpc_floor")]
for r in rows:
    print(json.dumps(r))
PY
