#!/usr/bin/env bash
# make_run_test.sh [SRC_ROOT] - `make run` as a new user meets it: on
# a machine as root, scripts/setup.sh twice (the second run must change
# nothing and print nothing), then `make run` from a clean build directory in
# the background with its own run directory and any free port; once it says it
# runs: the printed address, token and commands, the router's address (a
# router listening there) or why it runs without one, the nodes, the starter
# configuration, a job submitted with the CLI seen COMPLETED and its log; a
# second make run on a busy port or the same run directory refused; then
# SIGINT to make run's process group (as Ctrl-C sends it), and every process
# it started (server, agents, router, a job still running, its shim) gone.
#
# Prints TAP. Skips when not root: setup.sh installs packages, and the
# agents run the admin's jobs as root. MAKE_RUN_TEST_BUILD_S (default 1200)
# bounds the build and start.
# shellcheck disable=SC2317 # functions called from traps and wait_for
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
root=$(cd "$root" && pwd)

echo "TAP version 13"
if [ "$(id -u)" != 0 ]; then
    echo "1..0 # SKIP make run's test needs root (setup.sh installs packages; jobs run as root)"
    exit 0
fi

# Run from `make test`, the outer make's jobserver is not ours to use.
unset MAKEFLAGS MFLAGS MAKELEVEL
tmp=$(mktemp -d /tmp/gpuorch-mrtest.XXXXXX)
# The agents' network half runs as the gpuorch account: it must reach its
# state directory below here (mktemp's 0700 would keep it out).
chmod 0755 "$tmp"
build=$tmp/build # clean: made by this make run
run=$tmp/run
home=$tmp/home # make run writes ~/.config/gpuorch/config when missing
mkdir -p "$home"
make_pid=

n=0
failed=0
ok() {
    n=$((n + 1))
    echo "ok $n - $1"
}
not_ok() {
    n=$((n + 1))
    failed=1
    echo "not ok $n - $1"
    [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/#   /'
    return 0
}
check() { # check NAME DETAIL CONDITION-COMMAND...
    local name=$1 detail=$2
    shift 2
    if "$@"; then ok "$name"; else not_ok "$name" "$detail"; fi
}
diag() { printf '%s\n' "$1" | sed 's/^/# /'; }

# The pids of processes whose command line names this test's directory:
# make run's server, agents and shims (their --data, --state-dir, --dir).
our_pids() {
    local p cmd
    for p in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
        case $cmd in *"$tmp/"*) echo "${p#/proc/}" ;; esac
    done
}

finish() {
    # Whatever is left (a failed test), by pid: make run's group, then the
    # processes that name our directory, then the job this test started.
    if [ -n "$make_pid" ] && kill -0 "$make_pid" 2>/dev/null; then
        kill -TERM -- "-$make_pid" 2>/dev/null
        sleep 5
        kill -KILL -- "-$make_pid" 2>/dev/null
    fi
    local p
    for p in $(our_pids); do kill -KILL "$p" 2>/dev/null; done
    [ -s "$tmp/job.pid" ] && kill -KILL "$(cat "$tmp/job.pid")" 2>/dev/null
    rm -rf "$tmp"
}
trap finish EXIT

# Polls COMMAND... every 0.2 s for up to $1 seconds; true once it succeeds.
wait_for() {
    local limit=$1
    shift
    local end=$((SECONDS + limit))
    while [ "$SECONDS" -lt "$end" ]; do
        "$@" && return 0
        sleep 0.2
    done
    "$@"
}

# 1. setup.sh, twice.
out=$("$root/scripts/setup.sh" 2>&1)
rc=$?
check "scripts/setup.sh succeeds as root" "rc=$rc; output:
$out" [ $rc -eq 0 ]
out=$("$root/scripts/setup.sh" 2>&1)
rc=$?
check "scripts/setup.sh run again exits 0 and prints nothing (idempotent)" "rc=$rc; output:
$out" [ $rc -eq 0 ] && [ -z "$out" ]

# 2. make run in the background, in a process group of its own (set -m), so
#    that SIGINT reaches make and run.sh as a terminal's Ctrl-C does and this
#    script does not get it. Without job control a background command would
#    start with SIGINT ignored.
# The router's port: a free one, not a developer's 8081.
router_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
set -m
HOME=$home GPUORCH_RUN_DIR=$run GPUORCH_PORT=0 GPUORCH_ROUTER_PORT=$router_port \
    make -C "$root" --no-print-directory run BUILD="$build" </dev/null >"$tmp/make.log" 2>&1 &
