#!/usr/bin/env bash
# dashboard_load.sh BUILD_DIR - the dashboard's first load, in headless Chromium.
#
# Starts a release controller (fresh data directory under $TMPDIR, an
# ephemeral port on 127.0.0.1) and fills it through the API: NODES nodes
# (default 16) of 8 GPUs registered with the join token, each with one
# heartbeat of GPU samples, and JOBS jobs (default 300; the first ones get
# GPUs, the others wait). Then bench/dashboard_load.mjs loads / LOADS times
# (default 5) in Debian's /usr/bin/chromium through playwright-core, each in a
# fresh browser context (no cache; the token preset in sessionStorage, as after
# a sign-in), and prints each time from navigation start to the page's
# "loaded" mark (DOMContentLoaded, every API answer in, the first data
# painted) and their median; then the same for the page of job 1 (/jobs/1).
# Goal: each under 1 s on loopback.
# Stops the server by PID. Usage: bench/dashboard_load.sh build-bench
set -euo pipefail
build=${1:?usage: bench/dashboard_load.sh BUILD_DIR}
bin=$build/gpuorch
here=$(cd "$(dirname "$0")" && pwd)
nodes=${NODES:-16}
jobs=${JOBS:-300}
[ -x "$bin" ] || { echo "dashboard_load.sh: $bin is missing: build $build first" >&2; exit 2; }
[ -x /usr/bin/chromium ] || { echo "dashboard_load.sh: no /usr/bin/chromium (scripts/setup.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"; wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"$bin" server --data "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  [ -s "$tmp/port" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; exit 1; }
  sleep 0.05
done
port=$(cat "$tmp/port")
url=http://127.0.0.1:$port
token=$(cat "$tmp/data/admin.token")
join=$(cat "$tmp/data/join.token")
api() { # METHOD PATH BODY TOKEN
  curl -sf -o /dev/null -X "$1" -H "Authorization: Bearer $4" -d "$3" "$url$2"
}
api PUT /v1/pools/main '{}' "$token"
api PUT /v1/teams/research '{"quotas": [{"pool": "main", "guaranteed": 64, "borrow_limit": 64}]}' "$token"
api PUT /v1/teams/product '{"quotas": [{"pool": "main", "guaranteed": 64, "borrow_limit": 0}]}' "$token"
for n in $(seq 1 "$nodes"); do
  gpus= samples=
  for g in $(seq 0 7); do
    uuid=$(printf 'GPU-%08x-0000-4000-8000-%012x' "$n" "$g")
    gpus+="${gpus:+,}{\"index\": $g, \"uuid\": \"$uuid\", \"gpu_type\": \"H100-80GB\", \"mem_mib\": 81559}"
    samples+="${samples:+,}{\"index\": $g, \"uuid\": \"$uuid\", \"utilization_pct\": $(((n * 7 + g * 13) % 100)),"
    samples+=" \"memory_used_mib\": 20480, \"memory_total_mib\": 81559, \"power_mw\": 300000,"
    samples+=" \"temperature_c\": 55, \"processes\": []}"
  done
  name=$(printf 'gpu-%03d' "$n")
  api PUT "/v1/nodes/$name" "{\"pool\": \"main\", \"cpus\": 128, \"mem_mib\": 1048576, \"gpus\": [$gpus]}" "$join"
  api POST "/v1/nodes/$name/heartbeat" "{\"gpus\": [$samples]}" "$join"
done
for j in $(seq 1 "$jobs"); do
  team=research; [ $((j % 3)) = 0 ] && team=product
  api POST /v1/jobs "{\"name\": \"job-$j\", \"team\": \"$team\", \"gpus\": $((1 + j % 4)), \"command\": [\"sleep\", \"600\"], \"project\": \"p$((j % 5))\"}" "$token"
done
echo "# gpuorch server ($build), $nodes nodes x 8 GPUs, $jobs jobs; Chromium $(/usr/bin/chromium --version 2>/dev/null | awk '{print $2}')"
# The overview, and the page of job 1 (it got GPUs: attempts, per-GPU charts;
# its log is asked of an agent that is not there, which the page says).
node "$here/dashboard_load.mjs" "$url" "$token" "${LOADS:-5}" / /jobs/1
