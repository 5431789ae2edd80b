#!/usr/bin/env bash
# check_core_purity.sh SRC_ROOT ALLOWLIST - src/core must stay a pure library.
#
# Builds every src/core/*.c without sanitizers (as a release build would;
# -fno-pic so that const tables of pointers land in .rodata, not .data.rel.ro),
# then checks with nm that:
#   1. every symbol the core needs from outside itself is on the allow-list
#      (memory, string and math calls: no I/O, clock, thread, process or
#      environment symbol can slip in);
#   2. no object defines a mutable global or static (nm types B b D d C G g S s).
# Prints TAP.
set -uo pipefail
root=$1
allow=$2
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "TAP version 13"
echo "1..3"
fail=0
objs=()
for src in "$root"/src/core/*.c; do
  obj="$tmp/$(basename "${src%.c}").o"
  if ! $cc -std=gnu11 -O2 -fno-pic -Wall -Wextra -Werror -I"$root/src" -c "$src" -o "$obj" 2>"$tmp/cc.err"; then
    cat "$tmp/cc.err" | sed 's/^/# /'
    fail=1
  fi
  objs+=("$obj")
done
if [ "$fail" = 0 ]; then echo "ok 1 - core compiles without sanitizers"; else echo "not ok 1 - core compiles without sanitizers"; fi

defined=$(nm --defined-only "${objs[@]}" 2>/dev/null | awk 'NF==3 {print $3}' | sort -u)
undefined=$(nm -u "${objs[@]}" 2>/dev/null | awk 'NF==2 && $1=="U" {print $2}' | sort -u)
allowed=$(grep -v '^#' "$allow" | awk 'NF {print $1}' | sort -u)
external=$(comm -23 <(echo "$undefined") <(echo "$defined"))
bad=$(comm -23 <(echo "$external") <(echo "$allowed"))
if [ -z "$bad" ]; then
  echo "ok 2 - core references only allowed libc symbols ($(echo "$external" | wc -w) used)"
else
  echo "not ok 2 - core references symbols outside the allow-list"
  echo "$bad" | sed 's/^/#   /'
fi

globals=$(nm "${objs[@]}" 2>/dev/null | awk 'NF==3 && $2 ~ /^[BbDdCGgSs]$/ {print $3 " (" $2 ")"}')
if [ -z "$globals" ]; then
  echo "ok 3 - core defines no mutable global or static data"
else
  echo "not ok 3 - core defines mutable data"
  echo "$globals" | sed 's/^/#   /'
fi
[ -z "$bad" ] && [ -z "$globals" ] && [ "$fail" = 0 ]
