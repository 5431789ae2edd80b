# shellcheck shell=bash disable=SC2034 # $data and $failed are the sourcing script's
# sim_tap.sh - what the `gpuorch sim` command tests share (sourced, with the
# script's arguments GPUORCH DATA_DIR): $bin, $data, a scratch $tmp removed
# at exit, and TAP lines: ok, not_ok NAME [DETAIL], check NAME COMMAND...,
# expect NAME RC PATTERN SIM-ARGS... (the exit code, and PATTERN in stderr).
# The script ends with: echo "1..$n"; exit $failed.
set -uo pipefail
bin=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=1; echo "not ok $n - $1"; [ $# -gt 1 ] && echo "$2" | sed 's/^/#   /'; }
check() { # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then ok "$name"; else not_ok "$name"; fi
}
expect() { # expect NAME RC PATTERN ARGS...
  local name=$1 want=$2 pat=$3; shift 3
  "$bin" sim "$@" >"$tmp/o" 2>"$tmp/e"
  local rc=$?
  if [ $rc -eq "$want" ] && grep -q -- "$pat" "$tmp/e"; then ok "$name"; else
    not_ok "$name" "rc=$rc (want $want); stderr: $(cat "$tmp/e")"; fi
}
echo "TAP version 13"
