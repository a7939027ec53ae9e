#!/usr/bin/env bash
# A 2-second smoke run of cmd/bench against a local 3-node cluster: the
# bench tool builds, drives every node through the Go client, and gets
# answers (it exits non-zero when more than 1% of requests fail). Used by CI;
# benchmarks are not tests, so no figure is checked. cmd/bench is its own Go
# module, so it is built from its directory. The nodes listen on ports of
# their own (HTTP 18081-18083, gRPC 19091-19093, gossip 17947-17949): below
# 32768, where the kernel picks outgoing source ports, and used by no other
# script or test.
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGLIMIT_CLUSTER_DIR=${TMPDIR:-/tmp}/ringlimit-smoke
export RINGLIMIT_HTTP_BASE=18080 RINGLIMIT_GRPC_BASE=19090 RINGLIMIT_GOSSIP_BASE=17946
mkdir -p "$RINGLIMIT_CLUSTER_DIR"
RINGLIMIT_CLUSTER_DIR=$(cd "$RINGLIMIT_CLUSTER_DIR" && pwd)
trap 'scripts/local-cluster.sh down >/dev/null 2>&1 || true' EXIT
scripts/local-cluster.sh up 3 >/dev/null
(cd cmd/bench && go build -o "$RINGLIMIT_CLUSTER_DIR/bench" .)
"$RINGLIMIT_CLUSTER_DIR/bench" --name smoke --proto client --duration 2s --warmup 500ms --concurrency 16 \
	--targets 127.0.0.1:19091,127.0.0.1:19092,127.0.0.1:19093
