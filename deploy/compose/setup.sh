#!/usr/bin/env bash
# Makes, once, the files deploy/compose/compose.yaml mounts, in DIR (default
# deploy/compose/secrets): a development CA and a certificate per node
# (certs/, by cmd/devcerts), a gossip key (gossip.keys) and an admin token
# (admin.tokens, "compose:<token>"). Files already there are kept.
#
#   deploy/compose/setup.sh [DIR]
#
# The files are made readable by the image's user (65532), the CA's key
# excepted, which no node mounts: they are for a trial on one machine. In
# production give each node its own key, readable by it alone (the
# Kubernetes manifests mount them from Secrets).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/deploy/compose/secrets}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/" ./cmd/devcerts ./cmd/node)
"$bin/devcerts" -dir "$out/certs" -nodes node-1,node-2,node-3 -ip "" >/dev/null
[ -s "$out/gossip.keys" ] || "$bin/node" --new-gossip-key >"$out/gossip.keys"
[ -s "$out/admin.tokens" ] || echo "compose:$("$bin/node" --new-gossip-key)" >"$out/admin.tokens"
chmod -R a+rX "$out"
chmod 600 "$out/certs/ca-key.pem"
echo "secrets in $out; admin token: TOKEN=\$(cut -d: -f2 $out/admin.tokens)"
