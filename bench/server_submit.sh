#!/usr/bin/env bash
# server_submit.sh BUILD_DIR - durable submits per second against `gpuorch server`.
#
# Starts a release controller on core 0 with a fresh data directory (on the
# disk under $TMPDIR, default /tmp: say which disk that is beside the figure),
# then runs bench/loadgen pinned to core 1 at several concurrencies, each
# request with its own Idempotency-Key, and prints loadgen's report (rate,
# p50/p99 latency) with the fsync latency of that disk. Stops the server by
# PID. Usage: bench/server_submit.sh build-bench
#
# STORES="sqlite postgres" measures each store in turn in the same run:
# postgres is a PostgreSQL of the script's own (tests/tools/pgserver.py:
# initdb under $TMPDIR, fsync on, stopped by PID), the controller on it with
# --store (CONNECTIONS per store as above). Default: sqlite.
set -euo pipefail
build=${1:?usage: bench/server_submit.sh BUILD_DIR}
bin=$build/gpuorch
lg=$build/bench/loadgen
duration=${DURATION:-10}
conns=${CONNECTIONS:-"8 32 128"}
for f in "$bin" "$lg"; do
  [ -x "$f" ] || { echo "server_submit.sh: $f is missing: build $build first" >&2; exit 2; }
done
stores=${STORES:-sqlite}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
pid=
pg=
stop_server() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; wait "$pid" 2>/dev/null || true
  fi
  pid=
}
cleanup() {
  stop_server
  [ -n "$pg" ] && python3 "$root/tests/tools/pgserver.py" stop --dir "$pg" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
cat >"$tmp/job.json" <<'JSON'
{"name": "bench", "team": "bench", "command": ["/bin/true"], "gpus": 1, "time_limit_s": 600}
JSON
first=1
for store in $stores; do
  data=$tmp/data-$store
  args=(--data "$data")
  case $store in
    sqlite) ;;
    postgres)
      pg=$tmp/pg
      url=$(python3 "$root/tests/tools/pgserver.py" start --dir "$pg")
      args+=(--store "$url")
      ;;
    *) echo "server_submit.sh: STORES: unknown store $store (sqlite, postgres)" >&2; exit 2 ;;
  esac
  rm -f "$tmp/port"
  taskset -c 0 "$bin" server "${args[@]}" --listen 127.0.0.1:0 \
    --port-file "$tmp/port" >"$tmp/server-$store.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    [ -s "$tmp/port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/server-$store.log" >&2; exit 1; }
    sleep 0.05
  done
  port=$(cat "$tmp/port")
  token=$(cat "$data/admin.token")
  curl -sf -X PUT -H "Authorization: Bearer $token" -d '{}' \
    "http://127.0.0.1:$port/v1/teams/bench" >/dev/null
  echo "# store $store: gpuorch server on core 0, loadgen on core 1; data directory on $(df --output=source "$tmp" | tail -1) ($(stat -f -c %T "$tmp"))"
  if [ "$store" = postgres ]; then
    ver=$(PYTHONPATH="$root/tests/tools" python3 -c 'import pgserver; print(pgserver.bindir())')
    echo "# $("$ver/postgres" --version) on loopback, unpinned; fsync on, synchronous_commit on"
  fi
  for c in $conns; do
    probe=()
    [ "$first" = 1 ] && probe=(--fsync-probe "$tmp")
    first=0
    echo "## store $store, --connections $c, --duration $duration s"
    taskset -c 1 "$lg" --url "http://127.0.0.1:$port/v1/jobs" --token "$token" \
      --body "$tmp/job.json" --connections "$c" --duration "$duration" --idempotency \
      --expect 201 "${probe[@]}"
  done
  stop_server
done
