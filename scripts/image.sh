#!/usr/bin/env bash
# Builds the ringlimit node image with podman: a static binary (no cgo, so no
# libc) built here, copied into an image FROM scratch by ./Containerfile.
# Nothing is pulled.
#
#   scripts/image.sh [TAG]    default tag: ringlimit-node:<version>
#
# <version> is `git describe` (or "devel"); the binary carries it and the
# commit in `ringlimit-node version` and the ringlimit_build_info metric.
# Prints the image's reference on the last line. IMAGE_BUILDER picks the
# builder: podman (the default), buildah or docker.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(git describe --tags --always --dirty 2>/dev/null || echo devel)
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
tag=${1:-ringlimit-node:$version}
builder=${IMAGE_BUILDER:-podman}
case "$builder" in
# The OCI image format has no HEALTHCHECK: ask for Docker's.
podman | buildah) build=("$builder" build --format docker) ;;
docker) build=(docker build) ;;
*)
	echo "IMAGE_BUILDER=$builder: want podman, buildah or docker" >&2
	exit 2
	;;
esac

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
	-o "$ctx/ringlimit-node" ./cmd/node
"${build[@]}" -f Containerfile \
	--build-arg VERSION="$version" --build-arg COMMIT="$commit" \
	-t "$tag" "$ctx" >&2
echo "$tag"
