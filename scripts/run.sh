#!/usr/bin/env bash
# run.sh [BUILD] - a whole gpuorch cluster on this machine: what `make run` runs
# once it has built BUILD (default build).
#
#   - a controller (`gpuorch server`) on 127.0.0.1:$GPUORCH_PORT (default 8080;
#     0 takes any free port), its SQLite store in RUN_DIR/data;
#   - the starter configuration, deploy/starter.yaml, loaded with `gpuorch apply`;
#   - node agents: one on this machine's GPUs when NVML finds any, else two
#     agents on the fake NVML (BUILD/tests/libnvidia-ml.so.1), nodes gpu-a and
#     gpu-b of 8 x H100-80GB each;
#   - the CLI's config file, RUN_DIR/config (and ~/.config/gpuorch/config when
#     there is none);
#   - one router (`gpuorch router`) on 127.0.0.1:$GPUORCH_ROUTER_PORT (default
#     8081), in front of the services' replicas, when this gpuorch has the
#     router and the port is free; otherwise it says why and runs without one.
#
# RUN_DIR is $GPUORCH_RUN_DIR, default ./gpuorch-run; it keeps the store, the
# agents' state and every log across runs. The script waits; SIGINT (Ctrl-C) or
# SIGTERM stops the router, cancels the jobs that have not ended, stops the
# agents, then the server, each by PID, and exits 0. A second Ctrl-C skips waiting for the
# jobs' grace period. Exit status: 0 stopped as asked, 1 could not start or a
# process it started died.
#
# As root, jobs run as their submitter's unix_user; the admin's is root, so the
# agents get --allow-root. That is for this dev cluster on one machine only:
# a real node runs its agent without it (docs/admin-guide.md).
# shellcheck disable=SC2317 # functions called from traps and wait_for
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
[ -d "$build" ] || { echo "gpuorch run: no build directory '$build' (make run builds it)" >&2; exit 1; }
bin=$(cd "$build" && pwd)/gpuorch
fakenvml=$(cd "$build" && pwd)/tests/libnvidia-ml.so.1
port=${GPUORCH_PORT:-8080}
router_port=${GPUORCH_ROUTER_PORT:-8081}
run_dir=${GPUORCH_RUN_DIR:-./gpuorch-run}

# The fake cluster: what each node offers. A DGX H100's 112 cores and 2 TiB,
# not this machine's: 16 one-GPU jobs (1 CPU and 1 GiB each by default) fit
# on the smallest VM, since nothing here really computes.
FAKE_NODES=(gpu-a gpu-b)
FAKE_GPUS_PER_NODE=8
FAKE_CPUS=112
FAKE_MEM_MIB=2097152

say() { echo "gpuorch run: $*"; }
die() {
    echo "gpuorch run: $*" >&2
    exit 1
}

[ -x "$bin" ] || die "$bin is missing: build it first (make run builds it)"
case $port in
'' | *[!0-9]*) die "GPUORCH_PORT: expected a port number, got '$port'" ;;
esac
[ "$port" -le 65535 ] || die "GPUORCH_PORT: expected a port number, got '$port'"
case $router_port in
'' | *[!0-9]* | 0) die "GPUORCH_ROUTER_PORT: expected a port number from 1, got '$router_port'" ;;
esac
[ "$router_port" -le 65535 ] || die "GPUORCH_ROUTER_PORT: expected a port number, got '$router_port'"

mkdir -p "$run_dir"
run_dir=$(cd "$run_dir" && pwd)
data=$run_dir/data
logs=$run_dir/logs
agents_dir=$run_dir/agents
config=$run_dir/config
mkdir -p "$logs" "$agents_dir"

# One make run per run directory: the store and the agents' journals are not
# to be shared. The lock is fd 9, closed in every child (9>&-) so that it goes
# with this script.
exec 9>>"$run_dir/run.lock"
flock -n 9 || die "another make run uses $run_dir (set GPUORCH_RUN_DIR for a second one)"

