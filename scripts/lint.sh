#!/usr/bin/env bash
# lint.sh [PATH...] - clang-tidy (.clang-tidy) and cppcheck over the C sources of
# src/, or of the folders and files of src/ named; prints each finding once and
# exits 1 if there is any. `make lint` runs it (LINT_DIRS="src/core src/util"
# narrows it there).
#
#   BUILD       the meson build directory whose compile_commands.json clang-tidy
#               reads (default build; configured here when missing)
#   LINT_JOBS   parallel clang-tidy processes (default: the number of CPUs)
#   CLANG_TIDY, CPPCHECK   the programs (default clang-tidy, cppcheck: Debian's
#               clang-tidy 14 and cppcheck 2.10, which scripts/setup.sh installs)
#
# A header is checked with the sources that include it, and reported only when
# it lies under one of the paths given. cppcheck's suppressions, each with its
# reason, are in tools/lint/cppcheck-suppressions.txt; tools/lint/jansson.cfg
# tells it what jansson's iteration macros expand to.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
build=${BUILD:-build}
jobs=${LINT_JOBS:-$(nproc 2>/dev/null || echo 2)}
clang_tidy=${CLANG_TIDY:-clang-tidy}
cppcheck=${CPPCHECK:-cppcheck}

for tool in "$clang_tidy" "$cppcheck"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "lint: $tool is missing (scripts/setup.sh installs it)" >&2
    exit 2
  fi
done

paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(src)
header_re=""
for p in "${paths[@]}"; do
  p=${p%/}
  case "$p" in
  src | src/*) ;;
  *)
    echo "lint: $p is not under src/" >&2
    exit 2
    ;;
  esac
  if [ ! -e "$p" ]; then
    echo "lint: $p does not exist" >&2
    exit 2
  fi
  if [ -d "$p" ]; then
    # The same regular expression serves both tools: a path at a line's start
    # (cppcheck) or after a slash (clang-tidy's absolute or ../ paths).
    header_re="$header_re|$(printf '%s' "$p" | sed 's/[.[\*^$+?(){}|]/\\&/g')/"
  else
    header_re="$header_re|$(printf '%s' "$p" | sed 's/[.[\*^$+?(){}|]/\\&/g')(\$|:)"
  fi
done
header_re="(^|/)(${header_re#|})"
mapfile -t files < <(git ls-files -- "${paths[@]}" | grep -E '^src/.*\.c$' | sort)
if [ ${#files[@]} -eq 0 ]; then
  echo "lint: no C sources under ${paths[*]}" >&2
  exit 2
fi

if [ ! -f "$build/compile_commands.json" ]; then
  echo "lint: configuring $build (meson writes its compile_commands.json)"
  meson setup "$build" --buildtype=debugoptimized >/dev/null || exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

# clang-tidy, one process per source; each writes its findings and exit status.
export clang_tidy build header_re tmp
# shellcheck disable=SC2016 # the worker's variables expand in its own shell
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} bash -c '
  f=$1
  out=$tmp/tidy.$(printf "%s" "$f" | tr / _)
  "$clang_tidy" -p "$build" --quiet --header-filter="$header_re" "$f" >"$out.txt" 2>"$out.err"
  echo $? >"$out.rc"
  printf "%s\n" "$f" >"$out.name"' _ {}

# One block per finding: its line and the notes and source lines under it,
# paths relative to the repository; a header's finding, seen from every source
# that includes it, is printed once.
cat "$tmp"/tidy.*.txt |
  sed -E "s#^([^ :]*/)?(\.\./)+src/#src/#; s#^$root/##; s#,-warnings-as-errors\]#]#" |
  awk -v out="$tmp/tidy.count" '
    /^[^ :]+:[0-9]+:[0-9]+: (warning|error): / {
      key = $0
      show = !(key in seen)
      seen[key] = 1
      if (show) n++
    }
    show { print }
    END { print n + 0 > out }'
tidy_findings=$(cat "$tmp/tidy.count")
tidy_failed=0
for rc in "$tmp"/tidy.*.rc; do
  [ "$(cat "$rc")" = 0 ] && continue
  # Findings make the status 1 too (WarningsAsErrors); a run without any is a
  # clang-tidy that could not check the file.
  txt=${rc%.rc}.txt
  if ! grep -qE '^[^ :]+:[0-9]+:[0-9]+: (warning|error): ' "$txt"; then
    echo "lint: clang-tidy failed on $(cat "${rc%.rc}.name"):"
    sed 's/^/  /' "${rc%.rc}.err"
    tidy_failed=$((tidy_failed + 1))
  fi
done
tidy_s=$(($(date +%s) - start))

# cppcheck: its own include search (src/ only: system headers are described by
# its libraries, which is quicker and more exact than parsing them); the
# compiler's configuration, not the stand-ins headers give clang's analyzer.
start=$(date +%s)
"$cppcheck" --quiet -j "$jobs" --std=c11 --platform=unix64 -I src -U__clang_analyzer__ \
  --library=posix --library=gnu --library=libcurl --library=sqlite3 --library=zlib \
  --library=tools/lint/jansson.cfg \
  --enable=warning,performance,portability,style --inline-suppr \
  --suppressions-list=tools/lint/cppcheck-suppressions.txt \
  --template='{file}:{line}:{column}: {severity}: {message} [{id}]' \
  "${files[@]}" 2>"$tmp/cppcheck.txt" >/dev/null
cpp_rc=$?
grep -E "$header_re" "$tmp/cppcheck.txt" | sort -u >"$tmp/cppcheck.mine"
cat "$tmp/cppcheck.mine"
cpp_findings=$(wc -l <"$tmp/cppcheck.mine")
if [ "$cpp_rc" != 0 ] && [ "$cpp_findings" = 0 ] && [ ! -s "$tmp/cppcheck.txt" ]; then
  echo "lint: cppcheck failed (status $cpp_rc)"
  tidy_failed=$((tidy_failed + 1))
fi
cpp_s=$(($(date +%s) - start))

echo "lint: ${#files[@]} sources under ${paths[*]}: clang-tidy $tidy_findings finding(s) (${tidy_s}s)," \
  "cppcheck $cpp_findings finding(s) (${cpp_s}s)"
[ "$tidy_findings" = 0 ] && [ "$cpp_findings" = 0 ] && [ "$tidy_failed" = 0 ]
