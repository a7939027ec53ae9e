#!/usr/bin/env bash
# Runs every check a change must pass: formatting, go vet, and the whole test
# suite under the race detector. Usage: scripts/test.sh [go test flags...]
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '\.pb\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" $unformatted >&2
	exit 1
fi
go vet ./...
go test -race -count=1 -timeout 8m "$@" ./...
