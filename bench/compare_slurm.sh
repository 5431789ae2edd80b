#!/usr/bin/env bash
# compare_slurm.sh BUILD_DIR - job submissions per second, Slurm against gpuorch,
# in one run on this machine (the controller issue's comparison).
#
# 1. Slurm 22.05 from Debian, as ../shared/baselines/slurm/ sets it up (its
#    setup.sh install must have run, as root): its bench.sh tests A and A4,
#    NJOBS one-GPU `sbatch --wrap 'sleep 0'` from one loop and from 4 loops.
# 2. gpuorch server (release build in BUILD_DIR) on a fresh data directory,
#    the same NJOBS one-GPU jobs: from one and from 4 loops of `curl` (a
#    process per submission, as sbatch is), then from bench/loadgen on 1 and 4
#    keep-alive connections.
# Slurm acknowledges a job before its state is on disk (it saves state
# asynchronously); gpuorch only once the job is committed (synchronous=FULL).
# Run as root. NJOBS defaults to 500.
set -euo pipefail
build=${1:?usage: bench/compare_slurm.sh BUILD_DIR}
njobs=${NJOBS:-500}
here=$(cd "$(dirname "$0")" && pwd)
slurm_dir=${SLURM_BASELINE:-$here/../../shared/baselines/slurm}
[ -x "$build/gpuorch" ] && [ -x "$build/bench/loadgen" ] ||
  { echo "compare_slurm.sh: build $build first (gpuorch, bench/loadgen)" >&2; exit 2; }
[ -x "$slurm_dir/bench.sh" ] || { echo "compare_slurm.sh: no $slurm_dir/bench.sh" >&2; exit 2; }
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "# 1. Slurm: $njobs x sbatch -G 1 --wrap 'sleep 0' (bench.sh tests A, A4)"
(cd "$slurm_dir" && RESULTS_DIR="$tmp/slurm" REPS=1 NJOBS=$njobs TESTS="A A4" ./bench.sh default) \
  >"$tmp/slurm.log" 2>&1 || { tail -20 "$tmp/slurm.log" >&2; exit 1; }
grep -h "submit_jobs_per_s" "$tmp"/slurm/*.raw | sed 's/^/slurm /'

echo "# 2. gpuorch server: $njobs one-GPU jobs per row"
"$build/gpuorch" server --data "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$tmp/port" ] && break; sleep 0.05; done
url="http://127.0.0.1:$(cat "$tmp/port")/v1"
token=$(cat "$tmp/data/admin.token")
curl -sf -X PUT -H "Authorization: Bearer $token" -d '{}' "$url/teams/bench" >/dev/null
body='{"team": "bench", "gpus": 1, "command": ["sleep", "0"]}'
curl_loop() { # curl_loop COUNT
  for ((i = 0; i < $1; i++)); do
    curl -sf -o /dev/null -H "Authorization: Bearer $token" -d "$body" "$url/jobs"
  done
}
for par in 1 4; do
  t0=$(date +%s.%N)
  loops=()
  for ((p = 0; p < par; p++)); do
    curl_loop $((njobs / par)) &
    loops+=($!)
  done
  wait "${loops[@]}" # not the server
  t1=$(date +%s.%N)
  python3 -c 'import sys; print("gpuorch curl x%s submit_jobs_per_s %.1f" % (sys.argv[1], float(sys.argv[2]) / (float(sys.argv[4]) - float(sys.argv[3]))))' "$par" "$njobs" "$t0" "$t1"
done
echo "$body" >"$tmp/job.json"
for c in 1 4; do
  "$build/bench/loadgen" --url "$url/jobs" --token "$token" --body "$tmp/job.json" \
    --connections $c --requests "$njobs" --expect 201 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print("gpuorch loadgen x%s submit_jobs_per_s %.1f p50_ms %.2f p99_ms %.2f" % (sys.argv[1], r["ok_per_s"], r["latency_ms"]["p50"], r["latency_ms"]["p99"]))' "$c"
done
