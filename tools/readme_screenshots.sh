#!/usr/bin/env bash
# readme_screenshots.sh BUILD_DIR [OUT_DIR] - the README's and docs/dashboard.md's
# screenshots, taken from `make run`'s cluster as the README's tour leaves it.
#
# Starts scripts/run.sh BUILD_DIR (its fake GPUs, deploy/starter.yaml) in a
# temporary run directory on 127.0.0.1:$PORT (default 18080; its router on
# PORT+1), submits the tour's jobs (a 2-GPU training job that burns a core, the
# tour's `burn` and `nap`, a gang of two nodes, a job that fails and one that
# completes, a job that waits), waits until `nap` is flagged idle (make run's
# teams: 2 minutes under 5 %), then saves with headless Chromium
# (tools/readme_screenshots.mjs) OUT_DIR/dashboard.png (the overview),
# job.png (burn's page), node.png (gpu-a's page) and history.png. Stops the
# cluster by PID. OUT_DIR defaults to docs/img. Takes about three minutes.
set -euo pipefail
build=${1:?usage: tools/readme_screenshots.sh BUILD_DIR [OUT_DIR]}
out=${2:-docs/img}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
port=${PORT:-18080}
bin=$build/gpuorch
[ -x "$bin" ] || { echo "readme_screenshots.sh: $bin is missing: build $build first" >&2; exit 2; }
tmp=$(mktemp -d)
chmod 755 "$tmp"
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
GPUORCH_RUN_DIR=$tmp/run GPUORCH_PORT=$port GPUORCH_ROUTER_PORT=$((port + 1)) \
  "$root/scripts/run.sh" "$build" >"$tmp/run.log" 2>&1 &
pid=$!
export GPUORCH_SERVER=http://127.0.0.1:$port
for _ in $(seq 1 600); do
  [ -s "$tmp/run/data/admin.token" ] && "$bin" nodes >/dev/null 2>&1 &&
    [ "$("$bin" nodes 2>/dev/null | grep -c ' up ')" -ge 2 ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/run.log" >&2; exit 1; }
  sleep 0.2
done
export GPUORCH_TOKEN_FILE=$tmp/run/data/admin.token
sub() { "$bin" submit "$@" | awk '{print $NF}'; }
sub --team research --gpus 2 -J train-llm --project llm -- sh -c 'while :; do :; done' >/dev/null
burn=$(sub --team product --gpus 1 -J burn -- sh -c 'while :; do :; done')
sub --team product --gpus 1 -J nap -- sleep 900 >/dev/null
sub --team research --nodes 2 --gpus 2 -J gang-eval -- sh -c 'echo "rank $SLURM_PROCID of $SLURM_NTASKS"; sleep 900' >/dev/null
sub --team research --gpus 1 -J smoke-test -- sh -c 'echo checking; exit 3' >/dev/null
sub --team research --gpus 1 -J prep-data -- sh -c 'echo done' >/dev/null
sub --team research --gpus 8 -J big-pretrain -- sleep 900 >/dev/null
echo "readme_screenshots: jobs in; waiting for nap to be flagged idle (2 minutes)" >&2
for _ in $(seq 1 300); do
  "$bin" queue 2>/dev/null | grep -q 'IDLE' && break
  sleep 1
done
node "$here/readme_screenshots.mjs" "http://127.0.0.1:$port" "$(cat "$GPUORCH_TOKEN_FILE")" "$out" "$burn"
