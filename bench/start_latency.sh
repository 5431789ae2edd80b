#!/usr/bin/env bash
# start_latency.sh BUILD_DIR - submit-to-start latency on an idle cluster, p50
# and p99, through the API, through the CLI, and Slurm's beside it
# (docs/performance.md, "Submit to start").
#
# Starts a controller (loopback, ephemeral port, fresh data directory) and one
# agent on the fake NVML with 8 GPUs, then submits N one-GPU jobs (default
# 200) one after the other. Each job's command is `date +%s.%N` with its
# output in a file: the latency is that stamp (the moment the job's own
# process runs) minus the moment just before the submission was sent.
#
#   api   python http.client on one keep-alive connection (POST /v1/jobs)
#   cli   `gpuorch submit --parsable --gpus 1 -o FILE -- date +%s.%N` (a
#         process per submission, as a user types it), when the build has it
#   slurm `sbatch -G 1 --wrap 'date +%s.%N > FILE'` on Slurm 22.05 from
#         ../shared/baselines/slurm/ (one node of 8 GPUs, its default profile;
#         SLURM_PROFILE=htc for its htc one), when run as root with sbatch there
#
# Two spacings (SPACINGS, default "idle back-to-back"):
#   idle          the next job is sent once the previous has ended and
#                 IDLE_GAP_MS (default 450) more have passed, so that every
#                 submission finds the cluster idle;
#   back-to-back  the next job is sent as soon as the previous one runs, as the
#                 issue words it: the pass for it follows the last one by the
#                 loop's gap between passes (a few times the last pass's cost).
# For the API it also splits each latency with the controller's own record:
# submitted_at -> the attempt's started_at (the pass that placed it) and the
# rest (the agent's long-poll answer, journal, launch, exec).
#
# Usage: bench/start_latency.sh build-bench    (release build: gpuorch,
#        gpuorch-shim and tests/libnvidia-ml.so.1; as root the jobs run as
#        gpuorch-test1)
# Environment: N (200), N_SLURM (N), MODES ("api cli slurm"), SPACINGS,
#        IDLE_GAP_MS, SLURM_BASELINE (../shared/baselines/slurm), KEEP_TMP=1.
set -euo pipefail
build=${1:?usage: bench/start_latency.sh BUILD_DIR}
bin=$(cd "$(dirname "$build/gpuorch")" && pwd)/gpuorch
shim=$(dirname "$bin")/gpuorch-shim
nvml=$build/tests/libnvidia-ml.so.1
here=$(cd "$(dirname "$0")" && pwd)
slurm_dir=${SLURM_BASELINE:-$here/../../shared/baselines/slurm}
export N=${N:-200}
export N_SLURM=${N_SLURM:-$N} IDLE_GAP_MS=${IDLE_GAP_MS:-450}
export MODES=${MODES:-api cli slurm} SPACINGS=${SPACINGS:-idle back-to-back}
for f in "$bin" "$shim" "$nvml"; do
  [ -e "$f" ] || { echo "start_latency.sh: $f is missing: build $build first" >&2; exit 2; }
