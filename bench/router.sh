#!/usr/bin/env bash
# router.sh BUILD_DIR - what the router adds to a request, against calling the
# upstream directly and against nginx from Debian, in one run
# (docs/performance.md, "Serving").
#
# The upstream is nginx itself, its own instance with one worker, answering
# `return 200 "ok"` on every path. Three ways to reach it:
#   direct  the generator calls the upstream;
#   nginx   nginx as a reverse proxy (a config written here: THREADS workers,
#           an upstream block with keepalive, proxy_http_version 1.1,
#           Connection "", no access log);
#   router  `gpuorch router --threads THREADS` with the route /s/bench/ learned
#           from a stand-in controller (bench/router_standin.py answers
#           GET /v1/router/routes with one service whose endpoint is the
#           upstream, and takes the router's reports).
# For each: bench/httprate at a fixed rate (RATE, default 1,000 requests/s,
# open loop, 16 keep-alive connections, DURATION s after a 2 s warm-up): p50,
# p99 and p99.9 latency, and what the proxy adds over `direct` at each; then
# the maximum rate with `wrk -t2 -c64 -dMAX_S s`. ROUNDS rounds (default 3),
# the three cases interleaved, and the medians.
#
# Pinning (taskset): the proxy on PROXY_CPUS (default 0), the upstream on
# UPSTREAM_CPUS and the generators on LOAD_CPUS (default 1 each; on a machine
# with more cores give each its own). The machine's cores are printed first.
# Everything listens on 127.0.0.1 (ephemeral ports) and is stopped by PID.
#
# Usage: bench/router.sh build-bench   (a release build: gpuorch, and
#        bench/httprate if the build has it, else it is compiled here)
# Environment: RATE, DURATION (10), MAX_S (10), ROUNDS (3), THREADS (1),
#        CASES ("direct nginx router"), PROXY_CPUS, UPSTREAM_CPUS, LOAD_CPUS,
#        KEEP_TMP=1.
set -euo pipefail
build=${1:?usage: bench/router.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
bin=$build/gpuorch
rate=${RATE:-1000} duration=${DURATION:-10} max_s=${MAX_S:-10} rounds=${ROUNDS:-3}
threads=${THREADS:-1} cases=${CASES:-direct nginx router}
proxy_cpus=${PROXY_CPUS:-0} upstream_cpus=${UPSTREAM_CPUS:-1} load_cpus=${LOAD_CPUS:-1}
for t in nginx wrk taskset curl python3; do
  command -v "$t" >/dev/null || { echo "router.sh: $t is missing (scripts/setup.sh installs it)" >&2; exit 2; }
done
tmp=$(mktemp -d)
chmod 0755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" 2>/dev/null || true; fi
  done
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

hr=$build/bench/httprate
if [ ! -x "$hr" ]; then
  hr=$tmp/httprate
  gcc -O2 -Wall -Wextra -std=gnu11 -I"$here/../src" "$here/httprate.c" -o "$hr"
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_http() { # wait_http URL PID: until URL answers 200, or PID ends
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ] && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
nginx_conf() { # nginx_conf NAME WORKERS SERVER_BLOCK
  cat >"$tmp/$1.conf" <<EOF
worker_processes $2;
daemon off;
pid $tmp/$1.pid;
error_log $tmp/$1.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/$1-cb; proxy_temp_path $tmp/$1-pt; fastcgi_temp_path $tmp/$1-ft;
  uwsgi_temp_path $tmp/$1-ut; scgi_temp_path $tmp/$1-st;
  keepalive_requests 100000000;
  $3
}
EOF
}

up_port=$(free_port)
nginx_conf upstream 1 "server { listen 127.0.0.1:$up_port; location / { return 200 \"ok\"; } }"
taskset -c "$upstream_cpus" nginx -p "$tmp" -c "$tmp/upstream.conf" &
pids+=($!)
wait_http "http://127.0.0.1:$up_port/" "${pids[-1]}" || { cat "$tmp/upstream.err" >&2; exit 1; }

