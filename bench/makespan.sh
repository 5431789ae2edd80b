#!/usr/bin/env bash
# makespan.sh BUILD_DIR - NJOBS (2,000) one-GPU `sleep 1` jobs on NODES (2)
# agents of 8 fake GPUs each: from the first submit to the last end, against
# Slurm's on the same GPUs (docs/performance.md, "2,000 one-second jobs").
#
# gpuorch: a controller and NODES agents on the fake NVML (loopback, fresh
# data directory, every process stopped by PID at the end), and one of two
# ways to submit (SUBMIT, default "jobs array"):
#   jobs   NJOBS POST /v1/jobs from one python http.client keep-alive
#          connection, as fast as the controller answers (each answer means
#          the job is committed);
#   array  one POST /v1/jobs with "array": "0-(NJOBS-1)" (no running cap).
# The end is the largest ended_at (the controller's record of the agent's
# report). Then, from the API (each attempt's started_at: the pass that
# placed it; ended_at), the agents' logs (the moment each attempt was launched)
# and each attempt's status file (its mtime: when the shim saw
# the command exit), it splits one GPU's cycle into:
#   launch   pass -> the agent has started the shim
#   run      shim started -> command exited (sleep 1 + exec)
#   detect   exit -> the controller's ended_at (the shim's pidfd wakes the
#            agent's monitor, which reads the status file, checks the GPUs,
#            POSTs the report)
#   idle     ended_at -> the next attempt's pass on that GPU
# and prints the share of GPU time that ran jobs, and the CPU time the agents
# and the controller used.
#
# Slurm (SLURM=1, as root, ../shared/baselines/slurm/ installed): NODES nodes
# of 8 GPUs, its default profile (SLURM_PROFILE=htc for the other), NJOBS
# `sbatch -G 1 -o /dev/null --wrap 'sleep 1'` from one loop; the end is when
# squeue is empty (polled every 100 ms).
#
# Usage: bench/makespan.sh build-bench   (release build: gpuorch,
#        gpuorch-shim and tests/libnvidia-ml.so.1; as root the jobs run as
#        gpuorch-test1)
# Environment: NJOBS (2000), NODES (2; 16 for 128 GPUs), SUBMIT ("jobs
#        array", or none), SAMPLE_MS (the agents' --sample-interval, 1000),
#        SLURM (1), SLURM_PROFILE (default), SLURM_BASELINE, KEEP_TMP=1;
#        FAKENVML_PROC_CACHE_MS (1000; 0: scan at every call) reaches the
#        agents' fake NVML: its /proc scan at most once per that many ms,
#        as a real driver keeps its process list (tests/fakenvml/README.md).
set -euo pipefail
build=${1:?usage: bench/makespan.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
shim=$(dirname "$bin")/gpuorch-shim
nvml=$build/tests/libnvidia-ml.so.1
here=$(cd "$(dirname "$0")" && pwd)
proc_cache_ms=${FAKENVML_PROC_CACHE_MS:-1000}
slurm_dir=${SLURM_BASELINE:-$here/../../shared/baselines/slurm}
export NJOBS=${NJOBS:-2000} NODES=${NODES:-2}
submit_modes=${SUBMIT:-jobs array}
sample_ms=${SAMPLE_MS:-1000}
gpus_per_node=8
for f in "$bin" "$shim" "$nvml"; do
  [ -e "$f" ] || { echo "makespan.sh: $f is missing: build $build first" >&2; exit 2; }
done
tmp=$(mktemp -d)
chmod 0755 "$tmp"
pids=() slurm_up=''

stop_ours() {
  local p
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" 2>/dev/null || true; fi
  done
  pids=()
}
cleanup() {
  if [ -n "$slurm_up" ]; then "$slurm_dir/setup.sh" stop >/dev/null 2>&1 || true; fi
  stop_ours
  cg_remove
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
# The agents' cgroups (bench/cgroups.sh: cg_setup, cg_root, cg_remove).
# shellcheck source=bench/cgroups.sh
. "$(dirname "$0")/cgroups.sh"
cg_setup

# One cluster per row: a fresh controller and fresh agents, so that the rows
# do not share a queue, a store or the fair-share history.
start_cluster() { # start_cluster DIR
  local d=$1 k url token
  mkdir -p "$d"
  # Agents first in the list: they are stopped before the controller.
  "$bin" server --data "$d/data" --listen 127.0.0.1:0 --port-file "$d/port" \
    >"$d/server.log" 2>&1 &
  local spid=$!
  for _ in $(seq 1 300); do
    [ -s "$d/port" ] && break
    sleep 0.05
  done
  url=http://127.0.0.1:$(cat "$d/port")
  token=$(cat "$d/data/admin.token")
  api() { curl -sf -H "Authorization: Bearer $token" "$@"; }
  api -X PUT -d '{"description": "bench"}' "$url/v1/pools/main" >/dev/null
  api -X PUT -d "{\"quotas\": [{\"pool\": \"main\", \"guaranteed\": $((NODES * gpus_per_node))}]}" \
    "$url/v1/teams/bench" >/dev/null
  local user_json='{"team": "bench", "role": "member"}'
  if [ "$(id -u)" = 0 ]; then
    user_json='{"team": "bench", "role": "member", "unix_user": "gpuorch-test1"}'
  fi
  api -X PUT -d "$user_json" "$url/v1/users/bench" >/dev/null
  api -X POST "$url/v1/users/bench/tokens" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >"$d/user.token"
  for k in $(seq 1 "$NODES"); do
    python3 - "$d/gpus-$k.json" "$k" "$gpus_per_node" <<'EOF'
import json, sys
node, n = int(sys.argv[2]), int(sys.argv[3])
gpus = [{"uuid": f"GPU-{node:08x}-0000-4000-8000-{i:012x}", "utilization": 50} for i in range(n)]
json.dump({"gpus": gpus}, open(sys.argv[1], "w"))
EOF
    # The fake's process list comes from one /proc scan a second, less the
    # processes that have exited since (so an ended job's GPU is never held
    # dirty by a stale scan): reading every process's environment is the
    # fake's cost, which a real driver does not have.
    cg_root "$(basename "$d")-node$k"
    FAKENVML_DRIVER=1 FAKENVML_CONFIG=$d/gpus-$k.json FAKENVML_PROC_CACHE_MS=$proc_cache_ms \
      "$bin" agent --server "$url" \
      --join-token "$d/data/join.token" --name "node$k" --state-dir "$d/agent$k" \
      --nvml "$nvml" --log-listen 127.0.0.1:0 --addr 127.0.0.1 --cpus 64 --mem-mib 524288 \
      --sample-interval "$sample_ms" "${cgflags[@]}" >"$d/agent$k.log" 2>&1 &
    pids+=($!)
  done
  pids+=("$spid")
  for _ in $(seq 1 300); do
    [ "$(api "$url/v1/nodes" | grep -o '"state": *"up"' | wc -l)" = "$NODES" ] && break
    sleep 0.1
  done
  echo "$url" >"$d/url"
}

run_ours() { # run_ours SUBMIT DIR
  python3 - "$1" "$2" "$gpus_per_node" <<'EOF'
import glob, http.client, json, os, re, sys, time, urllib.parse
from datetime import datetime
mode, d, per_node = sys.argv[1], sys.argv[2], int(sys.argv[3])
njobs, nodes = int(os.environ["NJOBS"]), int(os.environ["NODES"])
u = urllib.parse.urlparse(open(f"{d}/url").read().strip())
token = open(f"{d}/user.token").read().strip()
admin = open(f"{d}/data/admin.token").read().strip()
conn = http.client.HTTPConnection(u.hostname, u.port)

def call(method, path, body=None, tok=token):
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Authorization": f"Bearer {tok}", "Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null")

spec = {"team": "bench", "gpus": 1, "command": ["sleep", "1"], "workdir": "/tmp"}
t0 = time.time()
if mode == "array":
    st, j = call("POST", "/v1/jobs", dict(spec, array=f"0-{njobs - 1}"))
    assert st == 201, (st, j)
    ids = j["array_jobs"]
else:
    ids = []
    for i in range(njobs):
        st, j = call("POST", "/v1/jobs", spec)
        assert st == 201, (st, j)
        ids.append(j["id"])
t_sub = time.time()
while True:
    st, j = call("GET", "/v1/jobs?state=PENDING,RUNNING&limit=1", tok=admin)
    if not j["jobs"]:
        break
    time.sleep(0.1)
t_seen = time.time()

ts = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
jobs = []
for jid in ids:
    st, j = call("GET", f"/v1/jobs/{jid}", tok=admin)
    jobs.append(j)
bad = [j["id"] for j in jobs if j["state"] != "COMPLETED" or len(j["attempts"]) != 1]
end = max(ts(j["attempts"][-1]["ended_at"]) for j in jobs)
first_start = min(ts(j["attempts"][0]["started_at"]) for j in jobs)
ngpus = nodes * per_node
ideal = njobs * 1.0 / ngpus
print(f"gpuorch {mode:5} {njobs} jobs on {ngpus} GPUs: submitted in {t_sub - t0:.2f} s "
      f"({njobs / (t_sub - t0):.0f}/s), first start +{first_start - t0:.2f} s, "
      f"MAKESPAN {end - t0:.1f} s (ideal {ideal:.1f} s), seen done at +{t_seen - t0:.1f} s; "
      f"not COMPLETED in one attempt: {len(bad)}")

# The agents' view: launch times (their log lines), exits (status mtimes).
line = re.compile(r"^(\S+) gpuorch agent: job (\d+)\.1: started")
launch, exited = {}, {}
for k in range(1, nodes + 1):
    for text in open(f"{d}/agent{k}.log"):
        m = line.match(text)
        if m:
            launch[int(m.group(2))] = ts(m.group(1))
    for st_path in glob.glob(f"{d}/agent{k}/attempts/*.1/status"):
        jid = int(os.path.basename(os.path.dirname(st_path)).split(".")[0])
        exited[jid] = os.stat(st_path).st_mtime
parts = {"launch": [], "run": [], "detect": [], "idle": []}
by_gpu = {}
for j in jobs:
    a = j["attempts"][0]
    jid, s, e = j["id"], ts(a["started_at"]), ts(a["ended_at"])
    if jid in launch and jid in exited:
        parts["launch"].append(launch[jid] - s)
        parts["run"].append(exited[jid] - launch[jid])
        parts["detect"].append(e - exited[jid])
    g = a["gpus"][0]
    by_gpu.setdefault(g.get("uuid") if isinstance(g, dict) else g, []).append((s, e))
for spans in by_gpu.values():
    spans.sort()
    parts["idle"] += [b[0] - a[1] for a, b in zip(spans, spans[1:])]

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else float("nan")

cycle = 0
for name, v in parts.items():
    mean = sum(v) / len(v) if v else float("nan")
    cycle += mean
    print(f"  {name:7} mean {mean * 1000:7.1f} ms  p50 {pct(v, 50) * 1000:7.1f}  "
          f"p99 {pct(v, 99) * 1000:7.1f}  (n={len(v)})")
busy = njobs * 1.0 / (ngpus * (end - t0))
print(f"  one GPU's cycle: {cycle * 1000:.0f} ms for 1,000 ms of sleep; GPUs busy with sleep "
      f"{busy * 100:.0f} % of the makespan; {len(by_gpu)} GPUs used")
EOF
}

# CPU seconds (utime + stime from /proc/PID/stat) of the agents with their
# privileged halves, and of the controller, since they started: where the
# machine's cores went. The jobs themselves (shims, sleep) are not counted.
cpu_report() { # cpu_report T0
  local hz p c t agents=0 ctl=0 last=${pids[${#pids[@]}-1]}
  hz=$(getconf CLK_TCK)
  for p in "${pids[@]}"; do
    t=$(awk '{print $14 + $15}' "/proc/$p/stat")
    if [ "$p" = "$last" ]; then ctl=$t; continue; fi
    for c in $(pgrep -P "$p" || true); do
      t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat")))
    done
    agents=$((agents + t))
  done
  python3 - "$hz" "$agents" "$ctl" "$1" <<'EOF'
import sys, time
hz, a, c, t0 = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
w = time.time() - t0
print(f"  CPU over {w:.0f} s: agents {a / hz:.1f} s ({a / hz / w * 100:.0f} % of one core), "
      f"controller {c / hz:.1f} s ({c / hz / w * 100:.0f} %)")
EOF
}

echo "# makespan.sh: $NJOBS x sleep 1 on $NODES x $gpus_per_node fake GPUs, $(nproc) CPUs," \
  "$(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)" \
  ", FAKENVML_PROC_CACHE_MS=$proc_cache_ms"
n=0
for mode in $submit_modes; do
  [ "$mode" = none ] && continue
  n=$((n + 1))
  start_cluster "$tmp/run$n"
  t0=$(date +%s.%N)
  run_ours "$mode" "$tmp/run$n"
  cpu_report "$t0"
  stop_ours
done

[ "${SLURM:-1}" = 1 ] || exit 0
if [ "$(id -u)" != 0 ] || ! command -v sbatch >/dev/null || [ ! -x "$slurm_dir/setup.sh" ]; then
  echo "slurm (skipped: needs root, sbatch and $slurm_dir/setup.sh)"
  exit 0
fi
sched=''
# The baseline's htc profile (its README), else Slurm's defaults.
htc=batch_sched_delay=0,default_queue_depth=10000,bf_interval=5,bf_continue,bf_max_job_test=10000
[ "${SLURM_PROFILE:-default}" = htc ] && sched=$htc
slurm_up=1
NNODES=$NODES GPUS_PER_NODE=$gpus_per_node SCHED_PARAMS=$sched "$slurm_dir/setup.sh" start \
  >"$tmp/slurm.log" 2>&1 || { tail -20 "$tmp/slurm.log" >&2; exit 1; }
export SLURM_CONF=${SLURM_BASELINE_DIR:-/tmp/slurm-baseline}/etc/slurm.conf
for _ in $(seq 1 100); do
  [ "$(sinfo -h -o '%t' 2>/dev/null | sort -u)" = idle ] && break
  sleep 0.1
done
python3 - <<'EOF'
import os, subprocess, time
njobs, nodes = int(os.environ["NJOBS"]), int(os.environ["NODES"])
profile = os.environ.get("SLURM_PROFILE", "default")
t0 = time.time()
for i in range(njobs):
    subprocess.run(["sbatch", "-G", "1", "-o", "/dev/null", "--wrap", "sleep 1"], check=True,
                   capture_output=True)
t_sub = time.time()
while subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                     text=True).stdout.strip():
    time.sleep(0.1)
end = time.time()
print(f"slurm   {profile} {njobs} jobs on {nodes * 8} GPUs: submitted in {t_sub - t0:.2f} s "
      f"({njobs / (t_sub - t0):.0f}/s), MAKESPAN {end - t0:.1f} s "
      f"(ideal {njobs / (nodes * 8):.1f} s)")
EOF
