#!/usr/bin/env bash
# setup.sh - install what gpuorch needs to build, test and run on Debian 12.
#
#   scripts/setup.sh           install (as root) or, as another user, name what is missing
#   scripts/setup.sh --check   only check; exit 1 and name what is missing
#
# Idempotent: a second run changes nothing. The Makefile runs it before
# 'make run' and 'make test'.
set -euo pipefail

# Debian packages, one per line: build, tests, benchmarks.
PACKAGES=(
  build-essential    # gcc, make, libc headers
  meson
  ninja-build
  pkg-config
  binutils           # nm: the core purity test
  clang-format       # the formatting check
  libcmocka-dev      # unit tests
  valgrind           # bench: callgrind instruction counts
  util-linux         # taskset: pin benchmarks to one core
)

# Accounts that tests run jobs as (later issues); created idempotently.
TEST_USERS=(gpuorch-test1 gpuorch-test2)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
missing_users=()
for u in "${TEST_USERS[@]}"; do
  getent passwd "$u" >/dev/null || missing_users+=("$u")
done

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_users[@]} -eq 0 ]; then
  exit 0
fi

if [ "$check_only" = 1 ] || [ "$(id -u)" != 0 ]; then
  [ ${#missing[@]} -gt 0 ] && echo "gpuorch setup: missing Debian packages: ${missing[*]}" >&2 &&
    echo "  install them as root: apt-get install ${missing[*]}  (or run: sudo scripts/setup.sh)" >&2
  [ ${#missing_users[@]} -gt 0 ] && echo "gpuorch setup: missing test accounts: ${missing_users[*]} (run scripts/setup.sh as root)" >&2
  # Missing test accounts alone do not stop a build: only the tests that need them skip.
  [ ${#missing[@]} -gt 0 ] && exit 1
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "gpuorch setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
for u in "${missing_users[@]}"; do
  useradd --system --no-create-home --shell /usr/sbin/nologin "$u"
done
