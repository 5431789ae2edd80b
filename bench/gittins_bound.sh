#!/usr/bin/env bash
# gittins_bound.sh [SIM_ARGS...] - how near the srtf oracle a policy that is
# not told durations could come on a trace (docs/simulator.md, "Why LAS stays
# far from SRTF here").
#
# gpuorch has no such policy, and should not: the "gittins" preset that
# bench/gittins_bound.patch adds to the simulator ranks each job by its
# Gittins index, computed from the distribution of durations of its team and
# size class over the whole replay, its own duration included. That is more
# than any scheduler knows, so it measures what the trace's information
# allows, not a policy to run. The script builds the committed HEAD with the
# patch in a temporary directory (release, no LTO), and replays the trace
# under srtf, las, las with thresholds 16, 160 and 1,600 GPU-hours that may
# evict larger jobs (a policy file) and the patch's gittins; it prints each
# one's average JCT and how far above srtf it is.
#
# SIM_ARGS default to Helios' setup at the calibrated load:
#   --trace $TRACES/philly_vc.csv.gz --cluster sim/helios_philly_vc.yaml
#   --from 2294959 --until 7565359 --load 0.55
# Environment: TRACES (../shared/traces). Takes about 4 minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
traces=${TRACES:-$src/../shared/traces}
if [ $# -eq 0 ]; then
  set -- --trace "$traces/philly_vc.csv.gz" --cluster "$src/sim/helios_philly_vc.yaml" \
    --from 2294959 --until 7565359 --load 0.55
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$src" archive --prefix=src/ HEAD | tar -x -C "$tmp" -f -
ln -s "$src/node_modules" "$tmp/src/node_modules"
patch -s -t -N -p1 -d "$tmp/src" <"$here/gittins_bound.patch"
meson setup "$tmp/build" "$tmp/src" --buildtype=release -Db_ndebug=true >/dev/null
ninja -C "$tmp/build" gpuorch >/dev/null
gpuorch=$tmp/build/gpuorch

"$gpuorch" policy las | sed 's/^name: .*/name: las-16h-el/;
    s/^las_thresholds_gpu_s: .*/las_thresholds_gpu_s: [57600, 576000, 5760000]/;
    s/^las_evict_larger: .*/las_evict_larger: true/' >"$tmp/las-16h-el.yaml"

echo "== gpuorch sim $*"
for p in srtf las "$tmp/las-16h-el.yaml" gittins; do
  "$gpuorch" sim "$@" --policy "$p" --json >"$tmp/out.json"
  name=$(sed -n 's/^ *"policy": "\(.*\)",$/\1/p' "$tmp/out.json")
  jct=$(sed -n 's/^ *"jct_avg_s": \(.*\),$/\1/p' "$tmp/out.json")
  util=$(sed -n 's/^ *"gpu_utilization": \(.*\),$/\1/p' "$tmp/out.json")
  [ "$p" = srtf ] && srtf=$jct
  awk -v n="$name" -v j="$jct" -v u="$util" -v s="$srtf" \
    'BEGIN { printf "%-12s avg JCT %10.1f s  %+6.1f %% vs srtf  utilization %s\n", n, j, 100 * (j / s - 1), u }'
done