make_pid=$!
set +m
running() { grep -q '^gpuorch is running' "$tmp/make.log" || ! kill -0 "$make_pid" 2>/dev/null; }
wait_for "${MAKE_RUN_TEST_BUILD_S:-1200}" running
if ! grep -q '^gpuorch is running' "$tmp/make.log"; then
    not_ok "make run builds from a clean directory and starts a cluster" "$(tail -n 40 "$tmp/make.log")"
    echo "1..$n"
    exit 1
fi
ok "make run builds from a clean directory and starts a cluster"
diag "$(sed -n '/^gpuorch is running/,$p' "$tmp/make.log")"

bin=$build/gpuorch
export GPUORCH_CONFIG=$run/config
unset GPUORCH_SERVER GPUORCH_TOKEN GPUORCH_TOKEN_FILE
port=$(sed -n 's|^server = http://127.0.0.1:\([0-9]*\)$|\1|p' "$run/config")
log=$(cat "$tmp/make.log")
check "it prints the API address" "$log" grep -q "API  *http://127.0.0.1:$port" "$tmp/make.log"
check "it prints where the admin token is, and the file is there" "$log" \
    bash -c "grep -q 'admin token  *$run/data/admin.token' '$tmp/make.log' && [ -s '$run/data/admin.token' ]"
check "it prints three commands to try: submit, queue, logs" "$log" \
    bash -c "grep -q 'gpuorch submit ' '$tmp/make.log' && grep -q 'gpuorch queue' '$tmp/make.log' &&
             grep -q 'gpuorch logs ' '$tmp/make.log'"
