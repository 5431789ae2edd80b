#!/usr/bin/env bash
# run.sh BUILD_DIR [bench_sched options] - the scheduler benchmark, as
# docs/performance.md reports it:
#   1. bench_sched pinned to one core (taskset -c $BENCH_CPU, default 0),
#      every case, $BENCH_RUNS runs each (default 7): medians, min, max;
#   2. each timed case once under callgrind: instructions of the timed
#      sched_pass call only (client requests in bench_timed_pass; elsewhere
#      --toggle-collect), and the functions that take most of them.
# BUILD_DIR should be a release build without sanitizers, as `make bench`
# makes it (meson setup build-bench --buildtype=release -Db_ndebug=true -Db_lto=true).
# BENCH_CALLGRIND=0 skips step 2; the callgrind files stay in
# BUILD_DIR/bench/callgrind/ for callgrind_annotate.
set -euo pipefail

build=${1:-build-bench}
[ $# -gt 0 ] && shift
bench="$build/bench/bench_sched"
if [ ! -x "$bench" ]; then
  echo "run.sh: $bench is not built (ninja -C $build)" >&2
  exit 1
fi
runs=${BENCH_RUNS:-7}
cpu=${BENCH_CPU:-0}

echo "== machine"
echo "nproc: $(nproc)"
echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
if grep -q -- '-fsanitize' "$build/build.ninja" 2>/dev/null; then
  echo "run.sh: warning: $build is built with sanitizers; timings are not representative" >&2
fi

echo
echo "== timings (taskset -c $cpu, --runs $runs)"
pin=()
if command -v taskset >/dev/null; then
  pin=(taskset -c "$cpu")
else
  echo "run.sh: taskset not found: running unpinned" >&2
fi
"${pin[@]}" "$bench" --runs "$runs" "$@"

if [ "${BENCH_CALLGRIND:-1}" = 0 ]; then
  exit 0
fi
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "run.sh: valgrind not installed: no instruction counts" >&2
  exit 0
fi

echo
echo "== callgrind: instructions (Ir) of one timed sched_pass per case"
out="$build/bench/callgrind"
mkdir -p "$out"
if grep -q BENCH_HAVE_CALLGRIND "$build/build.ninja"; then
  # Instrumentation starts at the timed call: the set-up runs at valgrind's
  # uninstrumented speed, and only the sched_pass call is counted.
  cg=(--instr-atstart=no --collect-atstart=no)
else
  cg=(--toggle-collect='bench_timed_pass*')
fi
for c in full one-ends-first one-ends-settled; do
  file="$out/callgrind.$c.out"
  valgrind --tool=callgrind "${cg[@]}" --callgrind-out-file="$file" \
    "$bench" --case "$c" --runs 1 "$@" >"$out/$c.log" 2>&1
  total=$(callgrind_annotate "$file" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  decisions=$(awk '/_pass decisions=/ { sub(/.*decisions=/, ""); print $1; exit }' "$out/$c.log")
  per=""
  if [ -n "$decisions" ] && [ "$decisions" -gt 0 ]; then
    per=" Ir_per_decision=$((total / decisions))"
  fi
  echo "callgrind_Ir case=$c sched_pass=$total decisions=${decisions:-?}$per"
  # The eight functions with the most instructions of their own.
  callgrind_annotate "$file" 2>/dev/null |
    awk '/file:function/ { on = 1; getline; next } on && NF && n < 8 { print "  " $0; n++ }' |
    sed -E 's/ \[[^]]*\]$//; s/\?\?\?://; s/\.\/[^ ]*\/([A-Za-z0-9_.-]+):/\1:/'
done
echo "callgrind files: $out/callgrind.<case>.out (callgrind_annotate --inclusive=yes FILE)"
