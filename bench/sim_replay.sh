#!/usr/bin/env bash
# sim_replay.sh BUILD_DIR - the replay speed of docs/simulator.md: all of
# philly.csv.gz (111,549 jobs) under the default policy at --load 0.9, RUNS
# times (3), wall time of each run, the fastest and the slowest, and whether
# every run printed the same --json.
#
# BUILD_DIR should be a release build without sanitizers, as `make bench`
# makes it (meson setup build-bench --buildtype=release -Db_ndebug=true
# -Db_lto=true). PGO=1 also builds and times a profile-guided one in
# BUILD_DIR-pgo, trained on two shorter replays (docs/simulator.md), the runs
# of both builds interleaved: this VM's speed drifts over the hours, and runs
# side by side are what compare.
#
# Environment: TRACES (../shared/traces), RUNS (3), PGO (0).
set -euo pipefail
build=${1:?usage: bench/sim_replay.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
traces=${TRACES:-$here/../../shared/traces}
runs=${RUNS:-3}
trace=$traces/philly.csv.gz
[ -x "$build/gpuorch" ] || { echo "sim_replay.sh: $build/gpuorch is not built" >&2; exit 2; }
[ -r "$trace" ] || { echo "sim_replay.sh: $trace not found (set TRACES)" >&2; exit 2; }
if grep -q -- '-fsanitize' "$build/build.ninja" 2>/dev/null; then
  echo "sim_replay.sh: warning: $build is built with sanitizers; timings are not representative" >&2
fi

builds=("$build")
if [ "${PGO:-0}" = 1 ]; then
  pgo=$build-pgo
  src=$(cd "$here/.." && pwd)
  if [ ! -d "$pgo" ]; then
    meson setup "$pgo" "$src" --buildtype=release -Db_ndebug=true -Db_lto=true \
      -Db_pgo=generate >/dev/null
  else
    meson configure "$pgo" -Db_pgo=generate >/dev/null
  fi
  ninja -C "$pgo" gpuorch >/dev/null
  find "$pgo" -name '*.gcda' -delete
  "$pgo/gpuorch" sim --trace "$trace" --load 0.9 --until 5000000 --json >/dev/null
  "$pgo/gpuorch" sim --trace "$traces/philly_vc.csv.gz" --load 0.9 --json \
    --policy default,fifo-backfill >/dev/null
  meson configure "$pgo" -Db_pgo=use >/dev/null
  ninja -C "$pgo" gpuorch >/dev/null
  builds+=("$pgo")
fi

echo "== machine"
echo "nproc: $(nproc)"
echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo
echo "== philly.csv.gz, default policy, --load 0.9 ($runs runs per build, interleaved)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$runs"); do
  for b in "${builds[@]}"; do
    name=$(basename "$b")
    start=$(date +%s%N)
    "$b/gpuorch" sim --trace "$trace" --load 0.9 --json >"$tmp/$name.$r.json"
    end=$(date +%s%N)
    ms=$(((end - start) / 1000000))
    echo "$name $ms" >>"$tmp/times"
    awk -v n="$name" -v r="$r" -v ms="$ms" 'BEGIN {printf "%s run %d: %.1f s\n", n, r, ms / 1000}'
  done
done
echo
for b in "${builds[@]}"; do
  name=$(basename "$b")
  awk -v n="$name" '$1 == n {t[++k] = $2} END {
      lo = hi = t[1]; for (i = 2; i <= k; i++) { if (t[i] < lo) lo = t[i]; if (t[i] > hi) hi = t[i] }
      printf "%s: fastest %.1f s, slowest %.1f s (goal < 30 s)\n", n, lo / 1000, hi / 1000 }' "$tmp/times"
done
if [ "$(md5sum "$tmp"/*.json | awk '{print $1}' | sort -u | wc -l)" = 1 ]; then
  echo "every run printed the same --json"
else
  echo "sim_replay.sh: the runs printed different --json" >&2
  exit 1
fi
