#!/usr/bin/env bash
# coverage.sh [TARGET...] - the line coverage that the checked-in seeds and
# corpora (tests/fuzz/seeds, tests/fuzz/corpus: what `make test` replays)
# give each boundary's decoder files, measured with clang's source-based
# coverage (llvm-profdata, llvm-cov) in build-cov. Prints one table row per
# target (docs/fuzzing.md): the files, their lines, and the share covered.
# Exit 2: no clang or llvm-cov, or the build failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-cov
for tool in clang llvm-profdata llvm-cov; do
  command -v "$tool" >/dev/null || { echo "coverage.sh: $tool not found" >&2; exit 2; }
done
flags='-fprofile-instr-generate -fcoverage-mapping'
if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" "$root" --buildtype=debug -Dwerror=false -Db_lundef=false \
    -Dc_args="$flags" -Dc_link_args="$flags" >/dev/null
fi
targets=${*:-"jobspec cluster proto api privsrv_check"}
# What the build runs of its own (generators) leaves its profile here, not in the tree.
export LLVM_PROFILE_FILE="$build/build-%p.profraw"
# shellcheck disable=SC2046 # a list of targets
ninja -C "$build" $(for t in $targets; do echo "tests/fuzz_replay_$t"; done) >/dev/null || exit 2
files_of() { # the decoder files of a boundary
  case $1 in
    jobspec) echo src/cluster/jobspec.c ;;
    cluster) echo src/cluster/cluster_json.c src/cluster/cluster_names.c ;;
    proto) (cd "$root" && echo src/proto/*.c) ;;
    api) echo src/proto/heartbeat.c src/proto/register.c src/proto/report.c \
      src/cluster/jobspec.c src/cluster/cluster_json.c src/util/text.c ;;
    privsrv_check) echo src/agent/privsrv_check.c ;;
  esac
}
prof=$build/profiles
rm -rf "$prof"
mkdir -p "$prof"
echo "| target | files | lines | lines covered |"
echo "|---|---|---|---|"
for t in $targets; do
  LLVM_PROFILE_FILE="$prof/$t-%p.profraw" meson test -C "$build" --no-rebuild "fuzz_$t" >/dev/null
  llvm-profdata merge -o "$prof/$t.profdata" "$prof/$t"-*.profraw
  # The summary of every file, then the boundary's files summed (a file
  # is matched by its path from the repository's root).
  llvm-cov export -summary-only -instr-profile="$prof/$t.profdata" \
    "$build/tests/fuzz_replay_$t" >"$prof/$t.json"
  # shellcheck disable=SC2046 # a list of files
  python3 - "$prof/$t.json" "fuzz_$t" $(files_of "$t") <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))["data"][0]["files"]
wanted = sys.argv[3:]
lines = covered = 0
for f in data:
    if any(f["filename"].endswith("/" + w) for w in wanted):
        lines += f["summary"]["lines"]["count"]
        covered += f["summary"]["lines"]["covered"]
names = " ".join(w.rsplit("/", 1)[-1] for w in wanted)
print(f"| {sys.argv[2]} | {names} | {lines} | {covered} ({100.0 * covered / max(lines, 1):.1f}%) |")
PY
done
