#!/usr/bin/env bash
# Compares ringlimit with the Redis baseline on this machine, in one run.
#
#   scripts/bench-compare.sh            # BENCH_DURATION per run (default 10s)
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
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${BENCH_DURATION:-10s}
warmup=${BENCH_WARMUP:-2s}
rounds=${BENCH_ROUNDS:-2}
out=${OUT:-${TMPDIR:-/tmp}/ringlimit-bench}
redis_port=${BENCH_REDIS_PORT:-26379}
health_addr=127.0.0.1:${BENCH_HEALTH_PORT:-29190}
export RINGLIMIT_CLUSTER_DIR="$out/cluster"
export RINGLIMIT_HTTP_BASE=${RINGLIMIT_HTTP_BASE:-28080}
export RINGLIMIT_GRPC_BASE=${RINGLIMIT_GRPC_BASE:-29090}
export RINGLIMIT_GOSSIP_BASE=${RINGLIMIT_GOSSIP_BASE:-27946}
export RINGLIMIT_POLICY=""
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

if ! command -v redis-server >/dev/null; then
	echo "installing redis-server" >&2
	apt-get install -y redis-server >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y redis-server >/dev/null; }
fi

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	scripts/local-cluster.sh down >/dev/null 2>&1 || true
}
trap cleanup EXIT

go build -o "$out/bench" ./cmd/bench
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$out/redis.log" 2>&1 &
pids+=($!)
"$out/bench" --serve-health "$health_addr" >"$out/health.log" 2>&1 &
pids+=($!)
scripts/local-cluster.sh up 3 >/dev/null
for _ in $(seq 1 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done

targets=""
metrics=""
for i in 1 2 3; do
	targets+="${targets:+,}127.0.0.1:$((RINGLIMIT_GRPC_BASE + i))"
	metrics+="${metrics:+,}http://127.0.0.1:$((RINGLIMIT_HTTP_BASE + i))/metrics"
done
node_pids=$(cat "$RINGLIMIT_CLUSTER_DIR"/node-*.pid | paste -sd,)
redis_pid=${pids[0]}

run() { # name, extra flags...
	local name=$1
	shift
	"$out/bench" --json --name "$name" --duration "$duration" --warmup "$warmup" --concurrency 64 "$@" >>"$results"
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
		run "ringlimit-$w" --proto client --targets "$targets" --pids "$node_pids" --metrics-urls "$metrics" "${dist[@]}" "${lease[@]}"
		run "redis-$w" --target "redis://127.0.0.1:$redis_port" --pids "$redis_pid" "${dist[@]}"
	done
	run "ringlimit-hot-nolease" --proto client --targets "$targets" --pids "$node_pids" --metrics-urls "$metrics" --dist hot
	# The floor runs between the two runs compared with it, next to each.
	run "ringlimit-unary-uniform" --proto grpc --targets "$targets" --pids "$node_pids" --metrics-urls "$metrics" --dist uniform --keys 10000
	run "grpc-floor" --target-health --targets "$health_addr" --pids "${pids[1]}"
	run "ringlimit-unary-routed" --proto client --unbatched --targets "$targets" --pids "$node_pids" --metrics-urls "$metrics" --dist uniform --keys 10000
done

"$out/bench" --plot "$results" --plot-out "$out/bench-compare.png" >&2
python3 - "$results" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
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
    return r
rows = [row("uniform", "ringlimit-uniform", "redis-uniform", "redis"),
        row("hot", "ringlimit-hot", "redis-hot", "redis"),
        row("hot-nolease", "ringlimit-hot-nolease", "redis-hot", "redis"),
        row("unary-routed-vs-grpc-floor", "ringlimit-unary-routed", "grpc-floor", "grpc_floor"),
        row("unary-vs-grpc-floor", "ringlimit-unary-uniform", "grpc-floor", "grpc_floor")]
for r in rows:
    print(json.dumps(r))
PY
