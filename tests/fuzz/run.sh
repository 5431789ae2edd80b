#!/usr/bin/env bash
# run.sh [SECONDS] - fuzzes the simulator's inputs with libFuzzer, SECONDS
# (60) per target, in parallel: cluster specs (fuzz_sim_spec.c) and trace
# CSVs, small ones replayed (fuzz_sim_trace.c). Not part of `make test`
# (its runs are random); a developer's check after changing the trace
# reader, the spec decoder or the engine. Needs clang (scripts/setup.sh
# installs it). Builds the libraries with clang, ASan, UBSan and fuzzer
# coverage in build-fuzz (warnings not fatal: clang warns where gcc does
# not), seeds from tests/sim and sim/, and writes any
# crash input to build-fuzz/fuzz/. Undefined behaviour is a crash too.
# Exit 0: no crash; 1: a crash; 2: no clang, or the build failed.
set -euo pipefail
secs=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-fuzz
command -v clang >/dev/null || { echo "run.sh: clang not found (scripts/setup.sh installs it)" >&2; exit 2; }
if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" "$root" --buildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false -Dwerror=false -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=all -O1' >/dev/null
fi
if ! log=$(ninja -C "$build" libgpuorch_sim.a libgpuorch_core.a libgpuorch_util.a 2>&1); then
  echo "$log" >&2
  echo "run.sh: the fuzz build failed" >&2
  exit 2
fi
out=$build/fuzz
mkdir -p "$out/corpus_spec" "$out/corpus_trace"
cp "$root"/sim/*.yaml "$root"/tests/sim/*.yaml "$out/corpus_spec/"
for f in "$root"/tests/sim/*.csv; do
  { printf '\003'; cat "$f"; } >"$out/corpus_trace/$(basename "$f")" # replay, skip_bad off
done
pids=()
for t in spec trace; do
  clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I"$root/src" "$root/tests/fuzz/fuzz_sim_$t.c" \
    "$build/libgpuorch_sim.a" "$build/libgpuorch_core.a" "$build/libgpuorch_util.a" \
    -ljansson -lyaml -lz -lm -o "$out/fuzz_sim_$t"
  (cd "$out" && ./fuzz_sim_$t -max_total_time="$secs" -max_len=4096 -timeout=10 \
    "corpus_$t" >"fuzz_sim_$t.log" 2>&1) &
  pids+=($!)
done
rc=0
for k in 0 1; do
  t=$([ $k = 0 ] && echo spec || echo trace)
  if wait "${pids[$k]}"; then
    echo "fuzz_sim_$t: $(grep -o 'Done [0-9]* runs' "$out/fuzz_sim_$t.log" | tail -n 1), no crash"
  else
    echo "fuzz_sim_$t: CRASH, see $out/fuzz_sim_$t.log and $out/crash-*" >&2
    rc=1
  fi
done
exit $rc
