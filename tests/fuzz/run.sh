#!/usr/bin/env bash
# run.sh [SECONDS [TARGET...]] - fuzzes what gpuorch reads from others with
# libFuzzer, SECONDS (60) per target (every target, or those named), two at
# a time:
#   fuzz_sim_spec.c   any bytes as a cluster spec;
#   fuzz_sim_trace.c  any bytes as a trace CSV, small ones replayed;
#   fuzz_sim_reqtrace.c any bytes as a request trace CSV, small ones replayed
#                     through the serving engine under each policy;
#   fuzz_sim_policy.c any bytes as a policy file, what is written reading back;
#   fuzz_sim_serve_spec.c any bytes as a serving replay's service spec;
#   fuzz_jobspec.c    any bytes as the body of POST /v1/jobs (and Slurm's
#                     array syntax), what the API shows decoding back;
#   fuzz_cluster.c    any bytes as a pool, class, team, user, node, price or
#                     service, what the API shows decoding back;
#   fuzz_proto.c      any bytes as a controller-agent message, what is
#                     encoded decoding back;
#   fuzz_api.c        any bytes as the body of a controller route (submit,
#                     register, heartbeat, report, users, tokens, teams,
#                     pools, classes, prices), what is accepted holding what
#                     the docs promise;
#   fuzz_privsrv_check.c any bytes as a request to the agent's privileged
#                     process, through its checks;
#   fuzz_router_http1.c any bytes as a client's requests to the router or a
#                     replica's answer, split into reads; what is forwarded
#                     or passed on parsing back.
# Not part of `make test` (its runs are random; `make test` runs each target
# once over its seeds, through replay.c); a developer's check after changing
# one of those readers or the engine. Needs clang (scripts/setup.sh
# installs it). Builds the libraries with clang, ASan, UBSan and fuzzer
# coverage in build-fuzz (warnings not fatal: clang warns where gcc does
# not), seeds from tests/sim, sim/ and tests/fuzz/seeds plus the corpora of
# tests/fuzz/corpus, and writes any crash input to build-fuzz/fuzz/.
# Undefined behaviour is a crash too. Each target's figures at the end of
# its run (exec/s, libFuzzer's cov: and ft:, the corpus) go to
# build-fuzz/fuzz/figures.md, one table row each (docs/fuzzing.md).
# FUZZ_UPDATE=1: each grown corpus, minimised with -merge=1 -use_counters=0
# (every edge kept, not every hit-count bucket: a small corpus), replaces
# tests/fuzz/corpus/NAME (what `make test` replays).
# Exit 0: no crash; 1: a crash; 2: no clang, or the build failed.
set -euo pipefail
secs=${1:-60}
shift || true
all="sim_spec sim_trace sim_reqtrace sim_policy sim_serve_spec jobspec cluster proto api privsrv_check
  router_http1"
targets=${*:-$all}
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
  $(lib gpu) $(lib http) $(lib router)"
# shellcheck disable=SC2086
if ! log=$(ninja -C "$build" $libs 2>&1); then
  echo "$log" >&2
  echo "run.sh: the fuzz build failed" >&2
  exit 2
