#!/usr/bin/env bash
# run_tests.sh BUILD_DIR - run every test under meson, then print one line:
#   "N passed, N failed"
# counting each TAP case (each cmocka test, each source check); a plain
# exit-code test counts as one. A test program that dies without reporting its
# cases counts as one failure.
set -uo pipefail
build=${1:-build-test}
meson test -C "$build" --print-errorlogs --num-processes "${TEST_JOBS:-2}" "${@:2}"
rc=$?
log="$build/meson-logs/testlog.json"
if [ ! -f "$log" ]; then
  echo "0 passed, 1 failed"
  exit 1
fi
# testlog.json: one JSON object per test program; its stdout holds the TAP lines.
read -r passed failed < <(awk '
  {
    line = $0
    result = ""
    if (match(line, /"result": "[A-Z]+"/)) result = substr(line, RSTART + 11, RLENGTH - 12)
    out = line
    sub(/.*"stdout": "/, "", out)
    n = split(out, rows, /\\n/)
    ok = 0; bad = 0
    for (i = 1; i <= n; i++) {
      if (rows[i] ~ /^ok [0-9]+/) ok++
      else if (rows[i] ~ /^not ok [0-9]+/) bad++
    }
    p += ok; f += bad
    if (result != "OK" && result != "SKIP" && bad == 0) f++
    if (result == "OK" && ok == 0 && bad == 0) p++   # a plain exit-code test
  }
  END { print p + 0, f + 0 }' "$log")
echo "$passed passed, $failed failed"
[ "$rc" = 0 ] && [ "$failed" = 0 ]