if [ "$port" != 0 ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "127.0.0.1:$port is busy (another gpuorch server?); free it, or choose another port: GPUORCH_PORT=8081 make run"
fi

# The CLI reads only the file this script writes: a server or token in the
# caller's environment must not send `apply` elsewhere.
unset GPUORCH_SERVER GPUORCH_TOKEN GPUORCH_TOKEN_FILE
export GPUORCH_CONFIG=$config

# A tag of this run directory (8 hex digits) that keeps two clusters on one
# machine (a developer's make run and the test of it) apart: the fake GPUs'
# UUIDs (the fake NVML finds a GPU's processes by the UUIDs in their
# environment) and the agents' cgroups (both name theirs job-JOB.ATTEMPT).
tag=$(printf '%08x' "$(printf '%s' "$run_dir" | cksum | cut -d' ' -f1)")

server_pid=
router_pid=
router_text=
agent_pids=()
agent_names=()
cgroup_dir=
cgroup_mnt=
hurry=0

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# Waits up to $2 seconds for PID $1 to end (reaped: it is our child).
wait_gone() {
    local pid=$1 n=$(($2 * 10))
    while alive "$pid" && [ "$n" -gt 0 ]; do
        sleep 0.1
        n=$((n - 1))
    done
    ! alive "$pid"
}

# SIGTERM, then SIGKILL after $3 seconds, to the process $2 names ($1).
stop_pid() {
    local what=$1 pid=$2 grace=$3
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$grace"; then
        say "$what (pid $pid) did not stop in ${grace} s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}

# --- stopping -------------------------------------------------------------

# Cancels every job that has not ended, and waits (at most 45 s: the grace
# period of a cancel is 30 s) until none is left. A job's shim outlives its
# agent by design, so without this a stopped dev cluster would leave jobs
# running; pending jobs are cancelled too, so that the next make run does not
# start them behind the user's back. A job that a running array or a
# requeue brings meanwhile is cancelled as it appears.
cancel_jobs() {
    local ids new id done_ids=" " n=90
    while :; do
        ids=$("$bin" queue --json 2>/dev/null | jobs_not_ended) || return 0
        [ -n "$ids" ] || return 0
        new=
        for id in $ids; do
            case $done_ids in *" $id "*) ;; *) new="$new $id" ;; esac
        done
        if [ -n "$new" ]; then
            [ "$done_ids" = " " ] &&
                say "cancelling the jobs that have not ended (Ctrl-C again: do not wait for them)"
            say "  cancel$new"
            # shellcheck disable=SC2086 # one argument per id
            "$bin" cancel $new >/dev/null 2>&1 || true
            done_ids="$done_ids${new# } "
        fi
        if [ "$hurry" = 1 ] || [ "$n" -le 0 ]; then
            say "jobs still ending: $ids; stopping the agents anyway"
            return 0
        fi
        sleep 0.5
        n=$((n - 1))
    done
}

# The ids of the jobs in `gpuorch queue --json` that have not ended.
jobs_not_ended() {
    python3 -c '
import json, sys
doc = json.load(sys.stdin)
jobs = doc["jobs"] if isinstance(doc, dict) else doc
ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL"}
print(" ".join(str(j["id"]) for j in jobs if j["state"] not in ended))'
}

