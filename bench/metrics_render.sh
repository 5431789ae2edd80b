#!/usr/bin/env bash
# metrics_render.sh BUILD_DIR - how long GET /metrics takes at 10,000 GPUs
# (docs/performance.md, "/metrics render"; the issue's goal: under 100 ms).
#
# Starts a controller (loopback, ephemeral port, fresh data directory, node
# timeout of a day so that nothing goes stale while it runs), then, without
# real agents, registers NODES simulated nodes (default 1,250) of 8 GPUs each
# with the join token, as `gpuorch agent` does (PUT /v1/nodes/NAME), sends
# one heartbeat per node with a sample of every GPU (varied figures), and
# submits JOBS jobs (default 400: whole-GPU jobs of 1, 2, 4 and 8 GPUs, and
# quarter-GPU ones, over 4 teams and 2 projects) that the scheduler places on
# those nodes: their GPUs then carry hpc_job/team/project labels and shared
# GPUs one series per job. No job process runs: assigned attempts are what
# the exposition reads.
#
# Then it times GET /metrics N times (default 20, after one warm-up) with
# curl's time_total over one connection each (the way Prometheus scrapes),
# and prints p50 and max in milliseconds with the exposition's size and
# series count. Everything it starts is stopped by PID.
#
# Usage: bench/metrics_render.sh build-bench     (a release build: gpuorch)
# Environment: NODES (1250), JOBS (400), N (20), KEEP_TMP=1.
set -euo pipefail
build=${1:?usage: bench/metrics_render.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
[ -x "$bin" ] || { echo "metrics_render.sh: $bin is missing: build $build first" >&2; exit 2; }
export NODES=${NODES:-1250} JOBS=${JOBS:-400} N=${N:-20}
tmp=$(mktemp -d)
spid=''
cleanup() {
  if [ -n "$spid" ] && kill -0 "$spid" 2>/dev/null; then
    kill "$spid"
    wait "$spid" 2>/dev/null || true
  fi
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

"$bin" server --data "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --node-timeout 86400 >"$tmp/server.log" 2>&1 &
spid=$!
for _ in $(seq 1 300); do
  [ -s "$tmp/port" ] && break
  sleep 0.05
done
[ -s "$tmp/port" ] || { echo "metrics_render.sh: the server did not start" >&2; exit 1; }
url=http://127.0.0.1:$(cat "$tmp/port")

# Configuration, nodes, heartbeats and jobs, over keep-alive connections.
python3 - "$url" "$tmp" <<'EOF'
import http.client, json, os, sys, time, urllib.parse
url, tmp = sys.argv[1:3]
nodes, njobs = int(os.environ["NODES"]), int(os.environ["JOBS"])
u = urllib.parse.urlparse(url)
conn = http.client.HTTPConnection(u.hostname, u.port)
admin = open(f"{tmp}/data/admin.token").read().strip()
join = open(f"{tmp}/data/join.token").read().strip()

def call(method, path, body=None, tok=admin, ok=(200, 201, 204)):
    for _ in range(100):
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Authorization": f"Bearer {tok}",
                              "Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        if r.status == 409:  # another configuration write is being stored
            time.sleep(0.01)
            continue
        if r.status not in ok:
            sys.exit(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None
    sys.exit(f"{method} {path}: still 409")

call("PUT", "/v1/pools/main", {"description": "bench"})
call("PUT", "/v1/priority-classes/normal", {"order": 0})
teams = ["vision", "nlp", "speech", "infra"]
for t in teams:
    call("PUT", f"/v1/teams/{t}", {"quotas": [{"pool": "main", "guaranteed": nodes * 2}]})
    call("PUT", f"/v1/users/u-{t}", {"team": t, "role": "member", "unix_user": "nobody"})
tokens = {t: call("POST", f"/v1/users/u-{t}/tokens")["token"] for t in teams}

t0 = time.monotonic()
for n in range(nodes):
    name = f"sim-{n:05d}"
    gpus = [{"index": g, "uuid": f"GPU-{n:08x}-0000-4000-8000-{g:012x}", "gpu_type": "H100-80GB",
             "mem_mib": 81559, "nvlink_domain": 0, "mig_slices": 7, "mig_enabled": False}
            for g in range(8)]
    call("PUT", f"/v1/nodes/{name}", {"pool": "main", "cpus": 224, "mem_mib": 2 * 1024 ** 2,
                                      "addr": "127.0.0.1", "gpus": gpus}, tok=join)
reg = time.monotonic() - t0

t0 = time.monotonic()
for n in range(nodes):
    name = f"sim-{n:05d}"
    sample = {"gpus": [{"index": g, "uuid": f"GPU-{n:08x}-0000-4000-8000-{g:012x}",
                        "utilization_pct": (n * 8 + g) % 101,
                        "memory_utilization_pct": (n + g) % 50,
                        "memory_used_mib": 1000 + 37 * ((n * 8 + g) % 2000),
                        "memory_total_mib": 81559, "power_mw": 70000 + 123 * g + n % 1000,
                        "temperature_c": 30 + (n + g) % 50, "processes": []}
                       for g in range(8)]}
    call("POST", f"/v1/nodes/{name}/heartbeat", sample, tok=join)
hb = time.monotonic() - t0

sizes = [1, 2, 4, 8, 0.25]
for k in range(njobs):
    team = teams[k % len(teams)]
    call("POST", "/v1/jobs", {"command": ["/bin/sleep", "3600"], "gpus": sizes[k % len(sizes)],
                              "pool": "main", "project": f"p{k % 2}", "name": f"j{k}"},
         tok=tokens[team])

def running():
    st = call("GET", "/v1/jobs?state=RUNNING&limit=1000") or {}
    return len(st.get("jobs") or [])
end = time.monotonic() + 120
while running() < njobs and time.monotonic() < end:
    time.sleep(0.5)
print(f"# {nodes} nodes registered in {reg:.1f} s, heartbeats in {hb:.1f} s, "
      f"{running()} of {njobs} jobs placed")
EOF

token=$(cat "$tmp/data/admin.token")
curl -sf -H "Authorization: Bearer $token" -o "$tmp/metrics.txt" "$url/metrics"
times=()
for _ in $(seq 1 "$N"); do
  times+=("$(curl -sf -H "Authorization: Bearer $token" -o /dev/null -w '%{time_total}' \
    "$url/metrics")")
done
python3 - "$tmp/metrics.txt" "${times[@]}" <<'EOF'
import sys
path, times = sys.argv[1], sorted(float(t) * 1000 for t in sys.argv[2:])
text = open(path).read()
lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
gpus = len({ln.split('UUID="')[1].split('"')[0] for ln in lines
            if ln.startswith("DCGM_FI_DEV_GPU_UTIL{")})
jobs = sum(1 for ln in lines if ln.startswith("DCGM_FI_DEV_GPU_UTIL{") and "hpc_job=" in ln)
p50 = times[len(times) // 2]
print(f"metrics_render gpus={gpus} series={len(lines)} gpu_series_with_job={jobs} "
      f"bytes={len(text.encode())} n={len(times)} p50_ms={p50:.1f} max_ms={times[-1]:.1f}")
EOF
