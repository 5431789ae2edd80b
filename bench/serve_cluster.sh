# shellcheck shell=bash
# serve_cluster.sh - sourced by bench/serve_cold.sh and bench/serve_replay.sh:
# a controller, one agent on the fake NVML and `gpuorch router`, on loopback
# with ephemeral ports and a fresh data directory under $tmp, stopped by PID
# (serve_cluster_stop, from the caller's EXIT trap: it deletes the services
# first, since replicas, as jobs, outlive their agent).
#
#   serve_cluster_start BIN NVML NGPUS
# sets url (the controller), token (admin), user_token (a member of team
# `bench`, which owns pool `main`'s NGPUS; as root its jobs run as
# gpuorch-test1) and rport (the router's port).
# shellcheck source=bench/cgroups.sh
. "$(dirname "${BASH_SOURCE[0]}")/cgroups.sh"
serve_pids=()
serve_replica_pids() { # the agent's shims of this run, and their children
  local shim
  rpids=''
  for shim in $(pgrep -f -- "--dir $tmp/agent/attempts/" || true); do
    rpids="$rpids $shim $(pgrep -P "$shim" || true)"
  done
}
serve_cluster_stop() {
  local i n names p
  # Replicas are jobs, and jobs outlive their agent (it takes them up again
  # from its journal): delete the services first, so that the agent stops
  # them, then stop what is left of this run's by PID.
  if [ -n "${url:-}" ] && [ -n "${token:-}" ]; then
    names=$(curl -s -m 5 -H "Authorization: Bearer $token" "$url/v1/services" | python3 -c '
import json, sys
print(" ".join(s["name"] for s in json.load(sys.stdin).get("services", [])))' 2>/dev/null) || names=''
    for n in $names; do
      curl -s -m 5 -o /dev/null -X DELETE -H "Authorization: Bearer $token" "$url/v1/services/$n"
    done
    for _ in $(seq 1 150); do
      serve_replica_pids
      [ -z "${rpids// /}" ] && break
      sleep 0.1
    done
  fi
  for ((i = ${#serve_pids[@]} - 1; i >= 0; i--)); do
    if kill -0 "${serve_pids[i]}" 2>/dev/null; then
      kill "${serve_pids[i]}"
      wait "${serve_pids[i]}" 2>/dev/null || true
    fi
  done
  serve_replica_pids
  for p in $rpids; do kill "$p" 2>/dev/null || true; done
  [ -z "${rpids// /}" ] || sleep 1
  for p in $rpids; do kill -9 "$p" 2>/dev/null || true; done
  cg_remove
}
serve_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
serve_cluster_start() { # BIN NVML NGPUS
  local bin=$1 nvml=$2 ngpus=$3 user_json
  cg_setup
  "$bin" server --data "$tmp/data" --listen 127.0.0.1:0 --port-file "$tmp/port" \
    >"$tmp/server.log" 2>&1 &
  serve_pids+=($!)
  for _ in $(seq 1 300); do
    [ -s "$tmp/port" ] && break
    sleep 0.05
  done
  url=http://127.0.0.1:$(cat "$tmp/port")
  token=$(cat "$tmp/data/admin.token")
  api() { curl -sf -H "Authorization: Bearer $token" "$@"; }
  api -X PUT -d '{"description": "bench"}' "$url/v1/pools/main" >/dev/null
  api -X PUT -d "{\"quotas\": [{\"pool\": \"main\", \"guaranteed\": $ngpus}]}" \
    "$url/v1/teams/bench" >/dev/null
  user_json='{"team": "bench", "role": "member"}'
  if [ "$(id -u)" = 0 ]; then
    user_json='{"team": "bench", "role": "member", "unix_user": "gpuorch-test1"}'
  fi
  api -X PUT -d "$user_json" "$url/v1/users/bench" >/dev/null
  user_token=$(api -X POST "$url/v1/users/bench/tokens" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
  python3 - "$tmp/gpus.json" "$ngpus" <<'PY'
import json, sys
n = int(sys.argv[2])
gpus = [{"uuid": f"GPU-5a7e0000-0000-4000-8000-{i:012x}", "utilization": 50} for i in range(n)]
json.dump({"gpus": gpus}, open(sys.argv[1], "w"))
PY
  cg_root bench-node
  FAKENVML_DRIVER=1 FAKENVML_CONFIG=$tmp/gpus.json FAKENVML_PROC_CACHE_MS=1000 "$bin" agent \
    --server "$url" --join-token "$tmp/data/join.token" --name bench-node \
    --state-dir "$tmp/agent" --nvml "$nvml" --log-listen 127.0.0.1:0 --addr 127.0.0.1 \
    --cpus 64 --mem-mib 524288 --pool main "${cgflags[@]}" >"$tmp/agent.log" 2>&1 &
  serve_pids+=($!)
  for _ in $(seq 1 300); do
    api "$url/v1/nodes" | grep -q '"state": *"up"' && break
    sleep 0.1
  done
  rport=$(serve_free_port)
  "$bin" router --server "$url" --join-token "$tmp/data/join.token" \
    --listen "127.0.0.1:$rport" --name bench >"$tmp/router.log" 2>&1 &
  serve_pids+=($!)
  for _ in $(seq 1 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$rport/healthz")" = 200 ] &&
      return 0
    kill -0 "${serve_pids[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  echo "the router did not come up:" >&2
  tail -20 "$tmp/router.log" >&2
  return 1
}