fi
out=$build/fuzz
rm -rf "$out"
for t in $all; do mkdir -p "$out/corpus_$t"; done
cp "$root"/sim/*.yaml "$root"/tests/sim/*.yaml "$out/corpus_sim_spec/"
for f in "$root"/tests/sim/*.csv; do
  { printf '\003'; cat "$f"; } >"$out/corpus_sim_trace/$(basename "$f")" # replay, skip_bad off
done
for f in "$root"/tests/sim/requests*.csv; do # replay under each policy, skip_bad off
  for p in 03 07 0b 0f 13 63 e7; do
    { printf "\x$p"; cat "$f"; } >"$out/corpus_sim_reqtrace/$p-$(basename "$f")"
  done
done
cp "$root"/tests/fuzz/seeds/policy/* "$out/corpus_sim_policy/"
cp "$root"/sim/azure_*.yaml "$root"/tests/sim/serve_*.yaml "$out/corpus_sim_serve_spec/"
cp "$root"/tests/fuzz/seeds/jobspec/* "$out/corpus_jobspec/"
cp "$root"/tests/fuzz/seeds/cluster/* "$out/corpus_cluster/" # first byte: the kind
cp "$root"/tests/fuzz/seeds/proto/* "$out/corpus_proto/"     # first byte: the message
cp "$root"/tests/fuzz/seeds/privsrv_check/* "$out/corpus_privsrv_check/"
cp "$root"/tests/fuzz/seeds/router_http1/* "$out/corpus_router_http1/" # first byte: side, read size
cp "$root"/tests/fuzz/seeds/api/* "$out/corpus_api/" # first byte: the route
for t in $all; do                                    # what earlier runs grew
  if [ -d "$root/tests/fuzz/corpus/$t" ]; then cp "$root/tests/fuzz/corpus/$t"/* "$out/corpus_$t/"; fi
done
# fuzz_api also starts from what the narrower targets were given and grew
# (jobspec, cluster, proto), each input re-addressed to the route that
# decodes it: fuzz_api.c's first byte.
python3 - "$out/corpus_api" "$root/tests/fuzz/seeds" "$root/tests/fuzz/corpus" <<'PY'
import os, sys
dst, roots = sys.argv[1], sys.argv[2:]
# A narrower target's first byte (its message or kind) -> fuzz_api's route.
routes = {"jobspec": None,  # the whole input is a body; route 0
          "cluster": {0: 6, 1: 7, 2: 5, 3: 4, 5: 8},  # pool, class, team, user, price
          "proto": {0: 1, 2: 2, 5: 3}}  # register, heartbeat, report
for root in roots:
    for name, table in routes.items():
        d = os.path.join(root, name)
        for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            data = open(os.path.join(d, f), "rb").read()
            if table is None:
                out = b"\0" + data
            elif data and not (name == "cluster" and data[0] & 0x80):  # not the stored form
                route = table.get((data[0] & 0x7f if name == "cluster" else data[0]) % 6)
                if route is None:
                    continue
                out = bytes([route]) + data[1:]
            else:
                continue
            with open(os.path.join(dst, f"{name}-{os.path.basename(root)}-{f}"), "wb") as o:
                o.write(out)
PY

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
build_target sim_reqtrace sim core util base
build_target sim_policy sim core util base
build_target sim_serve_spec sim cluster core util base
build_target jobspec cluster core util base
build_target cluster cluster core util base
build_target proto proto util base
build_target api proto cluster core util base
build_target privsrv_check agent proto gpu http util base -ldl
build_target router_http1 router base -lhttp_parser

run_target() { # run_target NAME: 0, or 1 on a crash
  local log=$out/fuzz_$1.log
  if (cd "$out" && nice "./fuzz_$1" -max_total_time="$secs" -max_len=4096 -timeout=10 \
    "corpus_$1" >"$log" 2>&1); then
    # The last status line: "#N DONE cov: C ft: F corp: K/S ... exec/s: E ..."
    local last execs cov ft corp
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    execs=$(sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p' <<<"$last")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
    mkdir -p "$out/merged_$1"
    (cd "$out" && "./fuzz_$1" -merge=1 -use_counters=0 -max_len=4096 "merged_$1" "corpus_$1" >"$out/merge_$1.log" 2>&1)
    local kept
    kept=$(find "$out/merged_$1" -type f | wc -l)
    echo "| fuzz_$1 | ${secs} s | $(grep -o 'Done [0-9]* runs' "$log" | tail -n 1 | tr -dc 0-9) | $execs | $cov | $ft | $corp | $kept |" \
      >"$out/row_$1"
    if [ "${FUZZ_UPDATE:-0}" = 1 ]; then
      rm -rf "$root/tests/fuzz/corpus/$1"
      mkdir -p "$root/tests/fuzz/corpus/$1"
      cp "$out/merged_$1"/* "$root/tests/fuzz/corpus/$1/"
    fi
    echo "fuzz_$1: $(grep -o 'Done [0-9]* runs' "$log" | tail -n 1), no crash; exec/s $execs, cov $cov, ft $ft, $kept inputs after merging"
  else
    echo "fuzz_$1: CRASH, see $log and $out/crash-*" >&2
    return 1
  fi
}
rc=0
# shellcheck disable=SC2086 # a list of names
set -- $targets
while [ $# -gt 0 ]; do
  run_target "$1" &
  a=$!
  if [ $# -gt 1 ]; then
    run_target "$2" || rc=1
    shift
  fi
  shift
  wait $a || rc=1
done
{
  echo "| target | time | runs | exec/s | cov | ft | corpus (inputs/bytes) | kept after -merge=1 |"
  echo "|---|---|---|---|---|---|---|---|"
  for t in $targets; do if [ -f "$out/row_$t" ]; then cat "$out/row_$t"; fi; done
} >"$out/figures.md"
cat "$out/figures.md"
exit $rc
