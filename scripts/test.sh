#!/usr/bin/env bash
# Runs every check a change must pass: formatting, go vet, and the whole test
# suite under the race detector, in the library's module, in cmd/bench and in
# deploy, which are modules of their own (the root's ./... reaches neither).
# Usage: scripts/test.sh [--busy] [go test flags...] (given to both modules' go test)
#
# --busy runs the same suite while one busy loop per CPU (at normal priority)
# holds every core, as a loaded CI runner or a laptop compiling something
# else would: timings that only pass on an idle machine fail here. The loops
# are stopped when the script exits, however it exits.
set -euo pipefail
cd "$(dirname "$0")/.."

busy=false
timeout=8m bench_timeout=2m deploy_timeout=5m # per package; cmd/node takes the longest
if [ "${1:-}" = "--busy" ]; then
	busy=true
	# The loops take half of every core: twice the idle figures.
	timeout=16m bench_timeout=4m deploy_timeout=10m
	shift
fi

# Every tracked Go file of both modules, cmd/bench's included.
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	exit 1
fi
go vet ./...
(cd cmd/bench && go vet ./...)
(cd deploy && go vet ./...)

if $busy; then
	spinners=()
	stop_spinners() {
		[ ${#spinners[@]} -gt 0 ] && kill "${spinners[@]}" 2>/dev/null || true
		wait 2>/dev/null || true
	}
	trap stop_spinners EXIT
	trap 'exit 130' INT TERM
	cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
	[ "$cpus" -ge 2 ] || cpus=2
	for _ in $(seq 1 "$cpus"); do
		sh -c 'while :; do :; done' &
		spinners+=($!)
	done
	echo "test.sh: ${#spinners[@]} busy loops hold the CPUs (pids ${spinners[*]})" >&2
fi

start=$SECONDS
go test -race -count=1 -timeout "$timeout" "$@" ./...
(cd cmd/bench && go test -race -count=1 -timeout "$bench_timeout" "$@" ./...)
(cd deploy && go test -race -count=1 -timeout "$deploy_timeout" "$@" ./...)
mode=idle
$busy && mode=busy
echo "test.sh: suite passed in $((SECONDS - start))s ($mode)" >&2
