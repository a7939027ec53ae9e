#!/usr/bin/env bash
# Builds the ringlimit node image with podman: a static binary (no cgo, so no
# libc) built here, copied into an image FROM scratch by ./Containerfile.
# Nothing is pulled.
#
#   scripts/image.sh [REF]    build; REF defaults to the scheme below
#   scripts/image.sh --ref    print the default REF and build nothing
#
# The tag scheme: releases are tagged vX.Y.Z in git, and the image built from
# a release tag is ghcr.io/ringlimit/ringlimit-node:X.Y.Z (the git tag
# without its v), the reference the chart, the Kubernetes manifests and
# compose name. Any other commit is tagged with git describe's form, without
# the v: 0.1.0-3-gabc1234 (three commits after v0.1.0), with -dirty for a
# modified tree; outside a git checkout, "devel". IMAGE_REPOSITORY replaces
# ghcr.io/ringlimit/ringlimit-node.
#
# The binary carries the version (vX.Y.Z, or git describe's form) and the
# commit in `ringlimit-node version` and the ringlimit_build_info metric.
# Prints the image's reference on the last line. IMAGE_BUILDER picks the
# builder: podman (the default), buildah or docker.
set -euo pipefail
cd "$(dirname "$0")/.."

if version=$(git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null); then
	# --always gives the bare commit when there is no release tag yet.
	[[ $version == v* ]] || version=v0.0.0-g$version
else
	version=devel
fi
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
ref=${IMAGE_REPOSITORY:-ghcr.io/ringlimit/ringlimit-node}:${version#v}
if [ "${1:-}" = --ref ]; then
	echo "$ref"
	exit 0
fi
tag=${1:-$ref}
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
