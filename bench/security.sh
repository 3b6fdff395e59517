#!/usr/bin/env bash
# The cost of TLS and token authentication, measured side by side in one run:
# two standalones on this machine, one plaintext and one --secure, each in turn
# under the same `meridian perf produce` loads (as fast as possible, then 10 000
# msg/s of 1 KiB), ROUNDS times, alternating so drift hits both alike.
# Usage: bench/security.sh [ROUNDS] (default 3). Prints one JSON summary per run.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=$(mktemp -d)/meridian
go build -o "$bin" ./cmd/meridian
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$bin" standalone --data-dir "$work/plain" --grpc 127.0.0.1:16650 --http 127.0.0.1:18080 >"$work/plain.log" 2>&1 &
pids+=($!)
"$bin" standalone --secure --data-dir "$work/secure" --grpc 127.0.0.1:26650 --http 127.0.0.1:28080 >"$work/secure.log" 2>&1 &
pids+=($!)
sec=(--tls-ca "$work/secure/security/ca.pem" --token-file "$work/secure/security/admin.token")
for i in $(seq 1 120); do
  if "$bin" admin --url 127.0.0.1:16650 tenants list >/dev/null 2>&1 && "$bin" admin --url 127.0.0.1:26650 "${sec[@]}" tenants list >/dev/null 2>&1; then break; fi
  sleep 0.5
done
run() { # name url load... extra flags
  local name=$1 url=$2 load=$3; shift 3
  local rate=()
  [ "$load" != max ] && rate=(--rate "$load")
  printf '%s %s ' "$name" "$load"
  "$bin" perf produce --url "$url" "$@" --topic "public/default/sec-bench-$name" --size 1024 --duration 15s "${rate[@]}" --output json 2>/dev/null
}
for r in $(seq 1 "$rounds"); do
  for load in max 10000; do
    run plain 127.0.0.1:16650 "$load"
    run secure 127.0.0.1:26650 "$load" "${sec[@]}"
  done
done
