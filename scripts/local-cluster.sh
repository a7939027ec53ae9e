#!/usr/bin/env bash
# Runs a local ringlimit cluster on 127.0.0.1.
#
#   scripts/local-cluster.sh up [N]    build and start node-1..node-N (default 3; up to 100
#                                      with the default ports, see below)
#   scripts/local-cluster.sh env       the shell lines that put the ringlimit command on
#                                      PATH, aimed at node-1 with the admin token (and
#                                      export the variables below that are set):
#                                      eval "$(scripts/local-cluster.sh env)"
#   scripts/local-cluster.sh owner KEY the name of the node that owns KEY (GET /v1/owner)
#   scripts/local-cluster.sh status    members as each node sees them, ring shares (ringlimit status)
#   scripts/local-cluster.sh kill I    SIGKILL node I
#   scripts/local-cluster.sh stop I    SIGTERM node I (graceful: hands its buckets off)
#   scripts/local-cluster.sh start I   start node I again; it rejoins
#   scripts/local-cluster.sh rotate    new node certificates and a new gossip key, nodes running
#   scripts/local-cluster.sh down      stop every node, nothing left running
#
# Each node keeps its state file in RINGLIMIT_CLUSTER_DIR/node-I.data
# (--data-dir): a node started again, or the whole cluster brought up
# again after down, keeps what was spent (see "What a restart keeps" in
# the README).
#
# I is a node's number or its name: 2 and node-2 are the same node. up,
# start, stop and kill return once every running node is ready (/readyz)
# and all of them have the same ring, with exactly the running nodes on it.
#
# Node I listens on HTTP 8080+I, gRPC 9090+I, peer gRPC 9190+I and gossip
# 7946+I; override the bases with RINGLIMIT_HTTP_BASE, RINGLIMIT_GRPC_BASE,
# RINGLIMIT_PEER_BASE (default: the gRPC base + 100), RINGLIMIT_GOSSIP_BASE.
# up refuses a number of nodes whose port ranges would overlap (more than
# 100 with the default bases).
# Binaries (ringlimit-node; the ringlimit command in bin/), logs, audit
# logs and pids go to RINGLIMIT_CLUSTER_DIR (default
# ${TMPDIR:-/tmp}/ringlimit-cluster). Every node runs the policy file
# RINGLIMIT_POLICY (default examples/policy.yaml; empty for none) and
# appends its audit log to node-I.audit.log, and serves Envoy's rate limit
# service on its gRPC port with the envoyproxy/ratelimit configuration
# RINGLIMIT_RLS (a file or a directory; default examples/envoy/config;
# empty for none). `up` also makes, once, in that
# directory: a development CA and a certificate per node (certs/, by
# cmd/devcerts: nodes talk to each other over mutual TLS), a gossip key
# (gossip.keys: gossip is encrypted, and labelled with the cluster name
# "ringlimit-local") and an admin token (admin.tokens, as "local:<token>",
# for POST/DELETE /v1/overrides and pprof). Extra node flags can be given
# in RINGLIMIT_NODE_FLAGS; they come last, so they override the script's.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${RINGLIMIT_CLUSTER_DIR:-${TMPDIR:-/tmp}/ringlimit-cluster}
http_base=${RINGLIMIT_HTTP_BASE:-8080}
grpc_base=${RINGLIMIT_GRPC_BASE:-9090}
gossip_base=${RINGLIMIT_GOSSIP_BASE:-7946}
peer_base=${RINGLIMIT_PEER_BASE:-$((grpc_base + 100))}
certs=$dir/certs
policy=${RINGLIMIT_POLICY-examples/policy.yaml}
rls=${RINGLIMIT_RLS-examples/envoy/config}
cli=$dir/bin/ringlimit
mkdir -p "$dir"

