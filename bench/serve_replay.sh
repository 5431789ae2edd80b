#!/usr/bin/env bash
# serve_replay.sh BUILD_DIR - the Azure LLM conversation trace
# (../shared/traces/azure_llm2023_conv.csv.gz) as real HTTP load through
# `gpuorch router` against the example server with autoscaling
# (docs/performance.md, "Serving"). The load and the figures are
# bench/serve_replay.py's; this script starts the cluster around it.
#
# Starts a controller, one agent on the fake NVML with GPUS GPUs (default 16)
# and a router (bench/serve_cluster.sh), applies the service `chat`: the
# example server (examples/serving/server.py) with one GPU per replica, min
# MIN, max MAX, concurrency_limit MAX_BATCH, autoscaling on concurrency with
# target TARGET per replica; then replays the trace with its clock divided by
# COMPRESS (default 20: the hour in 3 minutes). What has a duration is
# compressed by the same factor: the example server's prefill and decode
# speeds are multiplied by COMPRESS (so service times shrink with the gaps
# between arrivals), its model load (LOAD_S) and the autoscaler's stable and
# panic windows and scale-to-zero grace are divided by it (whole seconds, no
# less than the spec allows: 6 s stable, 1 s panic). Prints serve_replay.py's
# JSON summary, then the replicas over time (one row per BUCKET_S s of trace
# time, default 300, from its replicas.csv).
#
# Usage: bench/serve_replay.sh build-bench
# Environment: COMPRESS (20), WINDOW_S (3600), START_S (0), GPUS (16), MIN (1),
#        MAX (16), TARGET (4), MAX_BATCH (8), PREFILL_TPS (5000), DECODE_TPS
#        (50), LOAD_S (20), MAX_OUTPUT (1024), BUCKET_S (300), OUT (a folder
#        for requests.csv and replicas.csv; default a temporary one), KEEP_TMP=1.
set -euo pipefail
build=${1:?usage: bench/serve_replay.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
nvml=$build/tests/libnvidia-ml.so.1
here=$(cd "$(dirname "$0")" && pwd)
server_py=$(cd "$here/.." && pwd)/examples/serving/server.py
compress=${COMPRESS:-20} window_s=${WINDOW_S:-3600} start_s=${START_S:-0} gpus=${GPUS:-16}
min=${MIN:-1} max=${MAX:-16} target=${TARGET:-4} batch=${MAX_BATCH:-8}
prefill=${PREFILL_TPS:-5000} decode=${DECODE_TPS:-50} load_s=${LOAD_S:-20}
for f in "$bin" "$nvml" "$server_py" "$here/serve_replay.py"; do
  [ -e "$f" ] || { echo "serve_replay.sh: $f is missing" >&2; exit 2; }
done
if ! "$bin" router --help >/dev/null 2>&1; then
  echo "serve_replay.sh: $bin has no 'gpuorch router' (needs the router and serving branches)" >&2
  exit 2
fi
tmp=$(mktemp -d)
chmod 0755 "$tmp"
cleanup() {
  serve_cluster_stop
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
# shellcheck source=bench/serve_cluster.sh
. "$here/serve_cluster.sh"
serve_cluster_start "$bin" "$nvml" "$gpus"

spec=$(python3 - "$server_py" "$compress" "$min" "$max" "$target" "$batch" "$prefill" \
  "$decode" "$load_s" <<'EOF'
import json, math, sys
server, c, lo, hi, target, batch, prefill, decode, load = sys.argv[1:]
c = float(c)
sec = lambda s, least: max(least, math.ceil(s / c))  # the spec's least values
print(json.dumps({
    "name": "chat", "team": "bench", "model": "chat",
    "command": ["python3", server, "--model", "chat", "--load-s", f"{float(load) / c:g}",
                "--prefill-tps", f"{float(prefill) * c:g}",
                "--decode-tps", f"{float(decode) * c:g}", "--max-batch", batch],
    "resources": {"gpus": 1, "pool": "main"},
    "min": int(lo), "max": int(hi), "concurrency_limit": int(batch),
    "autoscaling": {"metric": "concurrency", "target": float(target),
                    "stable_window_s": sec(60, 6), "panic_window_s": sec(6, 1),
                    "scale_to_zero_grace_s": sec(30, 1)}}))
EOF
)
code=$(curl -s -o "$tmp/put.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $user_token" \
  -d "$spec" "$url/v1/services/chat")
case $code in
2*) ;;
*) echo "serve_replay.sh: PUT /v1/services/chat: $code $(cat "$tmp/put.json")" >&2; exit 1 ;;
esac
if [ "$min" -gt 0 ]; then
  for _ in $(seq 1 600); do
    curl -sf -H "Authorization: Bearer $user_token" "$url/v1/services/chat" |
      python3 -c 'import json,sys; st = json.load(sys.stdin).get("status")
sys.exit(st is not None and st.get("ready", 0) < 1)' && break # no status: cannot tell, go
    sleep 0.1
  done
fi
echo "# serve_replay.sh: $(nproc) CPUs, $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg);" \
  "trace time / $compress; example server: load ${load_s}/$compress s, prefill $prefill and" \
  "decode $decode tok/s x $compress, batch $batch; min $min max $max target $target (concurrency)"
out=${OUT:-$tmp/out}
echo "$user_token" >"$tmp/user.token"
rc=0
python3 "$here/serve_replay.py" --url "http://127.0.0.1:$rport" --model chat \
  --speedup "$compress" --start-s "$start_s" --duration-s "$window_s" \
  --max-output "${MAX_OUTPUT:-1024}" --server "$url" --token-file "$tmp/user.token" \
  --service chat --out "$out" || rc=$?
python3 - "$out/replicas.csv" "$compress" "${BUCKET_S:-300}" <<'EOF' || true
import csv, sys
rows, c, bucket = list(csv.DictReader(open(sys.argv[1]))), float(sys.argv[2]), float(sys.argv[3])
print(f"replicas over time (per {bucket:.0f} s of trace time; mean/max of the samples):")
by = {}
for r in rows:
    by.setdefault(int(float(r["t"]) * c // bucket), []).append(r)
for k in sorted(by):
    rs = by[k]
    col = lambda n: [float(r[n] or 0) for r in rs]
    cell = lambda n: f"{n} {sum(col(n)) / len(rs):4.1f}/{max(col(n)):3.0f}"
    print(f"  t={k * bucket:6.0f}s " + "  ".join(cell(n) for n in
          ("desired", "ready", "starting", "draining", "inflight")))
EOF
curl -sf -H "Authorization: Bearer $user_token" "$url/v1/services/chat" |
  python3 -c 'import json, sys
st = json.load(sys.stdin).get("status") or {}
print("controller   cost.gpu_hours", (st.get("cost") or {}).get("gpu_hours"),
      "(wall clock; x", sys.argv[1], "for trace time); last decision:",
      (st.get("decision") or {}).get("reason"))' "$compress" || true
exit "$rc"