declare -A url
url[direct]=http://127.0.0.1:$up_port/
for c in $cases; do
  case $c in
  direct) ;;
  nginx)
    px_port=$(free_port)
    nginx_conf proxy "$threads" "upstream up { server 127.0.0.1:$up_port; keepalive 64; }
  server { listen 127.0.0.1:$px_port;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
    taskset -c "$proxy_cpus" nginx -p "$tmp" -c "$tmp/proxy.conf" &
    pids+=($!)
    wait_http "http://127.0.0.1:$px_port/" "${pids[-1]}" || { cat "$tmp/proxy.err" >&2; exit 1; }
    url[nginx]=http://127.0.0.1:$px_port/
    ;;
  router)
    if [ ! -x "$bin" ] || ! "$bin" router --help >/dev/null 2>&1; then
      echo "# router: skipped ($bin has no 'gpuorch router')"
      continue
    fi
    python3 "$here/router_standin.py" "$tmp/standin.port" "bench=127.0.0.1:$up_port" &
    pids+=($!)
    for _ in $(seq 1 100); do [ -s "$tmp/standin.port" ] && break; sleep 0.05; done
    echo "bench-join-token" >"$tmp/join.token"
    chmod 0600 "$tmp/join.token"
    rt_port=$(free_port)
    taskset -c "$proxy_cpus" "$bin" router --server "http://127.0.0.1:$(cat "$tmp/standin.port")" \
      --join-token "$tmp/join.token" --listen "127.0.0.1:$rt_port" --name bench \
      --threads "$threads" >"$tmp/router.log" 2>&1 &
    pids+=($!)
    wait_http "http://127.0.0.1:$rt_port/s/bench/" "${pids[-1]}" ||
      { echo "router.sh: the router never routed /s/bench/" >&2; tail -20 "$tmp/router.log" >&2; exit 1; }
    url[router]=http://127.0.0.1:$rt_port/s/bench/
    ;;
  *) echo "router.sh: unknown case '$c'" >&2; exit 2 ;;
  esac
done

echo "# router.sh: $(date -u +%FT%TZ), $(nproc) CPUs ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# proxy (nginx, router) on CPUs $proxy_cpus with $threads worker(s)/thread(s); upstream nginx (1 worker) on $upstream_cpus; httprate and wrk on $load_cpus"
echo "# $(nginx -v 2>&1 | sed 's/^nginx version: //'); open loop $rate requests/s for $duration s (16 connections, 2 s warm-up); max rate: wrk -t2 -c64 -d${max_s}s"
for r in $(seq 1 "$rounds"); do
  for c in $cases; do
    [ -n "${url[$c]:-}" ] || continue
    taskset -c "$load_cpus" "$hr" --url "${url[$c]}" --rate "$rate" --duration "$duration" \
      --warmup 2 --connections 16 --expect 200 --json >"$tmp/$c.$r.json" ||
      { echo "router.sh: httprate against $c failed" >&2; cat "$tmp/$c.$r.json" >&2; exit 1; }
    taskset -c "$load_cpus" wrk -t2 -c64 -d"${max_s}s" "${url[$c]}" >"$tmp/$c.$r.wrk"
  done
done

python3 - "$tmp" "$rounds" $cases <<'EOF'
import json, re, statistics, sys
tmp, rounds, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for c in cases:
    try:
        runs = [json.load(open(f"{tmp}/{c}.{r}.json")) for r in range(1, rounds + 1)]
    except FileNotFoundError:
        continue
    wrk = []
    for r in range(1, rounds + 1):
        text = open(f"{tmp}/{c}.{r}.wrk").read()
        m = re.search(r"Requests/sec:\s+([\d.]+)", text)
        bad = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", text)
        wrk.append((float(m.group(1)) if m else 0.0, bad.group(0) if bad else ""))
    rows[c] = (runs, wrk)
med = lambda xs: statistics.median(xs)
base = rows.get("direct")
print(f"{'case':8} {'round':>5} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'+p50 ms':>8} "
      f"{'+p99 ms':>8} {'max rps':>9}  errors")
def line(c, label, p50, p99, p999, rps, note):
    add50 = f"{p50 - base_p50:8.3f}" if base and c != "direct" else f"{'':8}"
    add99 = f"{p99 - base_p99:8.3f}" if base and c != "direct" else f"{'':8}"
    print(f"{c:8} {label:>5} {p50:8.3f} {p99:8.3f} {p999:9.3f} {add50} {add99} {rps:9.0f}  {note}")
for r in range(rounds):
    base_p50 = base[0][r]["latency_ms"]["p50"] if base else 0
    base_p99 = base[0][r]["latency_ms"]["p99"] if base else 0
    for c, (runs, wrk) in rows.items():
        l = runs[r]["latency_ms"]
        note = f"{runs[r]['errors']} {wrk[r][1]}".strip()
        line(c, str(r + 1), l["p50"], l["p99"], l["p999"], wrk[r][0], note)
base_p50 = med([x["latency_ms"]["p50"] for x in base[0]]) if base else 0
base_p99 = med([x["latency_ms"]["p99"] for x in base[0]]) if base else 0
for c, (runs, wrk) in rows.items():
    line(c, "med", med([x["latency_ms"]["p50"] for x in runs]),
         med([x["latency_ms"]["p99"] for x in runs]), med([x["latency_ms"]["p999"] for x in runs]),
         med([w[0] for w in wrk]), "")
EOF