count() { cat "$dir/count" 2>/dev/null || echo 0; }
pidof_node() { cat "$dir/node-$1.pid" 2>/dev/null || true; }
running() { local p; p=$(pidof_node "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
token() { cut -d: -f2 "$dir/admin.tokens" 2>/dev/null | head -1; }

# index prints the number of node I, given as 2 or node-2.
index() {
	local i=${1#node-}
	if ! [[ $i =~ ^[1-9][0-9]*$ ]]; then
		echo "not a node: $1 (give its number, 2, or its name, node-2)" >&2
		return 2
	fi
	echo "$i"
}

# check_ports refuses a cluster of $1 nodes whose port ranges (base+1 to
# base+N for HTTP, gRPC, peer and gossip) overlap each other or leave the
# port space: with the default bases that allows up to 100 nodes (the gRPC
# range then ends at 9190, where the peer range starts).
check_ports() {
	local n=$1 a b names=(HTTP gRPC peer gossip) bases=("$http_base" "$grpc_base" "$peer_base" "$gossip_base")
	if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
		echo "not a number of nodes: $n" >&2
		return 2
	fi
	for a in 0 1 2 3; do
		if [ $((bases[a] + n)) -gt 65535 ] || [ "${bases[a]}" -lt 0 ]; then
			echo "$n nodes: the ${names[a]} ports $((bases[a] + 1))-$((bases[a] + n)) are not all valid ports" >&2
			return 2
		fi
		for b in $(seq $((a + 1)) 3); do
			if [ "${bases[a]}" -lt $((bases[b] + n)) ] && [ "${bases[b]}" -lt $((bases[a] + n)) ]; then
				echo "$n nodes: the ${names[a]} ports $((bases[a] + 1))-$((bases[a] + n)) overlap the ${names[b]} ports $((bases[b] + 1))-$((bases[b] + n)); choose fewer nodes or other bases (RINGLIMIT_HTTP_BASE, RINGLIMIT_GRPC_BASE, RINGLIMIT_PEER_BASE, RINGLIMIT_GOSSIP_BASE)" >&2
				return 2
			fi
		done
	done
}

# settle waits until every running node answers /readyz and all of them
# have the same ring version with the running nodes, and only those, on it:
# for up to 30 s and 2 s more per node.
settle() {
	local n i v on want first ok deadline limit view auth
	n=$(count)
	limit=$((30 + 2 * n))
	deadline=$((SECONDS + limit))
	auth="Authorization: Bearer $(token)"
	while :; do
		want=0
		for i in $(seq 1 "$n"); do running "$i" && want=$((want + 1)); done
		ok=1 first=""
		for i in $(seq 1 "$n"); do
			running "$i" || continue
			if ! curl -fsS -o /dev/null "http://127.0.0.1:$((http_base + i))/readyz" 2>/dev/null; then
				ok=0
				break
			fi
			view=$(curl -fsS -H "$auth" "http://127.0.0.1:$((http_base + i))/v1/cluster" 2>/dev/null) || view=""
			v=$(sed -n 's/^{"self":"[^"]*","ring_version":\([0-9]*\),.*/\1/p' <<<"$view")
			on=$(grep -o '"on_ring":true' <<<"$view" | wc -l)
			if [ -z "$v" ] || [ "$on" -ne "$want" ] || { [ -n "$first" ] && [ "$v" != "$first" ]; }; then
				ok=0
				break
			fi
			first=$v
		done
		[ $ok = 1 ] && return 0
		if [ $SECONDS -ge $deadline ]; then
			echo "the running nodes did not agree on one ring within $limit s; see $dir/node-*.log" >&2
			return 1
		fi
		sleep 0.1
	done
}

# owner prints the name of the node that owns key $1, as the first running
# node's /v1/owner says.
owner() {
	local n i
	n=$(count)
	for i in $(seq 1 "$n"); do
		running "$i" || continue
		curl -fsS -G -H "Authorization: Bearer $(token)" --data-urlencode "key=$1" \
			"http://127.0.0.1:$((http_base + i))/v1/owner" | sed -n 's/.*"owner":"\([^"]*\)".*/\1/p'
		return
	done
	echo "no node is running" >&2
	return 1
}

start_node() {
	local i=$1 n seeds="" j
	n=$(count)
	if running "$i"; then
		echo "node-$i is already running (pid $(pidof_node "$i"))"
		return
	fi
	for j in $(seq 1 "$n"); do
		[ "$j" = "$i" ] && continue
		seeds+="${seeds:+,}127.0.0.1:$((gossip_base + j))"
	done
	[ -z "$seeds" ] && seeds="127.0.0.1:$((gossip_base + 1))"
	local policy_flags=()
	if [ -n "$policy" ]; then
		policy_flags=(--policy "$(realpath "$policy")" --audit-log "$dir/node-$i.audit.log")
	fi
	[ -n "$rls" ] && policy_flags+=(--rls-config "$(realpath "$rls")")
	mkdir -p "$dir/node-$i.data"
	# shellcheck disable=SC2086
	"$dir/ringlimit-node" --name "node-$i" "${policy_flags[@]}" --data-dir "$dir/node-$i.data" \
		--gossip-key-file "$dir/gossip.keys" --cluster-name ringlimit-local --admin-token-file "$dir/admin.tokens" \
		--tls-ca "$certs/ca.pem" --tls-cert "$certs/node-$i.pem" --tls-key "$certs/node-$i-key.pem" \
		--http "127.0.0.1:$((http_base + i))" --grpc "127.0.0.1:$((grpc_base + i))" --peer "127.0.0.1:$((peer_base + i))" \
		--gossip "127.0.0.1:$((gossip_base + i))" --join "$seeds" --trusted-proxies 127.0.0.1/32 ${RINGLIMIT_NODE_FLAGS:-} \
		>>"$dir/node-$i.log" 2>&1 &
	echo $! >"$dir/node-$i.pid"
	local deadline=$((SECONDS + 15))
	until curl -fsS "http://127.0.0.1:$((http_base + i))/healthz" >/dev/null 2>&1; do
		if ! running "$i" || [ $SECONDS -ge $deadline ]; then
			echo "node-$i did not start; see $dir/node-$i.log" >&2
			tail -5 "$dir/node-$i.log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "node-$i up: http 127.0.0.1:$((http_base + i)) grpc 127.0.0.1:$((grpc_base + i)) peer 127.0.0.1:$((peer_base + i)) gossip 127.0.0.1:$((gossip_base + i)) (pid $(pidof_node "$i"), log $dir/node-$i.log)"
}

stop_node() { # stop_node I SIGNAL
	local i=$1 sig=$2 p deadline
	p=$(pidof_node "$i")
	if [ -z "$p" ] || ! kill -0 "$p" 2>/dev/null; then
		echo "node-$i is not running"
		return
	fi
	kill "-$sig" "$p"
	deadline=$((SECONDS + 20))
	while kill -0 "$p" 2>/dev/null; do
		if [ $SECONDS -ge $deadline ]; then
			echo "node-$i did not exit after SIG$sig; killing it" >&2
			kill -KILL "$p" 2>/dev/null || true
		fi
		sleep 0.1
	done
	rm -f "$dir/node-$i.pid"
	echo "node-$i stopped (SIG$sig)"
}

# status shows each running node's view of the cluster with the ringlimit
# command (built by up; built here if missing).
status() {
	local n i first=1 tok=()
	n=$(count)
	[ -x "$cli" ] || go build -o "$cli" ./cmd/ringlimit
	[ -s "$dir/admin.tokens" ] && tok=(--token-file "$dir/admin.tokens")
	for i in $(seq 1 "$n"); do
		[ $first = 1 ] || echo
		first=0
		if ! running "$i"; then
			echo "node-$i: not running"
			continue
		fi
		"$cli" --addr "http://127.0.0.1:$((http_base + i))" "${tok[@]}" --timeout 3s status || true
	done
}

# nodes lists node-1..node-N, comma-separated.
nodes() { seq -f "node-%g" -s, 1 "$1"; }

# secrets makes the CA, the node certificates, the gossip key and the admin
# token once, readable by the owner only.
secrets() {
	umask 077
	"$dir/ringlimit-devcerts" -dir "$certs" -nodes "$(nodes "$1")" >/dev/null
	[ -s "$dir/gossip.keys" ] || "$dir/ringlimit-node" --new-gossip-key >"$dir/gossip.keys"
	[ -s "$dir/admin.tokens" ] || echo "local:$("$dir/ringlimit-node" --new-gossip-key)" >"$dir/admin.tokens"
	echo "admin token: ${dir}/admin.tokens (TOKEN=\$(cut -d: -f2 ${dir}/admin.tokens))"
}

# rotate gives every node a new certificate (same CA) and the cluster a new
# gossip key, with the nodes running: the nodes re-read their files every
# 2 s, so each step waits 3 s. The new key is first added (every node
# decrypts with it), then used (every node encrypts with it), then the old
# one is removed.
rotate() {
	local n old new
	n=$(count)
	umask 077
	"$dir/ringlimit-devcerts" -dir "$certs" -nodes "$(nodes "$n")" -renew
	old=$(head -1 "$dir/gossip.keys")
	new=$("$dir/ringlimit-node" --new-gossip-key)
	printf '%s\n%s\n' "$old" "$new" >"$dir/gossip.keys.tmp" && mv "$dir/gossip.keys.tmp" "$dir/gossip.keys"
	sleep 3
	printf '%s\n%s\n' "$new" "$old" >"$dir/gossip.keys.tmp" && mv "$dir/gossip.keys.tmp" "$dir/gossip.keys"
	sleep 3
	printf '%s\n' "$new" >"$dir/gossip.keys.tmp" && mv "$dir/gossip.keys.tmp" "$dir/gossip.keys"
	sleep 3
	echo "rotated: new node certificates in $certs, gossip key $dir/gossip.keys"
}

cmd=${1:-}
case "$cmd" in
up)
	n=${2:-3}
	check_ports "$n"
	ldflags="-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo devel) -X main.commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
	go build -ldflags "$ldflags" -o "$dir/ringlimit-node" ./cmd/node
	go build -ldflags "$ldflags" -o "$cli" ./cmd/ringlimit
	go build -o "$dir/ringlimit-devcerts" ./cmd/devcerts
	secrets "$n"
	echo "$n" >"$dir/count"
	for i in $(seq 1 "$n"); do start_node "$i"; done
	settle
	echo "logs and pids in $dir"
	echo "the ringlimit command, aimed at node-1: eval \"\$($0 env)\""
	;;
env)
	echo "export PATH=\"$dir/bin:\$PATH\""
	echo "export RINGLIMIT_ADDR=http://127.0.0.1:$((http_base + 1))"
	echo "export RINGLIMIT_TOKEN=$(token)"
	# The script's own variables, when set, so that its next commands in
	# that shell reach this cluster.
	for v in RINGLIMIT_CLUSTER_DIR RINGLIMIT_HTTP_BASE RINGLIMIT_GRPC_BASE RINGLIMIT_PEER_BASE RINGLIMIT_GOSSIP_BASE; do
		if [ -n "${!v:-}" ]; then echo "export $v=${!v}"; fi
	done
	;;
owner) owner "${2:?key}" ;;
status) status ;;
kill | stop | start)
	i=$(index "${2:?node number or name}")
	case "$cmd" in
	kill) stop_node "$i" KILL ;;
	stop) stop_node "$i" TERM ;;
	start) start_node "$i" ;;
	esac
	settle
	;;
rotate) rotate ;;
down)
	for f in "$dir"/node-*.pid; do
		[ -e "$f" ] || continue
		i=${f##*/node-}
		stop_node "${i%.pid}" TERM
	done
	;;
*)
	awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
	exit 2
	;;
esac
