#!/usr/bin/env bash
# cluster-vs-jetstream.sh: a Meridian region of separate processes (1 metadata
# node, 3 bookies, 2 brokers; namespace E3/Qw2/Qa2) against a 3-node NATS
# JetStream cluster (R3 file stream, once with sync_interval: always, once with
# the default), all on 127.0.0.1, one system running at a time.
#
# Each system is driven at equal message size and concurrency: `meridian perf
# produce` for Meridian, bench/jsbench (nats.go, asynchronous publish with
# acks, HDR histogram like perf) for JetStream. First as fast as possible,
# then at half of Meridian's max (JetStream at that same rate). Prints one
# table: throughput and ack latency p50/p99/p99.9.
#
# Builds meridian, jsbench and nats-server (the module's own nats-server
# version) into a temp dir; every process and the temp dir go on exit.
#
# Environment: BENCH_SECONDS (per measurement, default 12), BENCH_SIZE (1024),
# BENCH_PRODUCERS (2), BENCH_MAX_PENDING (1000 per producer),
# BENCH_JSON (if set: append the figures there as JSON lines: perf's fields, system, load
# (max or half, so that names stay the same from run to run) and rate).
set -euo pipefail

SECONDS_PER_RUN=${BENCH_SECONDS:-12}
SIZE=${BENCH_SIZE:-1024}
PRODUCERS=${BENCH_PRODUCERS:-2}
MAX_PENDING=${BENCH_MAX_PENDING:-1000}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/meridian-vs-js.XXXXXX")
PIDS=()

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "== $*" >&2; }

# stop_all stops every process started so far and forgets them.
stop_all() {
	local pid
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
	PIDS=()
}

# start NAME CMD...: runs CMD in the background, output in $TMP/NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$TMP/$name.log" 2>&1 &
	PIDS+=($!)
}

# wait_http URL NAME: polls URL until it answers 200 (90 s at most).
wait_http() {
	local deadline=$((SECONDS + 90))
	until curl -fsS -o /dev/null "$1" 2>/dev/null; do
		if ((SECONDS > deadline)); then
			echo "$2 not ready at $1 after 90 s; its log:" >&2
			tail -n 40 "$TMP/$2.log" >&2
			exit 1
		fi
		sleep 0.2
	done
}

