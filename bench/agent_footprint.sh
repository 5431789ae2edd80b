#!/usr/bin/env bash
# agent_footprint.sh BUILD_DIR - the node agent's CPU and resident memory while
# it samples 8 GPUs every second and runs 8 jobs (docs/performance.md).
#
# Starts a controller (loopback, ephemeral port, fresh data directory) and one
# agent on the fake NVML with 8 GPUs, submits 8 one-GPU jobs that sleep, waits
# until all 8 run, then measures the agent over DURATION seconds (default 60):
# CPU as (utime + stime) of the agent and its privileged half, from
# /proc/PID/stat, divided by the wall time; memory as the sum of their VmRSS
# at the end (and the largest VmHWM). Stops everything by PID.
# Usage: bench/agent_footprint.sh build-bench   (as root: jobs run as
# gpuorch-test1; as another user, as that user)
set -euo pipefail
build=${1:?usage: bench/agent_footprint.sh BUILD_DIR}
bin=$build/gpuorch
nvml=$build/tests/libnvidia-ml.so.1
duration=${DURATION:-60}
for f in "$bin" "$nvml"; do
  [ -e "$f" ] || { echo "agent_footprint.sh: $f is missing: build $build first" >&2; exit 2; }
done
tmp=$(mktemp -d)
chmod 0755 "$tmp"
spid= apid= url= token=
cleanup() {
  # The jobs outlive the agent by design: cancel them while it still runs.
  if [ -n "$apid" ] && kill -0 "$apid" 2>/dev/null; then
    for id in $(curl -sf -H "Authorization: Bearer $token" "$url/v1/jobs?state=RUNNING" |
                python3 -c 'import json,sys; print(*[j["id"] for j in json.load(sys.stdin)["jobs"]])'); do
      curl -sf -X POST -H "Authorization: Bearer $token" "$url/v1/jobs/$id/cancel" >/dev/null || true
    done
    for _ in $(seq 1 100); do
      n=$(curl -sf -H "Authorization: Bearer $token" "$url/v1/jobs?state=RUNNING" |
          python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))') || break
      [ "$n" = 0 ] && break
      sleep 0.1
    done
  fi
  for p in $apid $spid; do
    if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
"$bin" server --data "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --pass-interval 1 >"$tmp/server.log" 2>&1 &
spid=$!
for _ in $(seq 1 300); do
  [ -s "$tmp/port" ] && break
  sleep 0.05
done
url=http://127.0.0.1:$(cat "$tmp/port")
token=$(cat "$tmp/data/admin.token")
api() { curl -sf -H "Authorization: Bearer $token" "$@"; }
api -X PUT -d '{"description": "bench"}' "$url/v1/pools/main" >/dev/null
api -X PUT -d '{"quotas": []}' "$url/v1/teams/bench" >/dev/null
user_json='{"team": "bench", "role": "member"}'
if [ "$(id -u)" = 0 ]; then
  user_json='{"team": "bench", "role": "member", "unix_user": "gpuorch-test1"}'
fi
api -X PUT -d "$user_json" "$url/v1/users/bench" >/dev/null
utok=$(api -X POST "$url/v1/users/bench/tokens" | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
python3 - "$tmp/gpus.json" <<'EOF'
import json, sys
gpus = [{"uuid": f"GPU-be0c0000-0000-4000-8000-{i:012x}", "utilization": 50,
         "nvlink_peers": [j for j in range(8) if j != i]} for i in range(8)]
json.dump({"gpus": gpus}, open(sys.argv[1], "w"))
EOF
# The fake scans every process's environment for each NVML process call;
# real NVML asks the driver. One scan per sampling round keeps the fake's
# cost out of the agent's figure (tests/fakenvml/README.md).
FAKENVML_DRIVER=1 FAKENVML_CONFIG=$tmp/gpus.json FAKENVML_PROC_CACHE_MS=${FAKENVML_PROC_CACHE_MS:-1000} "$bin" agent --server "$url" \
  --join-token "$tmp/data/join.token" --name bench-node --state-dir "$tmp/agent" \
  --nvml "$nvml" --log-listen 127.0.0.1:0 --addr 127.0.0.1 --cpus 64 --mem-mib 524288 \
  >"$tmp/agent.log" 2>&1 &
apid=$!
for i in $(seq 1 8); do
  curl -sf -H "Authorization: Bearer $utok" -d \
    '{"team": "bench", "gpus": 1, "command": ["sleep", "3600"]}' \
    "$url/v1/jobs" >/dev/null
done
running=0
for _ in $(seq 1 600); do
  running=$(api "$url/v1/jobs?state=RUNNING" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))')
  [ "$running" = 8 ] && break
  sleep 0.1
done
if [ "$running" != 8 ]; then
  echo "agent_footprint.sh: only $running of 8 jobs ran" >&2
  tail -20 "$tmp/agent.log" >&2
  exit 1
fi
# RUNNING is the controller's word at assignment: wait for the agent's launches too.
for _ in $(seq 1 600); do
  [ "$(grep -c ': started, shim pid' "$tmp/agent.log")" = 8 ] && break
  sleep 0.1
done
# The agent and its privileged half (its only child; the shims are the latter's).
pids="$apid $( (pgrep -P "$apid" || true) | tr '\n' ' ')"
ticks() { local t=0; for p in $pids; do
  t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
hz=$(getconf CLK_TCK)
t0=$(ticks); w0=$(date +%s.%N)
sleep "$duration"
t1=$(ticks); w1=$(date +%s.%N)
rss=0 hwm=0
for p in $pids; do
  r=$(awk '/VmRSS/ {print $2}' "/proc/$p/status"); rss=$((rss + r))
  h=$(awk '/VmHWM/ {print $2}' "/proc/$p/status"); [ "$h" -gt "$hwm" ] && hwm=$h
done
python3 - "$t0" "$t1" "$w0" "$w1" "$hz" "$rss" "$hwm" "$pids" <<'EOF'
import sys
t0, t1, w0, w1, hz, rss, hwm = (float(x) for x in sys.argv[1:8])
cpu = (t1 - t0) / hz / (w1 - w0) * 100
print(f"agent ({len(sys.argv[8].split())} processes: agent + privileged half), 8 GPUs sampled "
      f"every 1 s, 8 jobs running, {w1 - w0:.0f} s:")
print(f"  CPU: {cpu:.2f} % of one core")
print(f"  resident memory: {rss / 1024:.1f} MiB together (largest VmHWM {hwm / 1024:.1f} MiB)")
EOF
