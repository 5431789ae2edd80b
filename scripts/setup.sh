#!/usr/bin/env bash
# setup.sh - install what gpuorch needs to build, test and run on Debian 12.
#
#   scripts/setup.sh           install (as root) or, as another user, name what is missing
#   scripts/setup.sh --check   only check; exit 1 and name what is missing
#
# Idempotent: a second run changes nothing. The Makefile runs it before
# 'make run', 'make test' and 'make lint'.
#
# It also installs the npm packages that package-lock.json pins (uPlot, which
# the build inlines into the simulator's HTML report and the dashboard;
# playwright-core, which drives chromium in the dashboard's test) with 'npm ci', when
# node_modules is missing or older than the lock; npm comes from Debian when
# none is on the PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Debian packages, one per line: build, tests, benchmarks.
PACKAGES=(
  build-essential    # gcc, make, libc headers
  meson
  ninja-build
  pkg-config
  binutils           # nm: the core purity test
  patch              # bench/gittins_bound.sh (and a test that its patch applies)
  clang-format       # the formatting check
  clang-tidy         # make lint: clang-tidy 14 and its static analyzer
  cppcheck           # make lint
  clang              # tests/fuzz/run.sh: libFuzzer harnesses (a developer's check)
  libcmocka-dev      # unit tests
  valgrind           # bench: callgrind instruction counts
  util-linux         # taskset: pin benchmarks to one core
  zlib1g-dev         # sim: gzip traces
  libjansson-dev     # JSON: cluster specs, sim --json
  libyaml-dev        # YAML: cluster specs
  libsqlite3-dev     # the controller's store (SQLite, WAL)
  libpq-dev          # the controller's shared store: PostgreSQL through libpq (--store postgres://)
  postgresql         # tests/tools/pgserver.py: a throwaway PostgreSQL for the store's tests and bench/
  libsodium-dev      # API tokens: random bits, SHA-256, constant-time compare
  libmicrohttpd-dev  # the controller's HTTP server (built with GnuTLS: optional TLS)
  libcurl4-openssl-dev # HTTP client: agent -> controller, controller -> agent logs
  curl               # integration tests talk to the API as users do
  nftables           # partition test: packets dropped inside a host's network namespace
  python3            # integration tests (and meson itself)
  sqlite3            # inspecting the store in tests and by hand
  chromium           # the dashboard's browser test (headless, driven by playwright-core)
  prometheus         # metrics test: a real Prometheus scrapes GET /metrics; promtool checks it
  python3-torch      # steps test: torch.distributed (gloo, CPU) across a gang's tasks
  libevent-dev       # the router's event loop (plain edge-triggered events)
  libhttp-parser-dev # the router's HTTP/1.1 parser (Node's http-parser)
  nginx-light        # bench/router.sh: the reverse proxy the router is measured against
  wrk                # bench/router.sh: HTTP load
)

# Accounts, created idempotently: gpuorch, the one the agent's network half
# runs as once its privileged half is forked (`gpuorch agent --run-as`;
# docs/agent.md), and the ones tests run jobs as.
TEST_USERS=(gpuorch gpuorch-test1 gpuorch-test2)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
missing_users=()
for u in "${TEST_USERS[@]}"; do
  getent passwd "$u" >/dev/null || missing_users+=("$u")
done
# npm ci writes node_modules/.package-lock.json: older than the lock means stale.
npm_stale=0
if [ ! -f "$root/node_modules/uplot/package.json" ] ||
  [ ! -f "$root/node_modules/playwright-core/package.json" ] ||
  [ "$root/package-lock.json" -nt "$root/node_modules/.package-lock.json" ]; then
  npm_stale=1
fi
npm_ci() {
  echo "gpuorch setup: npm ci (node_modules from package-lock.json)"
  (cd "$root" && npm ci --no-audit --no-fund --no-update-notifier)
}

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_users[@]} -eq 0 ] && [ "$npm_stale" = 0 ]; then
  exit 0
fi

if [ "$check_only" = 1 ] || [ "$(id -u)" != 0 ]; then
  [ ${#missing[@]} -gt 0 ] && echo "gpuorch setup: missing Debian packages: ${missing[*]}" >&2 &&
    echo "  install them as root: apt-get install ${missing[*]}  (or run: sudo scripts/setup.sh)" >&2
  [ ${#missing_users[@]} -gt 0 ] && echo "gpuorch setup: missing accounts: ${missing_users[*]} (run scripts/setup.sh as root)" >&2
  # Missing accounts alone do not stop a build: only the tests that need them skip.
  [ ${#missing[@]} -gt 0 ] && exit 1
  if [ "$npm_stale" = 1 ]; then
    if [ "$check_only" = 1 ]; then
      echo "gpuorch setup: node_modules is missing or older than package-lock.json (run: scripts/setup.sh)" >&2
      exit 1
    fi
    npm_ci # as any user: it writes only in the repository
  fi
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
if [ "$npm_stale" = 1 ]; then
  npm_ci
fi