# What a job left behind when its agent could not stop it (an agent that
# died, a job still in its grace period): each attempt's shim and command.
# The shim's command line names the attempt's directory under our agents'
# state; its command leads a process group whose pid is in ATTEMPT/pid.
kill_leftovers() {
    local p cmd pid dir
    for p in /proc/[0-9]*; do
        cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
        case $cmd in
        *"gpuorch-shim --dir $agents_dir/"*) ;;
        *) continue ;;
        esac
        pid=${p#/proc/}
        dir=${cmd#*"gpuorch-shim --dir "}
        dir=${dir%% *}
        if [ -f "$dir/pid" ]; then
            kill -KILL -- "-$(cat "$dir/pid")" 2>/dev/null || true
        fi
        kill -KILL "$pid" 2>/dev/null || true
        say "killed the leftovers of attempt ${dir##*/} (shim pid $pid)"
    done
    if [ -n "$cgroup_dir" ]; then
        for p in "$cgroup_dir"/*/job-*; do
            if [ -d "$p" ]; then echo 1 >"$p/cgroup.kill" 2>/dev/null || true; fi
        done
    fi
}

# Stops what this script started, in order: jobs, agents, server. Runs once.
cleanup() {
    local rc=$?
    trap '' EXIT
    trap 'hurry=1' INT TERM
    # The router first: it sends no new request to a replica being stopped.
    stop_pid "the router" "$router_pid" 20
    if alive "$server_pid" && [ -s "$config" ]; then
        cancel_jobs
    fi
    local i
    for i in "${!agent_pids[@]}"; do
        kill -TERM "${agent_pids[$i]}" 2>/dev/null || true
    done
    for i in "${!agent_pids[@]}"; do
        stop_pid "agent ${agent_names[$i]}" "${agent_pids[$i]}" 20
    done
    kill_leftovers
    stop_pid "the server" "$server_pid" 20
    if [ -n "$cgroup_dir" ]; then
        # A killed attempt's cgroup empties a moment after its last process.
        local n=20
        while [ -d "$cgroup_dir" ] && [ "$n" -gt 0 ]; do
            rmdir "$cgroup_dir"/*/job-* "$cgroup_dir"/* "$cgroup_dir" 2>/dev/null || sleep 0.1
            n=$((n - 1))
        done
        # Its twins in the cpu and memory v1 hierarchies, where the agents put
        # the limits cgroup2 lacks (docs/agent.md), at the same path there.
        local v1 rel=${cgroup_dir#"$cgroup_mnt"}
        while read -r v1; do
            if [ -d "$v1$rel" ]; then rmdir "$v1$rel"/*/job-* "$v1$rel"/* "$v1$rel" 2>/dev/null || true; fi
        done < <(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup") print $5; break } }' \
            /proc/self/mountinfo)
    fi
    if [ -n "$server_pid" ]; then
        say "stopped (${router_pid:+the router, }agents, then the server); the store and the logs stay in $run_dir"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- starting -------------------------------------------------------------

# The cgroup v2 directory for this run's agents (made here, with the cpu and
# memory controllers passed down where offered), or nothing: then each agent
# decides for itself and says so in its log.
make_cgroup_dir() {
    [ "$(id -u)" = 0 ] || return 0
    local mnt dir level c
    mnt=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' \
        /proc/self/mountinfo | head -n 1)
    [ -n "$mnt" ] || return 0
    dir=$mnt/gpuorch/run-$tag
    mkdir -p "$dir" 2>/dev/null || return 0
    for level in "$mnt/gpuorch" "$dir"; do
        for c in cpu memory; do
            if grep -qw "$c" "$level/cgroup.controllers" 2>/dev/null; then
                echo "+$c" >"$level/cgroup.subtree_control" 2>/dev/null || true
            fi
        done
    done
    echo "$dir"
}

start_server() {
    rm -f "$run_dir/port"
    echo "---- $(date -u +%FT%TZ) make run: starting the server" >>"$logs/server.log"
    setsid "$bin" server --data "$data" --listen "127.0.0.1:$port" --port-file "$run_dir/port" \
        </dev/null >>"$logs/server.log" 2>&1 9>&- &
    server_pid=$!
    local n=300
    until [ -s "$run_dir/port" ] && [ "$(tail -c 1 "$run_dir/port" | od -An -c | tr -d ' ')" = '\n' ]; do
        if ! alive "$server_pid"; then
            wait "$server_pid" 2>/dev/null || true
            server_pid=
            tail -n 5 "$logs/server.log" >&2
            die "the server did not start (log: $logs/server.log)"
        fi
        [ "$n" -gt 0 ] || die "the server did not start in 30 s (log: $logs/server.log)"
        sleep 0.1
        n=$((n - 1))
    done
    port=$(tr -d '\n' <"$run_dir/port")
}

# The CLI's configuration: RUN_DIR/config, rewritten at each start (the port
# may change), and the user's own file when there is none yet; an existing
# one is never touched.
write_config() {
    local text
    text="# gpuorch CLI configuration, written by make run (scripts/run.sh)
server = http://127.0.0.1:$port
token_file = $data/admin.token"
    printf '%s\n' "$text" >"$config.tmp"
    mv "$config.tmp" "$config"
    home_config=
    home_config_note=
    local base=${XDG_CONFIG_HOME:-${HOME:+$HOME/.config}}
    [ -n "$base" ] || return 0
    local hc=$base/gpuorch/config
    if [ ! -e "$hc" ]; then
        mkdir -p "$base/gpuorch"
        printf '%s\n' "$text" >"$hc"
        home_config=$hc
    elif [ "$(cat "$hc")" = "$text" ]; then
        home_config=$hc
    else
        home_config_note="$hc names another server or token: it was left as it is"
    fi
}

# Writes the fake NVML's GPU file of node $1 (letter $2): 8 H100s on one
# NVSwitch (each GPU's NVLinks reach the 7 others), UUIDs unique to the node
# and to this run directory. No utilization or memory figures: the fake then
# reports its jobs' CPU time and what they asked (tests/fakenvml/README.md,
# "Busy GPUs"), so the dashboard's charts move.
write_fake_gpus() {
    local name=$1 letter=$2 file=$agents_dir/$1-gpus.json i j peers sep=""
    {
        echo '{"driver_version": "550.54.15", "gpus": ['
        for ((i = 0; i < FAKE_GPUS_PER_NODE; i++)); do
            peers=""
            for ((j = 0; j < FAKE_GPUS_PER_NODE; j++)); do
                [ "$j" = "$i" ] || peers="$peers${peers:+, }$j"
            done
            # The node's letter and the index lead: a UUID's first 12 characters
            # (what `gpuorch service show` prints) tell the GPUs apart.
            printf '%s  {"uuid": "GPU-%s%s%x-%s00-4000-8000-%012x", "name": "NVIDIA H100 80GB HBM3",\n' \
                "$sep" "${tag:0:6}" "$letter" $((i % 16)) "${tag:6:2}" "$i"
            printf '   "memory_mib": 81559, "nvlink_peers": [%s]}' "$peers"
            sep=$',\n'
        done
        printf '\n]}\n'
    } >"$file.tmp"
    mv "$file.tmp" "$file"
}

# Starts agent $1 with the extra arguments that follow; FAKENVML_CONFIG and
# FAKENVML_PROC_CACHE_MS come from the caller's environment.
start_agent() {
    local name=$1
    shift
    local args=(agent --server "http://127.0.0.1:$port" --join-token "$data/join.token"
        --name "$name" --pool main --state-dir "$agents_dir/$name"
        --addr 127.0.0.1 --log-listen 127.0.0.1:0)
    [ "$(id -u)" = 0 ] && args+=(--allow-root)
    if [ -n "$cgroup_dir" ] && mkdir -p "$cgroup_dir/$name" 2>/dev/null; then
        args+=(--cgroup-root "$cgroup_dir/$name")
    fi
    echo "---- $(date -u +%FT%TZ) make run: starting agent $name" >>"$logs/$name.log"
    # FAKENVML_DRIVER: the fake NVML keeps a root process that lists GPU
    # processes once the agent's network half drops root (real NVML ignores it).
    FAKENVML_DRIVER=1 setsid "$bin" "${args[@]}" "$@" </dev/null >>"$logs/$name.log" 2>&1 9>&- &
    agent_pids+=($!)
    agent_names+=("$name")
}

# Starts one router on 127.0.0.1:$router_port when this gpuorch has one
# (`gpuorch router --help` works) and the port is free, and waits up to 10 s
# for it to listen. Sets router_text to its address, or to why there is none:
# the cluster runs without a router rather than not at all.
start_router() {
    if ! "$bin" router --help >/dev/null 2>&1; then
        router_text="none: this gpuorch has no router ('gpuorch router --help' fails)"
        return 0
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$router_port") 2>/dev/null; then
        router_text="none: 127.0.0.1:$router_port is busy (GPUORCH_ROUTER_PORT chooses another)"
        return 0
    fi
    echo "---- $(date -u +%FT%TZ) make run: starting the router" >>"$logs/router.log"
    setsid "$bin" router --server "http://127.0.0.1:$port" --join-token "$data/join.token" \
        --listen "127.0.0.1:$router_port" </dev/null >>"$logs/router.log" 2>&1 9>&- &
    router_pid=$!
    local n=100
    until (exec 3<>"/dev/tcp/127.0.0.1/$router_port") 2>/dev/null; do
        if ! alive "$router_pid" || [ "$n" -le 0 ]; then
            tail -n 5 "$logs/router.log" >&2
            stop_pid "the router" "$router_pid" 5
            router_pid=
            router_text="none: the router did not start (log: $logs/router.log)"
            return 0
        fi
        sleep 0.1
        n=$((n - 1))
    done
    router_text="http://127.0.0.1:$router_port  (the services: /v1/chat/completions by model, /s/NAME/...)"
}

# Waits until every agent's node is up in `gpuorch nodes --json`.
wait_nodes() {
    local n=300 i up
    while :; do
        for i in "${!agent_pids[@]}"; do
            if ! alive "${agent_pids[$i]}"; then
                tail -n 5 "$logs/${agent_names[$i]}.log" >&2
                die "agent ${agent_names[$i]} stopped (log: $logs/${agent_names[$i]}.log)"
            fi
        done
        up=$("$bin" nodes --json 2>/dev/null | python3 -c '
import json, sys
doc = json.load(sys.stdin)
nodes = doc["nodes"] if isinstance(doc, dict) else doc
print(" ".join(sorted(n["name"] for n in nodes if n["state"] == "up")))' 2>/dev/null) || up=
        local all=1
        for i in "${agent_names[@]}"; do
            case " $up " in *" $i "*) ;; *) all=0 ;; esac
        done
        [ "$all" = 1 ] && return 0
        [ "$n" -gt 0 ] || die "the agents did not register in 30 s (logs: $logs/)"
        sleep 0.1
        n=$((n - 1))
    done
}

cgroup_dir=$(make_cgroup_dir)
cgroup_mnt=${cgroup_dir%/gpuorch/run-"$tag"}
start_server
write_config
# Prices name GPU types the nodes register: that last section waits for them.
sed '/^prices:/,$d' "$root/deploy/starter.yaml" | "$bin" apply -f - | sed 's/^/  /' ||
    die "gpuorch apply -f deploy/starter.yaml failed"

# Real GPUs when NVML finds some, else the fake cluster.
gpus=$("$bin" agent --probe 2>/dev/null | grep -o '"gpus": *[0-9]*' | head -n 1 | grep -o '[0-9]*$') || gpus=0
try_gpus=2
if [ "${gpus:-0}" -gt 0 ]; then
    [ "$gpus" -ge 2 ] || try_gpus=1
    host=$(hostname)
    start_agent "$host"
    nodes_text="$host: $gpus GPU(s) found by NVML (gpuorch nodes shows them)"
else
    export FAKENVML_PROC_CACHE_MS=1000 # one /proc scan a second per agent, not one per GPU call
    letter=a
    for name in "${FAKE_NODES[@]}"; do
        write_fake_gpus "$name" "$letter"
        FAKENVML_CONFIG=$agents_dir/$name-gpus.json start_agent "$name" --nvml "$fakenvml" \
            --cpus "$FAKE_CPUS" --mem-mib "$FAKE_MEM_MIB"
        letter=$(echo "$letter" | tr 'a-y' 'b-z')
    done
    names="${FAKE_NODES[*]}"
    nodes_text="${names// /, }: $FAKE_GPUS_PER_NODE x H100-80GB each, on the fake NVML (no NVIDIA GPU found)"
fi
wait_nodes
start_router
"$bin" apply -f "$root/deploy/starter.yaml" | { grep -v ' unchanged$' || true; } | sed 's/^/  /' ||
    echo "  (prices not applied: the GPUs are not of the starter file's types)"

# The commands to try: the CLI finds the cluster through the user's own
# config file when this script wrote it, else through GPUORCH_CONFIG.
cli=./$build/gpuorch
case $build in /*) cli=$build/gpuorch ;; esac
export_line=
[ -n "$home_config" ] || export_line="  export GPUORCH_CONFIG=$config"

cat <<EOF

gpuorch is running: a controller$([ -n "$router_pid" ] && echo , || echo ' and') $(echo "${agent_names[@]}" | wc -w) agent(s)${router_pid:+ and a router} on this machine.

  API          http://127.0.0.1:$port  (docs/api.md)
  router       $router_text
  admin token  $data/admin.token
  CLI config   $config${home_config:+ (and $home_config)}
  nodes        $nodes_text
  teams        research, product; classes low, normal, high (deploy/starter.yaml)
  logs         $logs/
EOF
[ -n "$home_config_note" ] && echo "  note         $home_config_note"
cat <<EOF

Try, in another terminal (in $PWD):
${export_line:+$export_line
}  $cli submit --team research --gpus $try_gpus -- sh -c 'echo \$CUDA_VISIBLE_DEVICES'
  $cli queue
  $cli logs JOB          (JOB: the id that submit printed)

EOF
if [ "$(id -u)" = 0 ]; then
    echo "Jobs run as their user's unix_user; the admin's is root, so the agents have"
    echo "--allow-root: right for this dev cluster on one machine, not for real nodes."
else
    echo "The agents are not root: every job runs as $(id -un)."
fi
[ -n "$router_pid" ] && echo "Ctrl-C stops it all: the router, then jobs that have not ended are cancelled," ||
    echo "Ctrl-C stops it all: jobs that have not ended are cancelled,"
echo "then the agents and the server stop. Guides: docs/user-guide.md, docs/admin-guide.md."

# --- waiting --------------------------------------------------------------

stop=0
trap 'stop=1' INT TERM
while [ "$stop" = 0 ]; do
    sleep 1 &
    wait $! 2>/dev/null || true
    [ "$stop" = 0 ] || break
    if ! alive "$server_pid"; then
        say "the server stopped by itself (log: $logs/server.log)"
        exit 1
    fi
    if [ -n "$router_pid" ] && ! alive "$router_pid"; then
        say "the router stopped by itself (log: $logs/router.log)"
        exit 1
    fi
    for i in "${!agent_pids[@]}"; do
        if ! alive "${agent_pids[$i]}"; then
            say "agent ${agent_names[$i]} stopped by itself (log: $logs/${agent_names[$i]}.log)"
            exit 1
        fi
    done
done
echo
exit 0