# free_ports N: N distinct free TCP ports on 127.0.0.1.
free_ports() {
	python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

log "building meridian, jsbench and nats-server into $TMP/bin"
mkdir -p "$TMP/bin"
(cd "$ROOT" && go build -o "$TMP/bin/meridian" ./cmd/meridian &&
	go build -o "$TMP/bin/jsbench" ./bench/jsbench &&
	go build -o "$TMP/bin/nats-server" github.com/nats-io/nats-server/v2)
M="$TMP/bin/meridian"
NATS_VERSION=$("$TMP/bin/nats-server" --version)

# ---------------------------------------------------------------- Meridian
start_meridian() {
	local d="$TMP/meridian" p
	mkdir -p "$d"
	read -r -a p <<<"$(free_ports 17)"
	local raft=127.0.0.1:${p[0]} mgrpc=127.0.0.1:${p[1]} mhttp=127.0.0.1:${p[2]}
	cat >"$d/meta.yaml" <<YAML
node_id: 1
raft_address: $raft
grpc_address: $mgrpc
http_address: $mhttp
data_dir: $d/meta
shards:
  - {name: global, shard_id: 1, members: {1: $raft}}
  - {name: local, shard_id: 2, members: {1: $raft}}
YAML
	start meta "$M" meta --config "$d/meta.yaml"
	wait_http "http://$mhttp/readyz" meta
	local i
	for i in 1 2 3; do
		local bg=127.0.0.1:${p[$((1 + 2 * i))]} bh=127.0.0.1:${p[$((2 + 2 * i))]}
		cat >"$d/bookie-$i.yaml" <<YAML
id: bookie-$i
region: local
rack: rack-a
listen_addr: $bg
http_addr: $bh
journal_dir: $d/bookie-$i/journal
ledger_dir: $d/bookie-$i/ledgers
metadata:
  endpoints: [$mgrpc]
YAML
		start "bookie-$i" "$M" bookie --config "$d/bookie-$i.yaml"
		eval "BOOKIE_HTTP_$i=$bh"
	done
	for i in 1 2 3; do
		local v="BOOKIE_HTTP_$i"
		wait_http "http://${!v}/readyz" "bookie-$i"
	done
	BROKERS=()
	for i in 1 2; do
		local rg=127.0.0.1:${p[$((7 + 2 * i))]} rh=127.0.0.1:${p[$((8 + 2 * i))]}
		cat >"$d/broker-$i.yaml" <<YAML
broker:
  broker_id: broker-$i
  region: local
  grpc_address: $rg
  http_address: $rh
  default_ensemble_size: 3
  default_write_quorum: 2
  default_ack_quorum: 2
metadata:
  endpoints: [$mgrpc]
YAML
		start "broker-$i" "$M" broker --config "$d/broker-$i.yaml"
		wait_http "http://$rh/readyz" "broker-$i"
		BROKERS+=("$rg")
	done
	BROKER=${BROKERS[0]}
	"$M" admin --url "$BROKER" tenants create bench >/dev/null
	"$M" admin --url "$BROKER" namespaces create bench/r3 >/dev/null
	"$M" admin --url "$BROKER" namespaces set-policies bench/r3 --ensemble 3 --write-quorum 2 --ack-quorum 2 >/dev/null
}

# meridian_perf TOPIC RATE: one perf produce run; its JSON summary on stdout.
meridian_perf() {
	"$M" perf produce --url "$BROKER" --topic "bench/r3/$1" --size "$SIZE" --producers "$PRODUCERS" \
		--max-pending "$MAX_PENDING" --rate "$2" --duration "${SECONDS_PER_RUN}s" --output json 2>"$TMP/perf-$1.log" | tail -n 1
}

# --------------------------------------------------------------- JetStream
# start_jetstream MODE: a 3-node cluster; MODE "always" sets sync_interval: always.
start_jetstream() {
	local mode=$1 d="$TMP/js-$1" p i j
	mkdir -p "$d"
	read -r -a p <<<"$(free_ports 9)"
	JS_URLS=""
	for i in 0 1 2; do
		local routes=""
		for j in 0 1 2; do
			[[ $j == "$i" ]] || routes+="nats-route://127.0.0.1:${p[$((3 + j))]}, "
		done
		local sync=""
		[[ $mode == always ]] && sync="sync_interval: always"
		cat >"$d/n$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:${p[$i]}
http: 127.0.0.1:${p[$((6 + i))]}
jetstream {
  store_dir: "$d/n$i"
  $sync
}
cluster {
  name: bench
  listen: 127.0.0.1:${p[$((3 + i))]}
  routes: [${routes%, }]
}
CONF
		start "js-$mode-n$i" "$TMP/bin/nats-server" -c "$d/n$i.conf"
		JS_URLS+="nats://127.0.0.1:${p[$i]},"
	done
	JS_URLS=${JS_URLS%,}
	for i in 0 1 2; do
		wait_http "http://127.0.0.1:${p[$((6 + i))]}/healthz?js-enabled-only=true" "js-$mode-n$i"
	done
	# The meta leader must be elected before a stream can be created.
	local deadline=$((SECONDS + 60))
	until curl -fsS "http://127.0.0.1:${p[6]}/healthz" >/dev/null 2>&1; do
		((SECONDS < deadline)) || { echo "JetStream cluster ($mode) not healthy" >&2; exit 1; }
		sleep 0.5
	done
	# Check that every node runs with the sync mode asked for.
	for i in 0 1 2; do
		local got
		got=$(curl -fsS "http://127.0.0.1:${p[$((6 + i))]}/jsz" |
			python3 -c 'import json,sys; print(bool(json.load(sys.stdin)["config"].get("sync_always")))')
		if [[ $got != "$([[ $mode == always ]] && echo True || echo False)" ]]; then
			echo "JetStream node n$i: sync_always=$got, want mode $mode" >&2
			exit 1
		fi
	done
}

# js_perf STREAM RATE: one jsbench run (R3 file stream, created anew).
js_perf() {
	"$TMP/bin/jsbench" --url "$JS_URLS" --stream "$1" --subject "bench.$1" --replicas 3 --size "$SIZE" \
		--producers "$PRODUCERS" --max-pending "$MAX_PENDING" --rate "$2" --duration "${SECONDS_PER_RUN}s" \
		--output json 2>"$TMP/jsbench-$1.log" | tail -n 1
}

# ------------------------------------------------------------------- runs
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

RESULTS=()
# result SYSTEM LOAD JSON
result() {
	if [[ -z $3 ]]; then
		echo "no summary from $1 at $2" >&2
		exit 1
	fi
	RESULTS+=("$1|$2|$3")
	log "$1 at $2: $3 (load: $(cut -d' ' -f1-3 /proc/loadavg))"
}

log "Meridian region: 1 meta, 3 bookies, 2 brokers, namespace bench/r3 E3/Qw2/Qa2"
start_meridian
result "meridian E3/Qw2/Qa2" max "$(meridian_perf max 0)"
MAX=$(field "${RESULTS[0]##*|}" msgs_per_sec)
HALF=$(python3 -c "print(int(float('$MAX') / 2))")
result "meridian E3/Qw2/Qa2" "$HALF/s" "$(meridian_perf half "$HALF")"
stop_all

for mode in always default; do
	log "JetStream cluster: 3 nodes, R3 file stream, sync_interval: $mode"
	start_jetstream "$mode"
	name="jetstream R3 sync=$mode"
	result "$name" max "$(js_perf "MAX_$mode" 0)"
	result "$name" "$HALF/s" "$(js_perf "HALF_$mode" "$HALF")"
	stop_all
done

echo
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -m), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $NATS_VERSION"
echo "${SIZE} B messages, $PRODUCERS producers x $MAX_PENDING in flight, ${SECONDS_PER_RUN} s per run; latency = publish to ack"
echo
printf '| %-26s | %-9s | %12s | %8s | %8s | %8s | %6s |\n' system load msgs/s "p50 ms" "p99 ms" "p99.9 ms" errors
printf '|%s|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..28})" "$(printf -- '-%.0s' {1..11})" "$(printf -- '-%.0s' {1..14})" \
	"$(printf -- '-%.0s' {1..10})" "$(printf -- '-%.0s' {1..10})" "$(printf -- '-%.0s' {1..10})" "$(printf -- '-%.0s' {1..8})"
for r in "${RESULTS[@]}"; do
	IFS='|' read -r sys load js <<<"$r"
	printf '| %-26s | %-9s | %12.0f | %8.2f | %8.2f | %8.2f | %6s |\n' "$sys" "$load" \
		"$(field "$js" msgs_per_sec)" "$(field "$js" p50_ms)" "$(field "$js" p99_ms)" "$(field "$js" p999_ms)" "$(field "$js" errors)"
	if [[ -n ${BENCH_JSON:-} ]]; then
		python3 -c 'import json,sys; d=json.loads(sys.argv[3]); d["system"]=sys.argv[1]; d["load"]="max" if sys.argv[2]=="max" else "half"; d["rate"]=sys.argv[2]; print(json.dumps(d))' \
			"$sys" "$load" "$js" >>"$BENCH_JSON"
	fi
done
