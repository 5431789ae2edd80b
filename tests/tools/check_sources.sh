#!/usr/bin/env bash
# check_sources.sh ROOT - every C source includes util/banned.h after its other
# headers, and src/core includes no header that brings I/O. Prints TAP.
set -uo pipefail
root=$1
cd "$root"
echo "TAP version 13"
echo "1..2"
bad=""
for f in $(git ls-files 'src/*.c' 2>/dev/null || find src -name '*.c'); do
  last=$(grep -n '^#include' "$f" | tail -n 1 | cut -d: -f2-)
  if [ "$last" != '#include "util/banned.h"' ]; then
    bad="$bad $f"
  fi
done
if [ -z "$bad" ]; then echo "ok 1 - every source includes util/banned.h last"; else
  echo "not ok 1 - sources without util/banned.h as their last include:$bad"; fi
io=$(grep -n -E '#include <(stdio|unistd|fcntl|time|pthread|signal|sys/[a-z_]+|dirent|dlfcn|threads)\.h>' src/core/*.c src/core/*.h 2>/dev/null)
if [ -z "$io" ]; then echo "ok 2 - src/core includes no I/O, clock or thread header"; else
  echo "not ok 2 - src/core includes I/O headers"; echo "$io" | sed 's/^/#   /'; fi
[ -z "$bad" ] && [ -z "$io" ]
