#!/usr/bin/env bash
# ingest.sh BUILD_DIR - controller ingest of GPU samples (docs/monitoring.md):
# a release-build controller on loopback, NODES simulated nodes
# (default 1000) x 8 GPUs registered with the join token, each sending a
# heartbeat with its 8 samples (and sampled_at_ms) at 1 Hz for SECONDS
# (default 60; DURATION=S) over one keep-alive connection per node, from a Python asyncio
# load generator. Prints the ingest lag (p50/p99/max, from the controller's
# own figures: arrival minus sampled_at_ms, over its last 8192 heartbeats, and
# as the generator saw the answers), the heartbeats per second achieved, and
# the controller's CPU (% of one core) and RSS. Stops by itself.
# STORE=postgres: the controller on a PostgreSQL of the script's own
# (tests/tools/pgserver.py, --store; its CPU printed beside the controller's);
# default sqlite.
set -euo pipefail
build=${1:?usage: bench/ingest.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
NODES=${NODES:-1000} SECONDS_RUN=${DURATION:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
spid=
pg=
cleanup() {
  if [ -n "$spid" ] && kill -0 "$spid" 2>/dev/null; then kill "$spid"; wait "$spid" 2>/dev/null || true; fi
  [ -n "$pg" ] && python3 "$root/tests/tools/pgserver.py" stop --dir "$pg" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
store_args=()
case ${STORE:-sqlite} in
  sqlite) ;;
  postgres)
    pg=$tmp/pg
    store_args=(--store "$(python3 "$root/tests/tools/pgserver.py" start --dir "$pg")")
    ;;
  *) echo "ingest.sh: STORE: unknown store $STORE (sqlite, postgres)" >&2; exit 2 ;;
esac
echo "# store: ${STORE:-sqlite}"
"$bin" server --data "$tmp/data" "${store_args[@]}" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  --node-timeout 600 >"$tmp/server.log" 2>&1 &
spid=$!
for _ in $(seq 1 300); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port")
python3 - "$port" "$tmp/data" "$spid" "$NODES" "$SECONDS_RUN" "$pg" <<'PY'
import asyncio, json, os, sys, time, urllib.request
port, data, spid, nodes, secs = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
pgdir = sys.argv[6]
def pg_cpu():
    """CPU seconds of the PostgreSQL postmaster and its children (0 without one)."""
    if not pgdir: return 0.0
    with open(os.path.join(pgdir, "data", "postmaster.pid")) as f: pm = int(f.readline())
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit(): continue
        try:
            with open(f"/proc/{d}/stat") as f: st = f.read().rsplit(")", 1)[1].split()
        except OSError: continue
        if int(d) == pm or int(st[1]) == pm: total += int(st[11]) + int(st[12])
    return total / os.sysconf("SC_CLK_TCK")
join = open(os.path.join(data, "join.token")).read().strip()
admin = open(os.path.join(data, "admin.token")).read().strip()
base = f"http://127.0.0.1:{port}"
def uuid(n, g): return f"GPU-{n:08x}-0000-4000-8000-{g:012x}"
def put_node(n):
    body = {"gpus": [{"index": g, "uuid": uuid(n, g), "gpu_type": "H100-80GB", "mem_mib": 81559}
                     for g in range(8)], "pool": "main", "cpus": 64, "mem_mib": 1048576}
    req = urllib.request.Request(f"{base}/v1/nodes/sim{n:04d}", json.dumps(body).encode(), method="PUT",
                                 headers={"Authorization": f"Bearer {join}", "Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
def cpu_rss():
    with open(f"/proc/{spid}/stat") as f: st = f.read().rsplit(")", 1)[1].split()
    ticks = int(st[11]) + int(st[12])
    rss = int(open(f"/proc/{spid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return ticks / os.sysconf("SC_CLK_TCK"), rss
def api(path):
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {admin}"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read())
req0 = urllib.request.Request(f"{base}/v1/pools/main", json.dumps({"description": "bench"}).encode(),
                              method="PUT", headers={"Authorization": f"Bearer {admin}"})
urllib.request.urlopen(req0).read()
for n in range(nodes): put_node(n)
sent = answered = 0
rtts = []
async def node(n, start, stop):
    global sent, answered
    r, w = await asyncio.open_connection("127.0.0.1", port)
    path = f"/v1/nodes/sim{n:04d}/heartbeat"
    t = start + (n % 1000) / 1000.0
    while t < stop:
        await asyncio.sleep(max(0, t - time.time()))
        now = time.time()
        gpus = [{"index": g, "uuid": uuid(n, g), "utilization_pct": (n + g) % 101,
                 "memory_utilization_pct": 10, "memory_used_mib": 1000 + g, "memory_total_mib": 81559,
                 "power_mw": 250000, "temperature_c": 55, "processes": []} for g in range(8)]
        body = json.dumps({"gpus": gpus, "dirty": [], "sampled_at_ms": int(now * 1000)}).encode()
        w.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {join}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        sent += 1
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        clen = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"): clen = int(line.split(b":")[1])
        if clen: await r.readexactly(clen)
        answered += 1
        rtts.append(time.time() - now)
        t += 1.0
    w.close()
async def main():
    start = time.time() + 2
    await asyncio.gather(*(node(n, start, start + secs) for n in range(nodes)))
c0, _ = cpu_rss(); p0 = pg_cpu(); t0 = time.time()
asyncio.run(main())
c1, rss = cpu_rss(); p1 = pg_cpu(); t1 = time.time()
st = api("/v1/health")  # keep-alive check
# The controller's own lag figures (ingest.c) through its /metrics when present.
lag = {}
try:
    req = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Bearer {admin}"})
    for line in urllib.request.urlopen(req, timeout=30).read().decode().splitlines():
        if line.startswith("gpuorch_sample_ingest_lag") or line.startswith("gpuorch_ingest"):
            lag[line.split()[0]] = line.split()[-1]
except Exception as e:
    lag["error"] = repr(e)
rtts.sort()
pct = lambda p: rtts[min(len(rtts) - 1, int(len(rtts) * p))] * 1000 if rtts else float("nan")
print(f"nodes            {nodes} x 8 GPUs, 1 Hz, {secs} s")
print(f"heartbeats       sent {sent}, answered {answered} ({answered / (t1 - t0):.0f}/s, {8 * answered / (t1 - t0):.0f} GPU samples/s)")
print(f"answer time ms   p50 {pct(0.5):.1f}  p99 {pct(0.99):.1f}  max {pct(1.0):.1f}   (send to 204, as the generator saw it)")
print(f"controller CPU   {100 * (c1 - c0) / (t1 - t0):.0f}% of one core over the run")
print(f"controller RSS   {rss / 1048576:.0f} MiB")
if pgdir: print(f"PostgreSQL CPU   {100 * (p1 - p0) / (t1 - t0):.1f}% of one core over the run (postmaster and backends)")
for k, v in sorted(lag.items()): print(f"metric           {k} {v}")
PY
