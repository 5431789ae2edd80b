#!/usr/bin/env bash
# run.sh [SECONDS] - fuzzes what gpuorch reads from others with libFuzzer,
# SECONDS (60) per target, two at a time:
#   fuzz_sim_spec.c   any bytes as a cluster spec;
#   fuzz_sim_trace.c  any bytes as a trace CSV, small ones replayed;
#   fuzz_sim_policy.c any bytes as a policy file, what is written reading back;
#   fuzz_jobspec.c    any bytes as the body of POST /v1/jobs (and Slurm's
#                     array syntax), what the API shows decoding back;
#   fuzz_cluster.c    any bytes as a pool, class, team, user, node or price,
#                     what the API shows decoding back;
#   fuzz_proto.c      any bytes as a controller-agent message, what is
#                     encoded decoding back;
#   fuzz_privsrv_check.c any bytes as a request to the agent's privileged
#                     process, through its checks.
# Not part of `make test` (its runs are random; `make test` runs each target
# once over its seeds, through replay.c); a developer's check after changing
# one of those readers or the engine. Needs clang (scripts/setup.sh
# installs it). Builds the libraries with clang, ASan, UBSan and fuzzer
# coverage in build-fuzz (warnings not fatal: clang warns where gcc does
# not), seeds from tests/sim, sim/ and tests/fuzz/seeds, and writes any
# crash input to build-fuzz/fuzz/. Undefined behaviour is a crash too.
# Exit 0: no crash; 1: a crash; 2: no clang, or the build failed.
set -euo pipefail
secs=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-fuzz
command -v clang >/dev/null || { echo "run.sh: clang not found (scripts/setup.sh installs it)" >&2; exit 2; }
if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" "$root" --buildtype=debug -Db_sanitize=address,undefined \
    -Db_lundef=false -Dwerror=false \
    -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=all -O1' >/dev/null
fi
lib() { echo "src/$1/libgpuorch_$1.a"; } # a folder's library, relative to the build
libs="$(lib sim) $(lib cluster) $(lib core) $(lib util) $(lib base) $(lib proto) $(lib agent)
  $(lib gpu) $(lib http)"
# shellcheck disable=SC2086
if ! log=$(ninja -C "$build" $libs 2>&1); then
  echo "$log" >&2
  echo "run.sh: the fuzz build failed" >&2
  exit 2
fi
out=$build/fuzz
rm -rf "$out"
mkdir -p "$out/corpus_sim_spec" "$out/corpus_sim_trace" "$out/corpus_sim_policy" \
  "$out/corpus_jobspec" "$out/corpus_cluster" "$out/corpus_proto" "$out/corpus_privsrv_check"
cp "$root"/sim/*.yaml "$root"/tests/sim/*.yaml "$out/corpus_sim_spec/"
for f in "$root"/tests/sim/*.csv; do
  { printf '\003'; cat "$f"; } >"$out/corpus_sim_trace/$(basename "$f")" # replay, skip_bad off
done
cp "$root"/tests/fuzz/seeds/policy/* "$out/corpus_sim_policy/"
cp "$root"/tests/fuzz/seeds/jobspec/* "$out/corpus_jobspec/"
cp "$root"/tests/fuzz/seeds/cluster/* "$out/corpus_cluster/" # first byte: the kind
cp "$root"/tests/fuzz/seeds/proto/* "$out/corpus_proto/"     # first byte: the message
cp "$root"/tests/fuzz/seeds/privsrv_check/* "$out/corpus_privsrv_check/"

build_target() { # build_target NAME LIBS...
  local name=$1
  shift
  local paths=()
  for l in "$@"; do
    case $l in -*) paths+=("$l") ;; *) paths+=("$build/$(lib "$l")") ;; esac
  done
  clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -I"$root/src" \
    "$root/tests/fuzz/fuzz_$name.c" "${paths[@]}" -ljansson -lyaml -lz -lsqlite3 -lmicrohttpd -lsodium \
    -lcurl -lpthread -lm -o "$out/fuzz_$name"
}
build_target sim_spec sim core util base
build_target sim_trace sim core util base
build_target sim_policy sim core util base
build_target jobspec cluster core util base
build_target cluster cluster core util base
build_target proto proto util base
build_target privsrv_check agent proto gpu http util base -ldl

run_target() { # run_target NAME: 0, or 1 on a crash
  if (cd "$out" && "./fuzz_$1" -max_total_time="$secs" -max_len=4096 -timeout=10 \
    "corpus_$1" >"fuzz_$1.log" 2>&1); then
    echo "fuzz_$1: $(grep -o 'Done [0-9]* runs' "$out/fuzz_$1.log" | tail -n 1), no crash"
  else
    echo "fuzz_$1: CRASH, see $out/fuzz_$1.log and $out/crash-*" >&2
    return 1
  fi
}
rc=0
for pair in "sim_spec sim_trace" "jobspec cluster" "sim_policy proto" "privsrv_check"; do
  read -r x y <<<"$pair"
  run_target "$x" &
  a=$!
  if [ -n "${y:-}" ]; then
    run_target "$y" &
    wait $! || rc=1
  fi
  wait $a || rc=1
done
exit $rc
