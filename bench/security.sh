#!/usr/bin/env bash
# The cost of TLS and token authentication, measured side by side in one run,
# on two set-ups each started twice, one plaintext and one secured:
#   standalone: `meridian standalone` against `meridian standalone --secure`;
#   pair:       `meridian dev --regions a,b --insecure` against `meridian dev
#               --regions a,b` (TLS on every listener and link, tokens), with
#               public/default replicated to a and b, published to in a; one
#               cluster at a time, started again for every round.
# Each pair of systems runs under the same `meridian perf produce` loads of
# 1 KiB messages, ROUNDS times, plain and secure alternating (and which goes
# first alternating from round to round, after a sync) so that drift and
# write-back hit both alike: as fast as possible with perf's default window (1000
# unacknowledged messages), as fast as possible with a window of 4000 (enough
# to saturate the machine's CPU), and 10 000 msg/s.
# Usage: bench/security.sh [ROUNDS] (default 3). Environment: BENCH_SETUPS
# ("standalone pair" by default), BENCH_SECONDS (15). Prints one line per
# measurement: setup, mode, load, perf's JSON summary.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
setups=${BENCH_SETUPS:-standalone pair}
secs=${BENCH_SECONDS:-15}
bin=$(mktemp -d)/meridian
go build -o "$bin" ./cmd/meridian
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

# wait_admin URL FLAGS...: polls until the broker answers an admin call.
wait_admin() {
  local url=$1; shift
  for _ in $(seq 1 360); do
    if "$bin" admin --url "$url" "$@" tenants list >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "broker $url not ready" >&2
  return 1
}

# drained URL TOPIC FLAGS...: waits until the topic's replicators have no
# backlog, so that the next measurement does not share the CPU with the
# previous one's replication (5 minutes at most).
drained() {
  local url=$1 topic=$2; shift 2
  for _ in $(seq 1 600); do
    if "$bin" admin --url "$url" "$@" topics stats "$topic" --output json 2>/dev/null |
      python3 -c 'import json,sys; r=json.load(sys.stdin).get("replicators") or []; sys.exit(0 if r and all(int(x.get("backlog_entries") or x.get("backlogEntries") or 0)==0 for x in r) else 1)'; then
      return 0
    fi
    sleep 0.5
  done
  echo "replication of $topic did not drain" >&2
}

# run_one SETUP MODE URL LOAD ROUND FLAGS...: one measurement, on a fresh
# topic, after a sync; in the pair, waits for its replication to drain.
run_one() {
  local setup=$1 mode=$2 url=$3 load=$4 round=$5; shift 5
  local extra=()
  case $load in
    max) ;;
    max4000) extra=(--max-pending 4000) ;;
    *) extra=(--rate "$load") ;;
  esac
  local topic=public/default/sec-bench-$mode-$load-$round
  # The previous measurement's writes are still being written back:
  # flush them, or they slow this one's fsyncs.
  sync
  sleep 2
  printf '%s %s %s ' "$setup" "$mode" "$load"
  "$bin" perf produce --url "$url" "$@" --topic "$topic" --size 1024 --duration "${secs}s" "${extra[@]}" --output json 2>/dev/null
  [ "$setup" = pair ] && drained "$url" "$topic" "$@"
  return 0
}

# measure SETUP PLAIN_URL SECURE_URL SECURE_FLAGS...: the rounds on two
# systems running side by side.
measure() {
  local setup=$1 plain=$2 secure=$3; shift 3
  local round load
  for round in $(seq 1 "$rounds"); do
    for load in max max4000 10000; do
      # Which goes first alternates from round to round.
      if ((round % 2)); then
        run_one "$setup" plain "$plain" "$load" "$round"
        run_one "$setup" secure "$secure" "$load" "$round" "$@"
      else
        run_one "$setup" secure "$secure" "$load" "$round" "$@"
        run_one "$setup" plain "$plain" "$load" "$round"
      fi
    done
  done
}

for setup in $setups; do
  case $setup in
    standalone)
      "$bin" standalone --data-dir "$work/plain" --grpc 127.0.0.1:16650 --http 127.0.0.1:18080 >"$work/plain.log" 2>&1 &
      pids+=($!)
      "$bin" standalone --secure --data-dir "$work/secure" --grpc 127.0.0.1:26650 --http 127.0.0.1:28080 >"$work/secure.log" 2>&1 &
      pids+=($!)
      sec=(--tls-ca "$work/secure/security/ca.pem" --token-file "$work/secure/security/admin.token")
      wait_admin 127.0.0.1:16650
      wait_admin 127.0.0.1:26650 "${sec[@]}"
      measure standalone 127.0.0.1:16650 127.0.0.1:26650 "${sec[@]}"
      ;;
    pair)
      # One cluster at a time (20 processes each on this machine's cores),
      # started again for every round, plain and secure in alternating
      # order: a second cluster idling beside the measured one skewed
      # the figures (docs/BENCHMARKS.md).
      for round in $(seq 1 "$rounds"); do
        modes=(plain secure)
        ((round % 2)) || modes=(secure plain)
        for mode in "${modes[@]}"; do
          d=$work/dev-$mode
          flags=()
          [ "$mode" = plain ] && flags=(--insecure)
          "$bin" dev --regions a,b --brokers 1 --data-dir "$d" "${flags[@]}" >"$d.log" 2>&1 &
          devpid=$!
          for _ in $(seq 1 360); do [ -s "$d/cluster.json" ] && break; sleep 0.5; done
          [ -s "$d/cluster.json" ] || { echo "dev-$mode did not start" >&2; tail -20 "$d.log" >&2; kill $devpid; exit 1; }
          url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["regions"][0]["grpc"])' "$d/cluster.json")
          sec=()
          [ "$mode" = secure ] && sec=(--tls-ca "$d/security/ca.pem" --token-file "$d/security/admin.token")
          "$bin" admin --url "$url" "${sec[@]}" namespaces set-policies public/default --replication-regions a,b >/dev/null
          for load in max max4000 10000; do
            run_one pair "$mode" "$url" "$load" "$round" "${sec[@]}"
          done
          kill -INT $devpid
          wait $devpid || true
        done
      done
      ;;
    *) echo "unknown setup $setup" >&2; exit 2 ;;
  esac
  stop_all
done
