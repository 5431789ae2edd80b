#!/usr/bin/env bash
# mig_static_search.sh - the best static MIG layout for a trace, by average JCT.
#
#   bench/mig_static_search.sh GPUORCH TRACE [gpuorch sim --mig flags...]
#
# Replays every named layout of the GPU type on every GPU, and every mix of
# full GPUs (all-7g) on the first N GPUs of the cluster (N a multiple of
# STEP, default 4: half a node) with another layout (named or counts) on the
# rest, then prints them sorted by unschedulable pods, then average JCT (schedulable
# pods only; the unschedulable count is beside it). The extra flags (--nodes,
# --gpu-type, --compress, ...) go to every run; GPUS (default 32) is the
# cluster's GPUs they make. Layout names are H100-80GB's
# and A100-80GB's: pass LAYOUTS="..." and FULL=7g.xxx for another type.
set -euo pipefail
gpuorch=$1 trace=$2
shift 2
full=${FULL:-all-7g.80gb}
layouts=${LAYOUTS:-"all-1g.10gb all-1g.20gb all-2g.20gb all-3g.40gb all-4g.40gb all-balanced
  3g.40gb=1+1g.10gb=3 3g.40gb=1+1g.20gb=2 3g.40gb=1+2g.20gb=1+1g.10gb=1 2g.20gb=2+1g.10gb=3
  3g.40gb=1+1g.20gb=1+1g.10gb=2"}
{
  "$gpuorch" sim --trace "$trace" "$@" --mig "static:$full"
  for l in $layouts; do # one run per layout: at most 128 modes a run
    modes=(--mig "static:$l")
    for ((n = ${STEP:-4}; n < ${GPUS:-32}; n += ${STEP:-4})); do
      modes+=(--mig "static:$full@$n,$l")
    done
    "$gpuorch" sim --trace "$trace" "$@" "${modes[@]}" | tail -n +3
  done
} | awk 'NR <= 2 { print; next } { print | "sort -k3,3n -k4,4n" }'
