#!/usr/bin/env bash
# check_core_purity_selftest.sh ROOT - the purity check must fail on a core that
# prints, reads the clock, or keeps a mutable global, and pass on a clean one.
set -uo pipefail
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src/core"
check="$root/tests/tools/check_core_purity.sh"
allow="$root/tests/tools/core_allowed_symbols.txt"
echo "TAP version 13"
echo "1..4"
n=0
expect() { # expect PASS|FAIL NAME SOURCE
  n=$((n + 1))
  rm -f "$tmp"/src/core/*.c
  printf '%s\n' "$3" > "$tmp/src/core/probe.c"
  if "$check" "$tmp" "$allow" >/dev/null 2>&1; then got=PASS; else got=FAIL; fi
  if [ "$got" = "$1" ]; then echo "ok $n - $2"; else echo "not ok $n - $2 (got $got)"; fi
}
expect PASS "a pure function passes" 'int probe_add(int a, int b); int probe_add(int a, int b) { return a + b; }'
expect FAIL "printf is caught" '#include <stdio.h>
void probe(void); void probe(void) { printf("x\n"); }'
expect FAIL "a clock read is caught" '#include <time.h>
long probe(void); long probe(void) { return (long)time(0); }'
expect FAIL "a mutable global is caught" 'int probe_counter; int probe(void); int probe(void) { return ++probe_counter; }'
