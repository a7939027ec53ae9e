#!/usr/bin/env bash
# A 2-second smoke run of cmd/bench against a local 3-node cluster: the
# bench tool builds, drives every node through the Go client, and gets
# answers (it exits non-zero when more than 1% of requests fail). Used by CI;
# benchmarks are not tests, so no figure is checked.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGLIMIT_CLUSTER_DIR=${TMPDIR:-/tmp}/ringlimit-smoke
export RINGLIMIT_HTTP_BASE=58080 RINGLIMIT_GRPC_BASE=59090 RINGLIMIT_GOSSIP_BASE=57946
trap 'scripts/local-cluster.sh down >/dev/null 2>&1 || true' EXIT
scripts/local-cluster.sh up 3 >/dev/null
go build -o "$RINGLIMIT_CLUSTER_DIR/bench" ./cmd/bench
"$RINGLIMIT_CLUSTER_DIR/bench" --name smoke --proto client --duration 2s --warmup 500ms --concurrency 16 \
	--targets 127.0.0.1:59091,127.0.0.1:59092,127.0.0.1:59093