router_line=$(grep -E '^  router  +' "$tmp/make.log" | head -n 1)
router_named() { [[ $router_line =~ ^\ \ router\ +(http://127\.0\.0\.1:$router_port\ |none:\ ) ]]; }
check "it prints the router's address, or why it runs without one" "$log" router_named
case $router_line in
*http://*)
    check "the router listens on 127.0.0.1:$router_port" "$(tail -n 5 "$run/logs/router.log" 2>&1)" \
        bash -c "(exec 3<>/dev/tcp/127.0.0.1/$router_port) 2>/dev/null"
    ;;
*) diag "no router: ${router_line#*none: }" ;;
esac
check "it writes the CLI's config file, and ~/.config/gpuorch/config when there is none" \
    "$(cat "$run/config" "$home/.config/gpuorch/config" 2>&1)" \
    cmp -s "$run/config" "$home/.config/gpuorch/config"

# 3. The nodes: the fake cluster's two nodes of 8 H100s, or one node on real GPUs.
"$bin" nodes --json >"$tmp/nodes.json" 2>&1
nodes=$(python3 - "$tmp/nodes.json" 2>&1 <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = []
for n in sorted(doc["nodes"], key=lambda n: n["name"]):
    types = sorted({g["gpu_type"] for g in n["gpus"]}) or ["-"]
    rows.append(f"{n['name']}:{n['state']}:{len(n['gpus'])}:{','.join(types)}")
print(" ".join(rows))
EOF
)
if grep -q 'on the fake NVML' "$tmp/make.log"; then
    check "without GPUs: nodes gpu-a and gpu-b, up, 8 H100-80GB each" "$nodes" \
        [ "$nodes" = "gpu-a:up:8:H100-80GB gpu-b:up:8:H100-80GB" ]
else
    check "with GPUs: one node, up" "$nodes" bash -c "[[ '$nodes' =~ ^[^\ ]+:up:[0-9]+:[^\ ]+$ ]]"
fi

# 4. The starter configuration is in, and applying it again changes nothing.
"$bin" apply -f "$root/deploy/starter.yaml" >"$tmp/apply" 2>&1
rc=$?
check "applying deploy/starter.yaml again changes nothing" "rc=$rc; $(cat "$tmp/apply")" \
    bash -c "[ $rc -eq 0 ] && ! grep -Eq 'created|configured' '$tmp/apply'"

# 5. A job submitted with the CLI completes, and its log shows its two GPUs.
# shellcheck disable=SC2016 # the job's shell expands it
"$bin" submit --team research --gpus 2 -- sh -c 'echo "gpus=$CUDA_VISIBLE_DEVICES"' \
    >"$tmp/submit" 2>&1
rc=$?
job=$(grep -o '[0-9][0-9]*' "$tmp/submit" | head -n 1)
check "gpuorch submit is accepted and prints the job id" "rc=$rc; $(cat "$tmp/submit")" \
    bash -c "[ $rc -eq 0 ] && [ -n '$job' ]"
state_of() { "$bin" show "$1" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null; }
completed() { [ "$(state_of "$job")" = COMPLETED ]; }
wait_for 60 completed
check "the job is COMPLETED within 60 s" "state: $(state_of "$job"); $("$bin" show "$job" 2>&1)" completed
"$bin" logs "$job" >"$tmp/logs" 2>&1
check "gpuorch logs shows the job's two GPU UUIDs" "$(cat "$tmp/logs")" \
    grep -Eq '^gpus=GPU-[0-9a-f-]{36},GPU-[0-9a-f-]{36}$' "$tmp/logs"

# 6. A second make run: refused on a busy port, and on the same run directory.
HOME=$home GPUORCH_RUN_DIR=$tmp/run2 GPUORCH_PORT=$port \
    make -C "$root" --no-print-directory run BUILD="$build" </dev/null >"$tmp/busy.log" 2>&1
rc=$?
check "a second make run on a busy port says so and fails" "rc=$rc; $(cat "$tmp/busy.log")" \
    bash -c "[ $rc -ne 0 ] && grep -q '127.0.0.1:$port is busy' '$tmp/busy.log'"
HOME=$home GPUORCH_RUN_DIR=$run GPUORCH_PORT=0 \
    make -C "$root" --no-print-directory run BUILD="$build" </dev/null >"$tmp/same.log" 2>&1
rc=$?
check "a second make run on the same run directory says so and fails" "rc=$rc; $(cat "$tmp/same.log")" \
    bash -c "[ $rc -ne 0 ] && grep -q 'another make run uses $run' '$tmp/same.log'"

# 7. A job still running when make run stops: it must not outlive the cluster.
"$bin" submit --team research --gpus 1 -- sh -c "echo \$\$ >$tmp/job.pid; exec sleep 600" \
    >"$tmp/submit2" 2>&1
job2=$(grep -o '[0-9][0-9]*' "$tmp/submit2" | head -n 1)
job2_running() { [ "$(state_of "$job2")" = RUNNING ] && [ -s "$tmp/job.pid" ]; }
wait_for 30 job2_running
check "a long job runs" "$(cat "$tmp/submit2"); state: $(state_of "$job2")" job2_running
job_pid=$(cat "$tmp/job.pid" 2>/dev/null)
pids=$(our_pids | tr '\n' ' ')
for p in $pids; do
    diag "make run's process $p: $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | cut -c1-110)"
done
diag "the job's process: $job_pid"

# 8. Ctrl-C: SIGINT to make run's process group.
kill -INT -- "-$make_pid"
stopped() { ! kill -0 "$make_pid" 2>/dev/null; }
wait_for 90 stopped
check "make run stops within 90 s of SIGINT" "$(tail -n 20 "$tmp/make.log")" stopped
wait "$make_pid" 2>/dev/null
check "run.sh says it cancelled the running job and stopped" "$(tail -n 20 "$tmp/make.log")" \
    bash -c "grep -Eq 'cancel( [0-9]+)* $job2( |$)' '$tmp/make.log' &&
             grep -q 'gpuorch run: stopped' '$tmp/make.log'"
# A zombie has stopped running: where pid 1 does not reap orphans (some
# containers), the agents' exited children stay zombies.
left=
for p in $pids $job_pid; do
    if kill -0 "$p" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null; then
        left="$left $p ($(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline"))"
    fi
done
check "every process make run started is gone: server, agents, router, the job and its shim" \
    "still there:$left" [ -z "$left" ]
check "nothing listens on the API port or the router's any more" "ports $port, $router_port" \
    bash -c "! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/$router_port) 2>/dev/null"
check "the job's attempt ended with a status file (it was stopped, not orphaned)" \
    "$(ls "$run"/agents/*/attempts/ 2>&1)" \
    bash -c "ls '$run'/agents/*/attempts/$job2.1/status >/dev/null 2>&1"

echo "1..$n"
exit $failed
