#!/usr/bin/env bash
# Runs every check a change must pass: formatting, go vet, and the whole test
# suite under the race detector, in the library's module, in cmd/bench and in
# deploy, which are modules of their own (the root's ./... reaches neither).
# Usage: scripts/test.sh [go test flags...] (given to both modules' go test)
set -euo pipefail
cd "$(dirname "$0")/.."

# Every tracked Go file of both modules, cmd/bench's included.
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	exit 1
fi
go vet ./...
(cd cmd/bench && go vet ./...)
(cd deploy && go vet ./...)
go test -race -count=1 -timeout 8m "$@" ./...
(cd cmd/bench && go test -race -count=1 -timeout 2m "$@" ./...)
(cd deploy && go test -race -count=1 -timeout 5m "$@" ./...)
