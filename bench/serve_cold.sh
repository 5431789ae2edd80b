#!/usr/bin/env bash
# serve_cold.sh BUILD_DIR - scale from zero: how long the first request to a
# service with no replica waits for its answer, and how much of that is ours
# rather than the replica's own start (docs/performance.md, "Serving").
#
# Starts a controller (loopback, ephemeral port, fresh data directory), one
# agent on the fake NVML with N + 2 GPUs and `gpuorch router`, all stopped by PID.
# Then N times (default 10): PUT /v1/services/cold-I (min 0, max 1, one GPU,
# the replica bench/cold_replica.py), waits until the router lists it in
# GET /v1/models (no replica yet), sends GET /s/cold-I/hello through the
# router and times it to the answer, then deletes the service. The replica
# stamps its own side: the exec of its command (`date +%s.%N` in the shell
# that execs python) and the moment it listens and can answer (after LOAD_S,
# default 0). Then
#   total   = request sent -> response read (the client's view);
#   replica = exec -> can answer (the replica's own start, not ours);
#   ours    = total - replica, split into
#     launch: request -> exec (router asks, controller decides and places,
#             agent launches) and
#     route:  can answer -> response (readiness probe, endpoint report,
#             routes to the router, the forward).
# Prints each run and p50/max of each part. The goal: ours under 50 ms.
#
# Usage: bench/serve_cold.sh build-bench   (release build: gpuorch,
#        gpuorch-shim and tests/libnvidia-ml.so.1; as root the replicas run as
#        gpuorch-test1)
# Environment: N (10), GPUS (N + 2), LOAD_S (0), PROBE_MS (the spec's readiness period;
#        unset: the service default), KEEP_TMP=1.
set -euo pipefail
build=${1:?usage: bench/serve_cold.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
shim=$(dirname "$bin")/gpuorch-shim
nvml=$build/tests/libnvidia-ml.so.1
here=$(cd "$(dirname "$0")" && pwd)
export N=${N:-10} LOAD_S=${LOAD_S:-0} PROBE_MS=${PROBE_MS:-}
for f in "$bin" "$shim" "$nvml"; do
  [ -e "$f" ] || { echo "serve_cold.sh: $f is missing: build $build first" >&2; exit 2; }
done
if ! "$bin" router --help >/dev/null 2>&1; then
  echo "serve_cold.sh: $bin has no 'gpuorch router' (needs the router and serving branches)" >&2
  exit 2
fi
tmp=$(mktemp -d)
chmod 0755 "$tmp"
mkdir -m 0777 "$tmp/stamps"
cleanup() {
  serve_cluster_stop
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
# shellcheck source=bench/serve_cluster.sh
. "$here/serve_cluster.sh"
# A GPU per run: a stopped replica's GPU may be held back a while (the
# agent's dirty check), and a wait for a GPU is not what this measures.
gpus=${GPUS:-$((N + 2))}
serve_cluster_start "$bin" "$nvml" "$gpus"
echo "$user_token" >"$tmp/user.token"

echo "# serve_cold.sh: $N cold starts, one agent with $gpus fake GPUs, router on 127.0.0.1:$rport," \
  "$(nproc) CPUs, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$url" "$rport" "$tmp" "$here" <<'EOF'
import http.client, json, os, sys, time
url, rport, tmp, here = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
n, load_s, probe_ms = int(os.environ["N"]), os.environ["LOAD_S"], os.environ["PROBE_MS"]
host, port = url.split("//")[1].split(":")
token = open(f"{tmp}/user.token").read().strip()
stamps = f"{tmp}/stamps"

def call(method, path, body=None):
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None

def router_models():
    c = http.client.HTTPConnection("127.0.0.1", rport, timeout=10)
    c.request("GET", "/v1/models")
    r = c.getresponse()
    data = r.read()
    c.close()
    return [m["id"] for m in json.loads(data).get("data", [])] if r.status == 200 else []

def read_stamp(name, kind, timeout=5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            return float(open(f"{stamps}/{name}.{kind}").read())
        except (OSError, ValueError):
            time.sleep(0.005)
    return None

rows, failed = [], []
for i in range(n):
    name = f"cold-{i}"
    cmd = (f"date +%s.%N > {stamps}/$GPUORCH_SERVICE.exec && "
           f"exec python3 {here}/cold_replica.py {stamps} {load_s}")
    spec = {"name": name, "team": "bench", "command": ["sh", "-c", cmd],
            "resources": {"gpus": 1, "pool": "main"}, "min": 0, "max": 1}
    if probe_ms:
        spec["readiness"] = {"path": "/health", "period_ms": int(probe_ms)}
    st, body = call("PUT", f"/v1/services/{name}", spec)
    if st not in (200, 201):
        sys.exit(f"PUT /v1/services/{name}: {st} {body}")
    end = time.monotonic() + 90  # past one routes long-poll (30 s by default)
    while name not in router_models():
        if time.monotonic() > end:
            sys.exit(f"the router did not list {name} within 90 s")
        time.sleep(0.01)
    c = http.client.HTTPConnection("127.0.0.1", rport, timeout=120)
    c.connect()
    t0 = time.time()
    c.request("GET", f"/s/{name}/hello")
    r = c.getresponse()
    data = r.read()
    t1 = time.time()
    c.close()
    if r.status != 200:
        failed.append(name)
        print(f"run {i + 1:3} GET /s/{name}/hello: {r.status} after {(t1 - t0) * 1e3:.0f} ms: "
              f"{data[:200]!r}", flush=True)
        call("DELETE", f"/v1/services/{name}")
        continue
    t_exec, t_ready = read_stamp(name, "exec"), read_stamp(name, "ready")
    if t_exec is None or t_ready is None:
        sys.exit(f"{name}: the replica left no stamps in {stamps}")
    total, replica = t1 - t0, t_ready - t_exec
    rows.append((total, replica, t_exec - t0, t1 - t_ready))
    print(f"run {i + 1:3} total_ms={total * 1e3:8.1f} replica_ms={replica * 1e3:7.1f} "
          f"ours_ms={(total - replica) * 1e3:7.1f} (launch {(t_exec - t0) * 1e3:.1f} + "
          f"route {(t1 - t_ready) * 1e3:.1f})", flush=True)
    call("DELETE", f"/v1/services/{name}")

if failed:
    print(f"failed   {len(failed)} of {n}: {', '.join(failed)}")
if not rows:
    sys.exit(1)

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]

for label, k in (("total", 0), ("replica", 1), ("launch", 2), ("route", 3)):
    v = [r[k] for r in rows]
    print(f"{label:8} p50_ms={pct(v, 50) * 1e3:8.1f} max_ms={max(v) * 1e3:8.1f}")
ours = [r[0] - r[1] for r in rows]
print(f"{'ours':8} p50_ms={pct(ours, 50) * 1e3:8.1f} max_ms={max(ours) * 1e3:8.1f} "
      f"(goal: under 50 ms)")
sys.exit(1 if failed else 0)
EOF