done
tmp=$(mktemp -d)
chmod 0755 "$tmp"
mkdir -m 0777 "$tmp/out"
spid='' apid='' url='' token='' slurm_up=
cleanup() {
  if [ -n "$slurm_up" ]; then "$slurm_dir/setup.sh" stop >/dev/null 2>&1 || true; fi
  for p in $apid $spid; do
    if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" 2>/dev/null || true; fi
  done
  cg_remove
  if [ -n "${KEEP_TMP:-}" ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
# The agents' cgroups (bench/cgroups.sh: cg_setup, cg_root, cg_remove).
# shellcheck source=bench/cgroups.sh
. "$(dirname "$0")/cgroups.sh"
cg_setup

"$bin" server --data "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" \
  >"$tmp/server.log" 2>&1 &
spid=$!
for _ in $(seq 1 300); do
  [ -s "$tmp/port" ] && break
  sleep 0.05
done
url=http://127.0.0.1:$(cat "$tmp/port")
token=$(cat "$tmp/data/admin.token")
api() { curl -sf -H "Authorization: Bearer $token" "$@"; }
api -X PUT -d '{"description": "bench"}' "$url/v1/pools/main" >/dev/null
api -X PUT -d '{"quotas": [{"pool": "main", "guaranteed": 8}]}' "$url/v1/teams/bench" >/dev/null
user_json='{"team": "bench", "role": "member"}'
if [ "$(id -u)" = 0 ]; then
  user_json='{"team": "bench", "role": "member", "unix_user": "gpuorch-test1"}'
fi
api -X PUT -d "$user_json" "$url/v1/users/bench" >/dev/null
api -X POST "$url/v1/users/bench/tokens" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' >"$tmp/user.token"
python3 - "$tmp/gpus.json" <<'EOF'
import json, sys
gpus = [{"uuid": f"GPU-5a7e0000-0000-4000-8000-{i:012x}", "utilization": 50} for i in range(8)]
json.dump({"gpus": gpus}, open(sys.argv[1], "w"))
EOF
cg_root bench-node
FAKENVML_DRIVER=1 FAKENVML_CONFIG=$tmp/gpus.json FAKENVML_PROC_CACHE_MS=1000 "$bin" agent --server "$url" \
  --join-token "$tmp/data/join.token" --name bench-node --state-dir "$tmp/agent" \
  --nvml "$nvml" --log-listen 127.0.0.1:0 --addr 127.0.0.1 --cpus 64 --mem-mib 524288 \
  "${cgflags[@]}" >"$tmp/agent.log" 2>&1 &
apid=$!
for _ in $(seq 1 300); do
  api "$url/v1/nodes" | grep -q '"state": *"up"' && break
  sleep 0.1
done

run_driver() { # run_driver MODE SPACING
  python3 - "$1" "$2" "$url" "$tmp" "$bin" <<'EOF'
import http.client, json, os, subprocess, sys, time, urllib.parse
mode, spacing, url, tmp, binary = sys.argv[1:6]
n = int(os.environ["N_SLURM"] if mode == "slurm" else os.environ["N"])
gap = int(os.environ["IDLE_GAP_MS"]) / 1000 if spacing == "idle" else 0
u = urllib.parse.urlparse(url)
token = open(f"{tmp}/user.token").read().strip()
admin = open(f"{tmp}/data/admin.token").read().strip()
conn = http.client.HTTPConnection(u.hostname, u.port)
outdir = f"{tmp}/out/{mode}-{spacing}"
os.makedirs(outdir, mode=0o777)
os.chmod(outdir, 0o777)

def call(method, path, body=None, tok=token):
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Authorization": f"Bearer {tok}", "Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null")

def stamp(path, timeout=30):
    """Waits for the job's `date +%s.%N` in PATH; the stamp, or None."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path) as f:
                text = f.read()
            if text.endswith("\n"):
                return float(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.0005)
    return None

def ended(jid):
    while True:
        st, j = call("GET", f"/v1/jobs/{jid}", tok=admin)
        if j["state"] not in ("PENDING", "RUNNING"):
            return j
        time.sleep(0.005)

def wait_slurm_idle():
    while subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True,
                         text=True).stdout.strip():
        time.sleep(0.01)

lat, ids, acks = [], [], []
env = dict(os.environ, GPUORCH_SERVER=url, GPUORCH_TOKEN=token)
for i in range(n):
    out = f"{outdir}/{i}"
    if mode == "api":
        body = {"team": "bench", "gpus": 1, "command": ["date", "+%s.%N"], "output": out,
                "workdir": outdir}
        t0 = time.time()
        st, j = call("POST", "/v1/jobs", body)
        acks.append(time.time() - t0)
        if st != 201:
            sys.exit(f"submit: {st} {j}")
        ids.append(j["id"])
    elif mode == "cli":
        t0 = time.time()
        r = subprocess.run([binary, "submit", "--parsable", "--gpus", "1", "-o", out, "--",
                            "date", "+%s.%N"], capture_output=True, text=True, env=env,
                           cwd=outdir)
        acks.append(time.time() - t0)
        if r.returncode != 0:
            sys.exit(f"gpuorch submit: {r.returncode} {r.stderr}")
        ids.append(int(r.stdout.strip()))
    else:
        t0 = time.time()
        r = subprocess.run(["sbatch", "-G", "1", "-o", "/dev/null", "--wrap",
                            f"date +%s.%N > {out}.tmp && mv {out}.tmp {out}"],
                           capture_output=True, text=True)
        acks.append(time.time() - t0)
        if r.returncode != 0:
            sys.exit(f"sbatch: {r.returncode} {r.stderr}")
    s = stamp(out)
    if s is None:
        sys.exit(f"{mode}: job {i} did not start within 30 s")
    lat.append(s - t0)
    if gap:
        if mode == "slurm":
            wait_slurm_idle()
        else:
            ended(ids[-1])
        time.sleep(gap)

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]

ms = lambda x: f"{x * 1000:.1f}"
print(f"{mode:5} {spacing:12} n={n:4} p50_ms={ms(pct(lat, 50))} p99_ms={ms(pct(lat, 99))} "
      f"mean_ms={ms(sum(lat) / n)} max_ms={ms(max(lat))} submit_ack_p50_ms={ms(pct(acks, 50))}")
if ids:
    # The controller's part: submitted_at -> started_at of attempt 1 (the pass).
    from datetime import datetime
    t = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    ctl, starts = [], []
    for jid in ids:
        st, j = call("GET", f"/v1/jobs/{jid}", tok=admin)
        ctl.append(t(j["attempts"][0]["started_at"]) - t(j["submitted_at"]))
        starts.append(j["attempts"][0]["started_at"])
    # The agent's part: its log line once the shim runs (ms), then the exec of date.
    import re
    started = {}
    for text in open(f"{tmp}/agent.log"):
        m = re.match(r"^(\S+) gpuorch agent: job (\d+)\.1: started", text)
        if m:
            started[int(m.group(2))] = t(m.group(1))
    agent = [started[jid] - t(j0) for jid, j0 in zip(ids, starts)] if all(
        jid in started for jid in ids) else []
    print(f"{'':5} {'':12} controller (submitted_at -> pass) p50_ms={ms(pct(ctl, 50))} "
          f"p99_ms={ms(pct(ctl, 99))}; pass -> agent has started the shim "
          f"p50_ms={ms(pct(agent, 50)) if agent else '?'} "
          f"p99_ms={ms(pct(agent, 99)) if agent else '?'}")
EOF
}

cpus=$(nproc)
echo "# start_latency.sh: $N jobs per row, one agent with 8 fake GPUs, $cpus CPUs," \
  "$(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in $MODES; do
  if [ "$mode" = cli ] && ! "$bin" submit --help >/dev/null 2>&1; then
    echo "cli   (skipped: this build has no 'gpuorch submit')"
    continue
  fi
  if [ "$mode" = slurm ]; then
    continue # after gpuorch's rows, with gpuorch stopped
  fi
  for spacing in $SPACINGS; do
    run_driver "$mode" "$spacing"
  done
done

case " $MODES " in *" slurm "*) ;; *) exit 0 ;; esac
if [ "$(id -u)" != 0 ] || ! command -v sbatch >/dev/null || [ ! -x "$slurm_dir/setup.sh" ]; then
  echo "slurm (skipped: needs root, sbatch and $slurm_dir/setup.sh)"
  exit 0
fi
# Our controller and agent go first, so that both systems run alone.
for p in $apid $spid; do
  if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p" 2>/dev/null || true; fi
done
apid='' spid=''
sched=''
# The baseline's htc profile (its README), else Slurm's defaults.
htc=batch_sched_delay=0,default_queue_depth=10000,bf_interval=5,bf_continue,bf_max_job_test=10000
[ "${SLURM_PROFILE:-default}" = htc ] && sched=$htc
slurm_up=1
NNODES=1 GPUS_PER_NODE=8 SCHED_PARAMS=$sched "$slurm_dir/setup.sh" start >"$tmp/slurm.log" 2>&1 ||
  { tail -20 "$tmp/slurm.log" >&2; exit 1; }
export SLURM_CONF=${SLURM_BASELINE_DIR:-/tmp/slurm-baseline}/etc/slurm.conf
for _ in $(seq 1 100); do
  sinfo -h -o '%t' 2>/dev/null | grep -qx idle && break
  sleep 0.1
done
echo "# slurm: one node of 8 GPUs, profile ${SLURM_PROFILE:-default}"
for spacing in $SPACINGS; do
  run_driver slurm "$spacing"
done
